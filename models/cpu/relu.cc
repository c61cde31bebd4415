#include "models/cpu/relu.h"

#include <utility>

namespace pstrain::models::cpu {

Relu::Relu(std::string name, Shape shape, int max_batch)
    : CpuLayer(std::move(name), shape, shape, max_batch) {}

absl::Status Relu::Forward(const BatchContext& ctx, const float* params, const float* x, float* y) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  const int64_t size = ctx.n * input_shape().size();
  ArrayMap(y, size) = ConstArrayMap(x, size).max(0.0f);
  return absl::OkStatus();
}

absl::Status Relu::Backward(const BatchContext& ctx, const float* params, const float* x,
                            const float* y, const float* dy, float* dx, float* dparams) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  if (dx == nullptr) return absl::OkStatus();
  const int64_t size = ctx.n * input_shape().size();
  const ConstArrayMap out(y, size);
  ArrayMap(dx, size) = (out > 0.0f).select(ConstArrayMap(dy, size), 0.0f);
  return absl::OkStatus();
}

}  // namespace pstrain::models::cpu

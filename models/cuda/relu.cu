#include <utility>

#include "common/status_macros.h"
#include "models/cuda/cuda_status.h"
#include "models/cuda/launch.h"
#include "models/cuda/relu.h"

namespace pstrain::models::cuda {
namespace {

// std::max(x, 0) = x < 0 ? 0 : x, as the CPU's Eigen max(0.0f) computes it
// (its SSE/AVX form is the same select): a NaN stays NaN and -0 stays -0.
__global__ void ReluForwardKernel(const float* x, int64_t size, float* y) {
  PSTRAIN_GRID_STRIDE_LOOP(i, size) {
    const float v = x[i];
    y[i] = v < 0.0f ? 0.0f : v;
  }
}

__global__ void ReluBackwardKernel(const float* y, const float* dy, int64_t size, float* dx) {
  PSTRAIN_GRID_STRIDE_LOOP(i, size) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; }
}

}  // namespace

Relu::Relu(CudaContext& context, std::string name, Shape shape, int max_batch)
    : CudaLayer(context, std::move(name), shape, shape, max_batch) {}

absl::Status Relu::Forward(const BatchContext& ctx, const float* params, const float* x, float* y) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  const int64_t size = ctx.n * input_shape().size();
  return LaunchKernel("ReluForwardKernel", [&] {
    ReluForwardKernel<<<BlocksFor(size), kThreadsPerBlock, 0, stream()>>>(x, size, y);
  });
}

absl::Status Relu::Backward(const BatchContext& ctx, const float* params, const float* x,
                            const float* y, const float* dy, float* dx, float* dparams) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  if (dx == nullptr) return absl::OkStatus();
  const int64_t size = ctx.n * input_shape().size();
  return LaunchKernel("ReluBackwardKernel", [&] {
    ReluBackwardKernel<<<BlocksFor(size), kThreadsPerBlock, 0, stream()>>>(y, dy, size, dx);
  });
}

}  // namespace pstrain::models::cuda

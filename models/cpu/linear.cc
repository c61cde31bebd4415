#include "models/cpu/linear.h"

#include <utility>

#include "glog/logging.h"
#include "models/net_spec.h"

// Row-major [rows, cols] buffers are read as column-major [cols, rows]
// matrices, so with X = x^T [in, n], Y = y^T [out, n] and Wt = W^T [in, out]
// (the weight's memory as is), the formulas become copy-free GEMMs:
//   Y = Wt^T X + b,   dWt = X dY^T,   dX = Wt dY.

namespace pstrain::models::cpu {

Linear::Linear(std::string name, Shape input, int out_features, int max_batch)
    : CpuLayer(std::move(name), input, Shape{out_features, 1, 1}, max_batch),
      in_(static_cast<int>(input.size())),
      out_(out_features) {
  CHECK_GE(out_features, 1) << this->name();
}

std::vector<ParamSpec> Linear::params() const { return LinearParams(name(), in_, out_); }

absl::Status Linear::Forward(const BatchContext& ctx, const float* params, const float* x,
                             float* y) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  const ConstMatrixMap wt(params, in_, out_);
  const ConstVectorMap bias(params + int64_t{in_} * out_, out_);
  MatrixMap out(y, out_, ctx.n);
  out.noalias() = wt.transpose() * ConstMatrixMap(x, in_, ctx.n);
  out.colwise() += bias;
  return absl::OkStatus();
}

absl::Status Linear::Backward(const BatchContext& ctx, const float* params, const float* x,
                              const float* y, const float* dy, float* dx, float* dparams) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  const ConstMatrixMap d(dy, out_, ctx.n);
  MatrixMap(dparams, in_, out_).noalias() = ConstMatrixMap(x, in_, ctx.n) * d.transpose();
  // db as a sum of columns, in example order: Eigen's rowwise().sum() would
  // round differently depending on the alignment of the caller's buffer.
  VectorMap db(dparams + int64_t{in_} * out_, out_);
  db.setZero();
  for (int i = 0; i < ctx.n; ++i) db += d.col(i);
  if (dx == nullptr) return absl::OkStatus();
  MatrixMap(dx, in_, ctx.n).noalias() = ConstMatrixMap(params, in_, out_) * d;
  return absl::OkStatus();
}

}  // namespace pstrain::models::cpu

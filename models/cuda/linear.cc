#include "models/cuda/linear.h"

#include <utility>

#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/net_spec.h"
#include "models/cuda/cuda_status.h"

namespace pstrain::models::cuda {

absl::StatusOr<std::unique_ptr<Linear>> Linear::Create(CudaContext& context, std::string name,
                                                       Shape input, int out_features,
                                                       int max_batch) {
  std::unique_ptr<Linear> layer(
      new Linear(context, std::move(name), input, out_features, max_batch));
  RETURN_IF_ERROR(context.ReserveOnes(max_batch));
  return layer;
}

Linear::Linear(CudaContext& context, std::string name, Shape input, int out_features, int max_batch)
    : CudaLayer(context, std::move(name), input, Shape{out_features, 1, 1}, max_batch),
      in_(static_cast<int>(input.size())),
      out_(out_features) {
  CHECK_GE(out_features, 1) << this->name();
}

std::vector<ParamSpec> Linear::params() const { return LinearParams(name(), in_, out_); }

// Y [out, n] = Wt^T [out, in] X [in, n]; then Y += b [out, 1] 1^T [1, n].
absl::Status Linear::Forward(const BatchContext& ctx, const float* params, const float* x,
                             float* y) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  cublasHandle_t handle = context().cublas();
  const float* bias = params + int64_t{in_} * out_;
  CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out_, ctx.n, in_, &kOne,
                                     params, in_, x, in_, &kZero, y, out_));
  CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, out_, ctx.n, 1, &kOne, bias,
                                     out_, context().ones(), 1, &kOne, y, out_));
  return absl::OkStatus();
}

// dWt [in, out] = X [in, n] dY^T [n, out];  db [out] = dY [out, n] 1 [n];
// dX [in, n] = Wt [in, out] dY [out, n].
absl::Status Linear::Backward(const BatchContext& ctx, const float* params, const float* x,
                              const float* y, const float* dy, float* dx, float* dparams) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  cublasHandle_t handle = context().cublas();
  CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, ctx.n, &kOne, x,
                                     in_, dy, out_, &kZero, dparams, in_));
  float* db = dparams + int64_t{in_} * out_;
  CUBLAS_RETURN_IF_ERROR(cublasSgemv(handle, CUBLAS_OP_N, out_, ctx.n, &kOne, dy, out_,
                                     context().ones(), 1, &kZero, db, 1));
  if (dx == nullptr) return absl::OkStatus();
  CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, in_, ctx.n, out_, &kOne,
                                     params, in_, dy, out_, &kZero, dx, in_));
  return absl::OkStatus();
}

}  // namespace pstrain::models::cuda

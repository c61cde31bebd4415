#pragma once

// Fully connected layer on the GPU with cuBLAS, the same contract as
// models/cpu/linear.h (PyTorch's nn.Linear(in, out)); the input is read
// flattened, an activation [n, c, h, w] being x [n, in] with in = c*h*w.
//
//   x [n, in], weight [out, in], bias [out] -> y [n, out]   (row-major)
//   y  = x W^T + b
//   dW = dy^T x   [out, in];   db = sum_i dy[i, :];   dx = dy W   [n, in]
//
// cuBLAS is column-major, and a row-major [rows, cols] buffer is a
// column-major [cols, rows] matrix. With X = x^T [in, n], Y = y^T [out, n]
// and Wt = W^T [in, out] (each buffer as is), the formulas become copy-free
// GEMMs, as on the CPU:
//   Y = Wt^T X, then Y += b 1^T;   dWt = X dY^T;   db = dY 1;   dX = Wt dY.
// The bias is added after the product (a rank-1 GEMM with beta = 1), as the
// CPU adds it, and db is a GEMV against the context's vector of ones.
// fp32 only (the context's handle is in CUBLAS_PEDANTIC_MATH).
//
// Parameters in params() order: weight [out, in], then bias [out].

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/cuda/cuda_layer.h"

namespace pstrain::models::cuda {

class Linear final : public CudaLayer {
 public:
  // ResourceExhausted when the vector of ones does not fit on the device.
  // REQUIRES: out_features >= 1, max_batch >= 1; `context` outlives the
  // layer.
  static absl::StatusOr<std::unique_ptr<Linear>> Create(CudaContext& context, std::string name,
                                                        Shape input, int out_features,
                                                        int max_batch);

  std::vector<ParamSpec> params() const override;
  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;

 private:
  Linear(CudaContext& context, std::string name, Shape input, int out_features, int max_batch);

  int in_;
  int out_;
};

}  // namespace pstrain::models::cuda

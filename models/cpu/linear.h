#pragma once

// Fully connected layer, PyTorch's nn.Linear(in, out). The input is read
// flattened: an activation [n, c, h, w] is x [n, in] with in = c*h*w.
//
//   x [n, in], weight [out, in], bias [out] -> y [n, out]   (row-major)
//   y  = x W^T + b
// Backward, from dy [n, out]:
//   dW = dy^T x   [out, in];   db = sum_i dy[i, :];   dx = dy W   [n, in]
//
// Parameters in params() order: weight [out, in], then bias [out].

#include <string>
#include <vector>

#include "models/cpu/cpu_layer.h"

namespace pstrain::models::cpu {

class Linear final : public CpuLayer {
 public:
  // REQUIRES: out_features >= 1, max_batch >= 1.
  Linear(std::string name, Shape input, int out_features, int max_batch);

  std::vector<ParamSpec> params() const override;
  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;

 private:
  int in_;
  int out_;
};

}  // namespace pstrain::models::cpu

#pragma once

// 2-D convolution with stride 1, no padding and a bias: PyTorch's
// nn.Conv2d(cin, cout, k).
//
//   x [n, cin, h, w], weight [cout, cin, k, k], bias [cout]
//     -> y [n, cout, h-k+1, w-k+1]                              (all NCHW)
//   y[i,o,p,q]  = b[o] + sum_{c,u,v} w[o,c,u,v] * x[i,c,p+u,q+v]
// Backward, from dy [n, cout, h-k+1, w-k+1]:
//   dw[o,c,u,v] = sum_{i,p,q} dy[i,o,p,q] * x[i,c,p+u,q+v]
//   db[o]       = sum_{i,p,q} dy[i,o,p,q]
//   dx[i,c,s,t] = sum_{o,u,v} dy[i,o,s-u,t-v] * w[o,c,u,v]   (terms in range)
//
// Parameters in params() order: weight [cout, cin, k, k], then bias [cout].
// Computed as im2col + one GEMM per group of images; the group is sized so
// that its column matrix stays in the L2 cache.

#include <string>
#include <vector>

#include "models/cpu/cpu_layer.h"

namespace pstrain::models::cpu {

class Conv2d final : public CpuLayer {
 public:
  // REQUIRES: out_channels >= 1, 1 <= kernel <= min(input.h, input.w),
  // max_batch >= 1.
  Conv2d(std::string name, Shape input, int out_channels, int kernel, int max_batch);

  std::vector<ParamSpec> params() const override;
  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;

  // Images per im2col + GEMM step (exposed for tests of partial groups).
  int group_size() const { return group_; }

 private:
  void ForwardGroup(const float* params, const float* x, int count, float* y);
  void BackwardGroup(const float* params, const float* x, const float* dy, int count,
                     bool accumulate, float* dx, float* dparams);

  int kernel_;
  int patch_;      // cin * k * k: rows of the column matrix
  int positions_;  // (h-k+1) * (w-k+1): output positions per image
  int group_;
  std::vector<float> cols_;  // [patch, group * positions]: im2col, then its gradient
  std::vector<float> out_;   // [cout, group * positions]: y or dy, channel-major
};

}  // namespace pstrain::models::cpu

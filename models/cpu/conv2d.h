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
// Computed by the register-blocked kernels of models/cpu/conv_kernels.h,
// which read the input in place (no im2col matrix) and write NCHW
// directly; dx goes through one image's tap gradient and col2im at a time.
// Where Winograd3x3::Applies (3x3 kernels, even output sizes, 4 or more
// input channels: cnn_large's second conv), models/cpu/winograd.h instead.
// Output rows narrower than a vector (simd::kLanes) take scalar loops.

#include <memory>
#include <string>
#include <vector>

#include "models/cpu/conv_kernels.h"
#include "models/cpu/cpu_layer.h"
#include "models/cpu/winograd.h"

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

 private:
  // dw [cout, K] and, unless dx is null, dx of the batch by the kernels:
  // dw_lanes_ over chunks of chunk_ images, then each weight's lanes added.
  void KernelsBackward(int n, const float* params, const float* x, const float* dy, float* dx,
                       float* dw);

  ConvGeometry geometry_;
  std::unique_ptr<Winograd3x3> winograd_;  // where it applies
  int chunk_ = 1;                          // images per ConvWeightGrad call
  std::vector<float> dcols_;               // [K, R*kLanes], one image's
  std::vector<float> dw_lanes_;            // [cout, K, kLanes]
};

}  // namespace pstrain::models::cpu

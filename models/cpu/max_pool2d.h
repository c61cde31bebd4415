#pragma once

// Max pooling with kernel = stride = k and no padding (floor): PyTorch's
// nn.MaxPool2d(k).
//
//   x [n, c, h, w] -> y [n, c, h/k, w/k]                         (NCHW)
//   y[i,c,p,q]  = max_{u,v < k} x[i,c,p*k+u,q*k+v]
// Backward, from dy [n, c, h/k, w/k]:
//   dx[i,c,s,t] = dy[i,c,p,q] where (s,t) is the argmax of window (p,q),
//                 0 elsewhere (windows do not overlap; rows and columns
//                 left over by the floor get 0).
//
// Ties go to the first maximum in row-major window order and a NaN wins (the
// last NaN of the window), as in PyTorch. Forward remembers each window's
// argmax and Backward uses it, so Backward must follow a Forward on the same
// x.

#include <cstdint>
#include <string>
#include <vector>

#include "models/cpu/cpu_layer.h"

namespace pstrain::models::cpu {

class MaxPool2d final : public CpuLayer {
 public:
  // REQUIRES: 1 <= kernel <= min(input.h, input.w), max_batch >= 1.
  MaxPool2d(std::string name, Shape input, int kernel, int max_batch);

  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;

  // [n, c, h/k, w/k]: index (s*w + t) within its input plane of each
  // window's maximum, as of the last Forward.
  const int32_t* argmax() const { return argmax_.data(); }

 private:
  int kernel_;
  std::vector<int32_t> argmax_;
};

}  // namespace pstrain::models::cpu

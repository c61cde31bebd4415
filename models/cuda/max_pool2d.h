#pragma once

// Max pooling on the GPU, the same contract as models/cpu/max_pool2d.h:
// kernel = stride = k, no padding (floor), PyTorch's nn.MaxPool2d(k).
//
//   x [n, c, h, w] -> y [n, c, h/k, w/k]                         (NCHW)
//   y[i,c,p,q]  = max_{u,v < k} x[i,c,p*k+u,q*k+v]
//   dx[i,c,s,t] = dy[i,c,p,q] where (s,t) is the argmax of window (p,q),
//                 0 elsewhere (rows and columns left by the floor get 0).
//
// Ties go to the first maximum in row-major window order and a NaN wins (the
// last NaN of the window): the CPU's rule, which our own kernels reproduce by
// folding each window in the CPU's order. cuDNN's pooling is not used: it
// documents neither its tie-breaking nor which tied element receives the
// gradient, and it recomputes the argmax from x in backward; the argmax kept
// here makes backward independent of x. Forward remembers each window's
// argmax, so Backward must follow a Forward on the same x.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/cuda/cuda_layer.h"
#include "models/cuda/cuda_resources.h"

namespace pstrain::models::cuda {

class MaxPool2d final : public CudaLayer {
 public:
  // ResourceExhausted when the argmax buffer does not fit on the device.
  // REQUIRES: 1 <= kernel <= min(input.h, input.w), max_batch >= 1.
  static absl::StatusOr<std::unique_ptr<MaxPool2d>> Create(CudaContext& context, std::string name,
                                                           Shape input, int kernel, int max_batch);

  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;

  // Device [max_batch, c, h/k, w/k]: index (s*w + t) within its input plane
  // of each window's maximum, as of the last Forward.
  const int32_t* argmax() const { return argmax_.data(); }

 private:
  MaxPool2d(CudaContext& context, std::string name, Shape input, int kernel, int max_batch);

  int kernel_;
  DeviceArray<int32_t> argmax_;
};

}  // namespace pstrain::models::cuda

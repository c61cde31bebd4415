#pragma once

// Rectified linear unit on the GPU, the same contract as models/cpu/relu.h:
//
//   x [n, c, h, w] -> y [n, c, h, w],  y = x < 0 ? 0 : x  (std::max(x, 0))
//   dx = y > 0 ? dy : 0
//
// Backward reads y, not x (x may be null), and takes the subgradient 0 at
// x == 0, as PyTorch's threshold_backward and the CPU backend do. Our own
// element-wise kernels rather than cudnnActivation*: cuDNN's backward needs x
// (which this contract lets the caller omit) and does not document its
// subgradient at 0; these kernels are memory-bound either way.
// Bit for bit the CPU's results, NaN and -0 included: a NaN input stays NaN
// in y (so a diverging step still shows), and gets dx = 0, as on the CPU.

#include <string>

#include "models/cuda/cuda_layer.h"

namespace pstrain::models::cuda {

class Relu final : public CudaLayer {
 public:
  // REQUIRES: max_batch >= 1; `context` outlives the layer.
  Relu(CudaContext& context, std::string name, Shape shape, int max_batch);

  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;
};

}  // namespace pstrain::models::cuda

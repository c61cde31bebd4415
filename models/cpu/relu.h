#pragma once

// Rectified linear unit, element-wise on any shape.
//
//   x [n, c, h, w] -> y [n, c, h, w],  y = max(x, 0)
//   dx = dy * [y > 0]
//
// Backward reads the output y, not x: y > 0 exactly when x > 0, and at
// x == 0 the (sub)gradient taken is 0, as in PyTorch's threshold_backward.
// So x may be null in Backward.

#include <string>

#include "models/cpu/cpu_layer.h"

namespace pstrain::models::cpu {

class Relu final : public CpuLayer {
 public:
  // REQUIRES: max_batch >= 1.
  Relu(std::string name, Shape shape, int max_batch);

  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;
};

}  // namespace pstrain::models::cpu

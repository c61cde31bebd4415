#pragma once

// Dropout (element-wise) and Dropout2d (whole channels), PyTorch's
// nn.Dropout(p) and nn.Dropout2d(p), with masks from models/dropout_mask.h.
//
//   x [n, c, h, w] -> y [n, c, h, w],  y = x * m,  dx = dy * m
//   Dropout:   m[i,e] = DropoutScale(seed, layer_index, key[i], e, false, p),
//              e = c*h*w + h*w + w, the element's index within the example;
//   Dropout2d: m[i,c,.,.] = DropoutScale(seed, layer_index, key[i], c, true, p).
// So m is 0 with probability p and 1/(1-p) otherwise, and depends only on the
// example's key, never on its position in the batch.
//
// When !ctx.training both passes are the identity (y = x, dx = dy). In
// training ctx.example_keys must be set (InvalidArgument otherwise). Forward
// keeps the mask for Backward, which must use the same ctx.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/cpu/cpu_layer.h"

namespace pstrain::models::cpu {

class Dropout : public CpuLayer {
 public:
  // layer_index: this layer's index in NetSpec::layers, mixed into the mask.
  // REQUIRES: 0 <= p < 1, max_batch >= 1.
  Dropout(std::string name, Shape shape, float p, int layer_index, int max_batch)
      : Dropout(std::move(name), shape, p, layer_index, max_batch, /*channelwise=*/false) {}

  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;

 protected:
  Dropout(std::string name, Shape shape, float p, int layer_index, int max_batch, bool channelwise);

 private:
  // Fills mask_ for the batch: one scale per element, or per channel.
  void DrawMask(const BatchContext& ctx);
  // out = in * mask_, mask_ broadcast over the plane when channelwise.
  void ApplyMask(int n, const float* in, float* out) const;

  float p_;
  int layer_index_;
  bool channelwise_;
  int64_t mask_per_example_;  // elements, or channels when channelwise
  std::vector<float> mask_;   // [max_batch, mask_per_example]
};

class Dropout2d final : public Dropout {
 public:
  // As Dropout, one draw per (example, channel).
  Dropout2d(std::string name, Shape shape, float p, int layer_index, int max_batch)
      : Dropout(std::move(name), shape, p, layer_index, max_batch, /*channelwise=*/true) {}
};

}  // namespace pstrain::models::cpu

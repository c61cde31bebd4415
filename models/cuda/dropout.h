#pragma once

// Dropout (element-wise) and Dropout2d (whole channels) on the GPU, the same
// contract as models/cpu/dropout.h, with masks from models/dropout_mask.h:
//
//   x [n, c, h, w] -> y [n, c, h, w],  y = x * m,  dx = dy * m
//   Dropout:   m[i,e] = DropoutScale(seed, layer_index, key[i], e, false, p),
//              e = c*h*w + h*w + w, the element's index within the example;
//   Dropout2d: m[i,c,.,.] = DropoutScale(seed, layer_index, key[i], c, true, p).
//
// DropoutScale is the same __host__ __device__ function the CPU calls (Philox
// on integers, then a float compare), so the masks are bitwise identical to
// the CPU's for the same (seed, layer index, keys), whatever the batch split.
//
// ctx.example_keys is a device pointer here. When !ctx.training both passes
// copy (y = x, dx = dy). In training the keys must be set (InvalidArgument
// otherwise). Forward keeps the mask for Backward, which must use the same
// ctx.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "models/cuda/cuda_layer.h"
#include "models/cuda/cuda_resources.h"

namespace pstrain::models::cuda {

class Dropout : public CudaLayer {
 public:
  // layer_index: this layer's index in NetSpec::layers, mixed into the mask.
  // ResourceExhausted when the mask does not fit on the device.
  // REQUIRES: 0 <= p < 1, max_batch >= 1.
  static absl::StatusOr<std::unique_ptr<Dropout>> Create(CudaContext& context, std::string name,
                                                         Shape shape, float p, int layer_index,
                                                         int max_batch);

  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;

  // Device [max_batch, elements per example (or channels)]: the scales of
  // the last training Forward.
  const float* mask() const { return mask_.data(); }

 protected:
  Dropout(CudaContext& context, std::string name, Shape shape, float p, int layer_index,
          int max_batch, bool channelwise);

  absl::Status AllocateMask();

 private:
  // Queues mask_ for the batch: one scale per element, or per channel.
  absl::Status DrawMask(const BatchContext& ctx);
  // Queues out = in * mask_, the mask broadcast over each plane when
  // channelwise.
  absl::Status ApplyMask(int n, const float* in, float* out);
  absl::Status Copy(int n, const float* in, float* out);

  float p_;
  int layer_index_;
  bool channelwise_;
  int64_t mask_per_example_;  // elements, or channels when channelwise
  DeviceArray<float> mask_;   // [max_batch, mask_per_example]
};

class Dropout2d final : public Dropout {
 public:
  // As Dropout::Create, one draw per (example, channel).
  static absl::StatusOr<std::unique_ptr<Dropout2d>> Create(CudaContext& context, std::string name,
                                                           Shape shape, float p, int layer_index,
                                                           int max_batch);

 private:
  Dropout2d(CudaContext& context, std::string name, Shape shape, float p, int layer_index,
            int max_batch)
      : Dropout(context, std::move(name), shape, p, layer_index, max_batch, /*channelwise=*/true) {}
};

}  // namespace pstrain::models::cuda

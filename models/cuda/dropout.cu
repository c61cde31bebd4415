#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/cuda/cuda_status.h"
#include "models/cuda/dropout.h"
#include "models/cuda/launch.h"
#include "models/dropout_mask.h"

namespace pstrain::models::cuda {
namespace {

// mask[i, e] for i < n, e < per_example: the CPU's DrawMask, one thread per
// scale.
__global__ void DrawMaskKernel(uint64_t seed, int layer_index, const uint64_t* keys,
                               int64_t per_example, int64_t total, bool channelwise, float p,
                               float* mask) {
  PSTRAIN_GRID_STRIDE_LOOP(j, total) {
    const int64_t i = j / per_example;
    const uint32_t e = static_cast<uint32_t>(j - i * per_example);
    mask[j] = DropoutScale(seed, layer_index, keys[i], e, channelwise, p);
  }
}

// out[j] = in[j] * mask[j / plane]: plane 1 for element-wise masks, H*W for
// channel masks (each (example, channel) plane shares one scale).
__global__ void ApplyMaskKernel(const float* in, const float* mask, int64_t plane, int64_t size,
                                float* out) {
  PSTRAIN_GRID_STRIDE_LOOP(j, size) { out[j] = in[j] * mask[j / plane]; }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dropout>> Dropout::Create(CudaContext& context, std::string name,
                                                         Shape shape, float p, int layer_index,
                                                         int max_batch) {
  std::unique_ptr<Dropout> layer(new Dropout(context, std::move(name), shape, p, layer_index,
                                             max_batch, /*channelwise=*/false));
  RETURN_IF_ERROR(layer->AllocateMask());
  return layer;
}

absl::StatusOr<std::unique_ptr<Dropout2d>> Dropout2d::Create(CudaContext& context, std::string name,
                                                             Shape shape, float p, int layer_index,
                                                             int max_batch) {
  std::unique_ptr<Dropout2d> layer(
      new Dropout2d(context, std::move(name), shape, p, layer_index, max_batch));
  RETURN_IF_ERROR(layer->AllocateMask());
  return layer;
}

Dropout::Dropout(CudaContext& context, std::string name, Shape shape, float p, int layer_index,
                 int max_batch, bool channelwise)
    : CudaLayer(context, std::move(name), shape, shape, max_batch),
      p_(p),
      layer_index_(layer_index),
      channelwise_(channelwise),
      mask_per_example_(channelwise ? shape.c : shape.size()) {
  CHECK(p >= 0.0f && p < 1.0f) << this->name() << ": p=" << p;
}

absl::Status Dropout::AllocateMask() {
  RETURN_IF_ERROR(context().Activate());
  ASSIGN_OR_RETURN(mask_,
                   DeviceArray<float>::Create(name() + ".mask", mask_per_example_ * max_batch()));
  return absl::OkStatus();
}

absl::Status Dropout::Forward(const BatchContext& ctx, const float* params, const float* x,
                              float* y) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  if (!ctx.training) return Copy(ctx.n, x, y);
  if (ctx.example_keys == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": training without example keys"));
  }
  RETURN_IF_ERROR(DrawMask(ctx));
  return ApplyMask(ctx.n, x, y);
}

absl::Status Dropout::Backward(const BatchContext& ctx, const float* params, const float* x,
                               const float* y, const float* dy, float* dx, float* dparams) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  if (dx == nullptr) return absl::OkStatus();
  if (!ctx.training) return Copy(ctx.n, dy, dx);
  return ApplyMask(ctx.n, dy, dx);
}

absl::Status Dropout::DrawMask(const BatchContext& ctx) {
  const int64_t total = ctx.n * mask_per_example_;
  return LaunchKernel("DrawMaskKernel", [&] {
    DrawMaskKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream()>>>(
        ctx.seed, layer_index_, ctx.example_keys, mask_per_example_, total, channelwise_, p_,
        mask_.data());
  });
}

absl::Status Dropout::ApplyMask(int n, const float* in, float* out) {
  const int64_t size = n * input_shape().size();
  const int64_t plane = channelwise_ ? int64_t{input_shape().h} * input_shape().w : 1;
  const unsigned int blocks = BlocksFor(size);
  return LaunchKernel("ApplyMaskKernel", [&] {
    ApplyMaskKernel<<<blocks, kThreadsPerBlock, 0, stream()>>>(in, mask_.data(), plane, size, out);
  });
}

absl::Status Dropout::Copy(int n, const float* in, float* out) {
  if (in == out) return absl::OkStatus();
  const size_t bytes = sizeof(float) * static_cast<size_t>(n * input_shape().size());
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream()));
  return absl::OkStatus();
}

}  // namespace pstrain::models::cuda

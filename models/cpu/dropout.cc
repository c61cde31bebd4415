#include "models/cpu/dropout.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "models/dropout_mask.h"

namespace pstrain::models::cpu {

Dropout::Dropout(std::string name, Shape shape, float p, int layer_index, int max_batch,
                 bool channelwise)
    : CpuLayer(std::move(name), shape, shape, max_batch),
      p_(p),
      layer_index_(layer_index),
      channelwise_(channelwise),
      mask_per_example_(channelwise ? shape.c : shape.size()) {
  CHECK(p >= 0.0f && p < 1.0f) << this->name() << ": p=" << p;
  mask_.resize(mask_per_example_ * max_batch);
}

absl::Status Dropout::Forward(const BatchContext& ctx, const float* params, const float* x,
                              float* y) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  const int64_t size = ctx.n * input_shape().size();
  if (!ctx.training) {
    if (y != x) std::copy_n(x, size, y);
    return absl::OkStatus();
  }
  if (ctx.example_keys == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": training without example keys"));
  }
  DrawMask(ctx);
  ApplyMask(ctx.n, x, y);
  return absl::OkStatus();
}

absl::Status Dropout::Backward(const BatchContext& ctx, const float* params, const float* x,
                               const float* y, const float* dy, float* dx, float* dparams) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  if (dx == nullptr) return absl::OkStatus();
  if (!ctx.training) {
    if (dx != dy) std::copy_n(dy, ctx.n * input_shape().size(), dx);
    return absl::OkStatus();
  }
  ApplyMask(ctx.n, dy, dx);
  return absl::OkStatus();
}

namespace {

// Scales of elements [4*first, 4*(first+count)) of the example
// `example_key` into mask[0, 4*count): element by element DropoutScale, but
// one Philox call (ten rounds) per four elements, each of its words the
// draw of one element, in a plain loop that the compiler vectorises across
// blocks. (cnn_large's 9,216-element dropout was 14% of its step with a call
// per element that kept one word of four.)
void DrawBlocks(uint64_t layer_key, uint64_t example_key, bool channelwise, float p, uint32_t first,
                int64_t count, float* __restrict mask) {
  for (int64_t b = 0; b < count; ++b) {
    const Philox4x32Result r =
        DropoutBlock(layer_key, example_key, first + static_cast<uint32_t>(b), channelwise);
    for (int j = 0; j < 4; ++j) mask[4 * b + j] = DropoutScaleOf(UniformFloat(r.v[j]), p);
  }
}

}  // namespace

void Dropout::DrawMask(const BatchContext& ctx) {
  const uint64_t layer_key = DropoutLayerKey(ctx.seed, layer_index_);
  const int64_t per = mask_per_example_, blocks = per / 4;
  for (int i = 0; i < ctx.n; ++i) {
    float* mask = mask_.data() + i * per;
    DrawBlocks(layer_key, ctx.example_keys[i], channelwise_, p_, 0, blocks, mask);
    if (per % 4 == 0) continue;
    float last[4];
    DrawBlocks(layer_key, ctx.example_keys[i], channelwise_, p_, static_cast<uint32_t>(blocks), 1,
               last);
    std::copy_n(last, per % 4, mask + 4 * blocks);
  }
}

void Dropout::ApplyMask(int n, const float* in, float* out) const {
  const int64_t size = n * input_shape().size();
  if (!channelwise_) {
    ArrayMap(out, size) = ConstArrayMap(in, size) * ConstArrayMap(mask_.data(), size);
    return;
  }
  const int64_t plane = int64_t{input_shape().h} * input_shape().w;
  const int64_t planes = n * mask_per_example_;
  for (int64_t j = 0; j < planes; ++j) {
    ArrayMap(out + j * plane, plane) = ConstArrayMap(in + j * plane, plane) * mask_[j];
  }
}

}  // namespace pstrain::models::cpu

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

void Dropout::DrawMask(const BatchContext& ctx) {
  float* mask = mask_.data();
  for (int i = 0; i < ctx.n; ++i) {
    const uint64_t key = ctx.example_keys[i];
    for (int64_t e = 0; e < mask_per_example_; ++e) {
      *mask++ =
          DropoutScale(ctx.seed, layer_index_, key, static_cast<uint32_t>(e), channelwise_, p_);
    }
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

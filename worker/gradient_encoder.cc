#include "worker/gradient_encoder.h"

#include <algorithm>

#include "glog/logging.h"

namespace pstrain {

GradientEncoder::GradientEncoder(const WireEncoding& encoding, const ShardPlan& plan)
    : encoding_(encoding), ranges_(plan.ranges()), bytes_(plan.num_shards()),
      payloads_(plan.num_shards()) {
  int64_t largest = 0;
  for (const ShardRange& r : ranges_) {
    topk_counts_.push_back(encoding.kind == proto::TOPK
                               ? TopKCount(encoding.topk_ratio, static_cast<size_t>(r.size()))
                               : 0);
    largest = std::max(largest, r.size());
  }
  for (size_t k = 0; k < ranges_.size(); ++k) {
    payloads_[k].encoding = encoding.kind;
    payloads_[k].topk_count = topk_counts_[k];
  }
  if (!encoding.lossy()) return;
  residual_.assign(static_cast<size_t>(plan.total_size()), 0.0f);
  previous_.assign(residual_.size(), 0.0f);
  decoded_.resize(static_cast<size_t>(largest));
}

absl::Span<const EncodedShard> GradientEncoder::Encode(int64_t step, absl::Span<const float> grads,
                                                       bool weighted) {
  Begin(step);
  for (size_t k = 0; k < ranges_.size(); ++k) EncodeShard(static_cast<int>(k), grads, weighted);
  return payloads_;
}

void GradientEncoder::Begin(int64_t step) {
  if (!encoding_.lossy()) return;
  // A new step starts from the residual the last one left; the same step
  // again, from the one it started from (previous_ still holds it).
  if (step != last_step_) residual_.swap(previous_);
  last_step_ = step;
}

const EncodedShard& GradientEncoder::EncodeShard(int shard, absl::Span<const float> grads,
                                                 bool weighted) {
  CHECK_EQ(grads.size(), static_cast<size_t>(ranges_.back().end));
  if (encoding_.lossy()) {
    EncodeLossy(shard, grads, weighted);
  } else {
    const auto floats = grads.subspan(static_cast<size_t>(ranges_[shard].begin),
                                      static_cast<size_t>(ranges_[shard].size()));
    payloads_[shard].bytes = {reinterpret_cast<const char*>(floats.data()),
                              floats.size() * sizeof(float)};
  }
  return payloads_[shard];
}

void GradientEncoder::EncodeLossy(int shard, absl::Span<const float> grads, bool weighted) {
  const auto begin = static_cast<size_t>(ranges_[shard].begin);
  const auto n = static_cast<size_t>(ranges_[shard].size());
  const absl::Span<const float> g = grads.subspan(begin, n);
  const absl::Span<const float> before = absl::MakeConstSpan(previous_).subspan(begin, n);
  const absl::Span<float> e = absl::MakeSpan(residual_).subspan(begin, n);
  std::vector<char>& bytes = bytes_[shard];
  const uint64_t k = topk_counts_[shard];
  if (!weighted) {
    EncodeGradient(encoding_.kind, k, g, &bytes, &scratch_);
    std::copy(before.begin(), before.end(), e.begin());
  } else {
    for (size_t i = 0; i < n; ++i) e[i] = g[i] + before[i];
    EncodeGradient(encoding_.kind, k, e, &bytes, &scratch_);
    const absl::Span<float> d = absl::MakeSpan(decoded_).subspan(0, n);
    const absl::Status s = DecodeGradient(encoding_.kind, k, bytes, d);
    CHECK(s.ok()) << "our own encoding does not decode: " << s;
    for (size_t i = 0; i < n; ++i) e[i] -= d[i];
  }
  payloads_[shard].bytes = absl::MakeConstSpan(bytes);
}

size_t GradientEncoder::bytes_per_step() const {
  size_t total = 0;
  for (size_t k = 0; k < ranges_.size(); ++k) {
    total += EncodedBytes(encoding_.kind, static_cast<size_t>(ranges_[k].size()), topk_counts_[k]);
  }
  return total;
}

}  // namespace pstrain

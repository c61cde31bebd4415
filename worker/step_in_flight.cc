#include "worker/step_in_flight.h"

#include <algorithm>

#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {

StepInFlight::StepInFlight(const WireEncoding& encoding, const ShardPlan& plan,
                           const std::vector<TensorSlot>& tensors, absl::Span<const float> grads)
    : plan_(plan), grads_(grads), encoder_(encoding, plan) {
  CHECK_EQ(static_cast<int64_t>(grads.size()), plan.total_size());
  tensors_per_shard_.assign(plan.num_shards(), 0);
  int64_t begin = 0;
  int shard = 0;
  for (const TensorSlot& t : tensors) {
    const int64_t end = begin + t.size;
    while (plan.range(shard).end <= begin) ++shard;
    int last = shard;
    while (plan.range(last).end < end) ++last;
    tensor_shards_.push_back({shard, last});
    for (int k = shard; k <= last; ++k) ++tensors_per_shard_[k];
    begin = end;
  }
  CHECK_EQ(begin, plan.total_size());
  encoded_.assign(plan_.num_shards(), false);
  tensors_pending_ = tensors_per_shard_;
  tensors_left_ = static_cast<int>(tensor_shards_.size());
}

void StepInFlight::Reset(int64_t step, absl::Span<const int64_t> computed_on) {
  step_ = step;
  computed_on_.assign(computed_on.begin(), computed_on.end());
  num_examples_ = 0;
  encoded_.assign(plan_.num_shards(), false);
  tensors_pending_ = tensors_per_shard_;
  tensors_left_ = static_cast<int>(tensor_shards_.size());
  client_ = nullptr;
}

void StepInFlight::Start(PsClient* client, int num_examples, absl::Span<float> params) {
  client_ = client;
  num_examples_ = num_examples;
  encoder_.Begin(step_);
  client->StartPushPull(step_, computed_on_, num_examples, params);
}

void StepInFlight::Send(int shard, bool early) {
  encoded_[shard] = true;
  if (early) ++early_pushes_;
  client_->SendShard(shard, encoder_.EncodeShard(shard, grads_, /*weighted=*/true));
}

void StepInFlight::ReadyFrom(int64_t begin) {
  if (!started()) return;
  // Backward runs last layer first: the last shards are complete first.
  for (int k = plan_.num_shards() - 1; k >= 0; --k) {
    if (encoded_[k] || plan_.range(k).begin < begin) continue;
    Send(k, /*early=*/begin > 0);  // layers before the shard are still in backward
  }
}

void StepInFlight::TensorReady(int tensor) {
  CHECK(tensor >= 0 && tensor < static_cast<int>(tensor_shards_.size()));
  if (!started()) return;
  --tensors_left_;
  const auto [first, last] = tensor_shards_[tensor];
  for (int k = last; k >= first; --k) {
    if (--tensors_pending_[k] == 0 && !encoded_[k]) Send(k, /*early=*/tensors_left_ > 0);
  }
}

absl::Status StepInFlight::Finish(PsClient* client, int num_examples, absl::Span<float> params,
                                  const BetweenFn& between, int64_t* between_us,
                                  std::vector<ShardReply>* replies) {
  *between_us = 0;
  num_examples_ = num_examples;
  if (started()) {
    // Some shards are out already.
    for (int k = 0; k < plan_.num_shards(); ++k) {
      if (!encoded_[k]) encoder_.EncodeShard(k, grads_, /*weighted=*/true);
    }
  } else {
    encoder_.Encode(step_, grads_, /*weighted=*/num_examples > 0);
    client->StartPushPull(step_, computed_on_, num_examples, params);
  }
  const absl::Span<const EncodedShard> payloads = encoder_.payloads();
  if (between) {
    for (int k = 0; k < plan_.num_shards(); ++k) client->SendShard(k, payloads[k]);
    RETURN_IF_ERROR(between([client](int64_t end) { return client->WaitParams(end); }, between_us));
  }
  // Sends what is not out yet, and waits for every reply.
  return client->FinishPushPull(payloads, replies);
}

absl::Status StepInFlight::Resend(PsClient* client, const std::vector<bool>& push_to,
                                  absl::Span<float> params,
                                  std::vector<ShardReply>* replies) const {
  return client->FinishStep(step_, computed_on_, num_examples_, encoder_.payloads(), push_to,
                            params, replies);
}

}  // namespace pstrain

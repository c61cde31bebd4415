#pragma once

// One step's push/pull while it is under way, in one object: the step's
// identity (its number, the shards' versions it was computed on, its
// examples), which shards' gradients are final, their payloads (--wire,
// with error feedback: worker/gradient_encoder.h) and the client's request
// in flight (PsClient::StartPushPull .. FinishPushPull). The worker runtime
// (worker/worker_runtime.h) owns one; nothing else keeps a step's state.
//
//   Reset(step, computed_on)         a new step: no shard sent yet
//   Start(client, ...)               overlap: the push/pull is prepared
//   ReadyFrom(begin) / TensorReady(t)   the gradient of the flat range
//                                    [begin, end) / of tensor t is final:
//                                    every shard whose gradient is all
//                                    final is encoded and sent now
//   Finish(client, ...)              the rest is encoded and sent; then
//                                    every reply is waited for
//   Resend(client, push_to, ...)     after a ps restart: the same payloads
//                                    again to the shards that lost them
//
// Without Start (no overlap, or an empty batch) Finish encodes and sends
// the whole gradient at once. A shard is encoded once per step: the
// encoder's residual counts it from then on (Reset forgets that it was;
// the payloads stay until the next encoding, for FinishStep's resend).
//
// Lifetime: the gradient buffer is borrowed and must outlive this object;
// the payloads (the encoder's, or with f32 views of the gradient buffer)
// stay valid and unchanged until the next step's encoding.
//
// Thread safety: none; the thread that drives the step owns it.

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/shard_plan.h"
#include "common/wire_codec.h"
#include "worker/gradient_encoder.h"
#include "worker/ps_client.h"

namespace pstrain {

// Between the last push going out and the replies being waited for (the
// forward ahead): called with a function that waits until params[0, end)
// hold what the replies carry (PsClient::WaitParams). Its error is the
// step's own; it sets *compute_us to the compute it ran.
using WaitParamsFn = std::function<absl::Status(int64_t end)>;
using BetweenFn = std::function<absl::Status(const WaitParamsFn& wait_params, int64_t* compute_us)>;

class StepInFlight {
 public:
  // `tensors`: the layout of `grads` (laid end to end, as the plan's).
  // REQUIRES: grads.size() == plan.total_size().
  StepInFlight(const WireEncoding& encoding, const ShardPlan& plan,
               const std::vector<TensorSlot>& tensors, absl::Span<const float> grads);

  // A new step: step `step`, computed on the shards' versions
  // `computed_on` (one per shard); no shard's gradient is final or sent.
  void Reset(int64_t step, absl::Span<const int64_t> computed_on);
  // Overlap: prepares the step's push/pull (nothing is sent yet), so that
  // ReadyFrom and TensorReady send each shard as soon as it is final.
  // `params` gets the replies. REQUIRES: num_examples > 0.
  void Start(PsClient* client, int num_examples, absl::Span<float> params);
  bool started() const { return client_ != nullptr; }
  // Back to before Start, while nothing is sent (the step's examples
  // changed to 0: its push is made at Finish).
  void Unstart() { client_ = nullptr; }
  // The gradient of flat positions [begin, total) is final (backward runs
  // the last layers first). No-op unless started.
  void ReadyFrom(int64_t begin);
  // Tensor `tensor`'s gradient is final (in any order). No-op unless
  // started. REQUIRES: 0 <= tensor < number of tensors.
  void TensorReady(int tensor);

  // Encodes and sends what is not out yet (all of it when not started: of
  // `num_examples` examples, weighted when num_examples > 0), runs
  // `between` (may be empty) once every push is out, and waits for every
  // reply into `params` and `replies`. `*between_us`: the compute `between`
  // reported (0 without).
  absl::Status Finish(PsClient* client, int num_examples, absl::Span<float> params,
                      const BetweenFn& between, int64_t* between_us,
                      std::vector<ShardReply>* replies);

  // Sends the step's payloads, as they went out first (the encoder's
  // residual already counts them), again to the shards k with push_to[k]
  // (a sync step whose gradient some restarted shards lost), and waits for
  // every shard's reply (PsClient::FinishStep). REQUIRES: the step was
  // pushed (Start or Finish ran since Reset).
  absl::Status Resend(PsClient* client, const std::vector<bool>& push_to,
                      absl::Span<float> params, std::vector<ShardReply>* replies) const;

  // The step since the last Reset (-1 before the first), the shards'
  // versions it was computed on, and its examples once pushed.
  int64_t step() const { return step_; }
  const std::vector<int64_t>& computed_on() const { return computed_on_; }
  int num_examples() const { return num_examples_; }

  // The last step's payloads, one per shard (FinishStep resends them).
  absl::Span<const EncodedShard> payloads() const { return encoder_.payloads(); }
  const GradientEncoder& encoder() const { return encoder_; }
  // Shard pushes sent while some of the step's gradient was not final yet.
  int64_t early_pushes() const { return early_pushes_; }

 private:
  void Send(int shard, bool early);

  const ShardPlan& plan_;
  absl::Span<const float> grads_;
  GradientEncoder encoder_;
  // [tensor] the shards it overlaps, as [first, last].
  std::vector<std::pair<int, int>> tensor_shards_;
  // [shard] how many tensors overlapping it are not final yet (at Reset).
  std::vector<int> tensors_per_shard_;
  std::vector<int> tensors_pending_;
  int tensors_left_ = 0;
  // [shard] encoded and handed to the client during this step. Not the
  // client's own "sent" (which a failed send leaves false): this says the
  // encoder's residual already counts the shard, so Finish must not
  // encode it again.
  std::vector<bool> encoded_;
  PsClient* client_ = nullptr;  // set by Start, for this step
  int64_t early_pushes_ = 0;
  int64_t step_ = -1;
  std::vector<int64_t> computed_on_;
  int num_examples_ = 0;
};

}  // namespace pstrain

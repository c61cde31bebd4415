#pragma once

// One ps shard's parameters and optimizer state: a contiguous range of the
// model's flat parameter vector, the optimizer's slots (common/optimizer.h
// gives the layout), the step count, and the update.
//
// Each update follows PyTorch's torch.optim exactly, for a gradient
// grad (already scaled by the sync average's 1/weight), learning rate lr
// (the schedule's, common/lr_schedule.h) and step t = updates() + 1:
//
//   sgd      g = grad + weight_decay * p
//            buf = g on the first update, momentum * buf + g afterwards
//            p -= lr * (nesterov ? g + momentum * buf : buf)
//            (momentum 0: p -= lr * g, the buffer is left alone)
//   adam     g = grad + weight_decay * p                  (L2, into the gradient)
//   adamw    p *= 1 - lr * weight_decay                   (decoupled)
//            g = grad
//   both     m = beta1 * m + (1 - beta1) * g               exp_avg
//            v = beta2 * v + (1 - beta2) * g * g           exp_avg_sq
//            p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//   adagrad  g = grad + weight_decay * p
//            sum += g * g
//            p -= (lr / (1 + (t - 1) * lr_decay)) * g / (sqrt(sum) + eps)
//
// Arithmetic is f32 per element, with the scalars (bias corrections, step
// sizes, the decay factor) computed in double and rounded once, as PyTorch
// computes them in Python. Each update is one pass over the shard.
//
// Parameter groups (common/param_groups.h): an update may come with its
// step's settings (StepOptions: each group's hyperparameters and lr, and
// the tensors without a gradient). Each tensor segment of the shard then
// follows its group's settings, t above is the segment's own step count
// (segment_updates) and a segment whose tensor is absent is left as it
// is, slots included, its count unchanged (torch.optim skips a parameter
// whose .grad is None). Without settings every segment takes the job's
// optimizer and the given lr.
//
// An update is applied only when the new parameters and every new slot
// are finite in f32 arithmetic (IsFiniteInF32, each array on its own: so
// |p| < 1.8e19). A huge but finite gradient (3e38) would otherwise leave
// values that overflow the next forward pass; such an update leaves the
// shard as it was, step count included.
//
// Thread safety: none; the ps's single event loop owns it.

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/optimizer.h"
#include "common/param_groups.h"
#include "ps_server/chunk_pool.h"
#include "transport/pinned_floats.h"

namespace pstrain {

namespace shard_store_internal {

// The scalars of one optimizer step (shard_store.cc's kernels).
struct MomentumScalars {
  float wd, lr, mu;
  float keep;  // the old buffer's weight: mu, or 0 on the first update (buf = g)
  bool nesterov;
};
struct AdamScalars {
  float l2;     // adam: weight_decay, into the gradient; adamw: 0
  float decay;  // adamw: 1 - lr * weight_decay, applied to p first; adam: 1
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float eps;
};
struct AdagradScalars {
  float wd;
  float clr;  // lr / (1 + (t - 1) * lr_decay)
  float eps;
};
// What an update does to one tensor segment.
struct SegmentPlan {
  enum class Kind { kSkip, kPlainSgd, kMomentumSgd, kAdam, kAdagrad };
  Kind kind = Kind::kSkip;
  float wd = 0, lr = 0;  // kPlainSgd
  MomentumScalars momentum{};
  AdamScalars adam{};
  AdagradScalars adagrad{};
};

}  // namespace shard_store_internal

// True when every value is finite and the squared L2 norm is below
// FLT_MAX (to 1e-5 of it: the squares are summed in float lanes, then in
// double; shard_store.cc): what the ps accepts as gradients and keeps as
// parameters. With `pool`, large spans are summed on its helpers too; the
// verdict is the same.
bool IsFiniteInF32(absl::Span<const float> values, ChunkPool* pool = nullptr);

// Whether a shard state of `num_params` parameters (its parameters, then
// its slots) is IsFiniteInF32 array by array.
// REQUIRES: num_params > 0, state.size() a multiple of num_params.
bool IsFiniteState(absl::Span<const float> state, int64_t num_params);

class ShardStore {
 public:
  // A fresh shard: `params`, the slots at their initial values, step 0.
  // `pool` (may be null; borrowed, it outlives the store): the threads
  // that share large updates with the caller's (ps_server/chunk_pool.h).
  // Every element's update is the same on any thread, so the results are
  // the same, bit for bit, with or without it.
  // `segments`: the shard's tensor segments (SegmentsOf; empty: one, the
  // whole shard).
  // REQUIRES: ValidateOptimizerConfig(config).ok(), params not empty,
  // segments empty or covering [0, params.size()) in order.
  ShardStore(absl::Span<const float> params, const OptimizerConfig& config,
             ChunkPool* pool = nullptr, std::vector<TensorSegment> segments = {});
  // The state a checkpoint or a standby recorded: parameters then slots
  // (common/optimizer.h), the number of updates taken and each segment's
  // (empty: `updates` each).
  // REQUIRES: ValidateOptimizerConfig(config).ok(), state.size() a
  // positive multiple of 1 + NumSlots(config), updates >= 0, segments as
  // above, segment_updates empty or one per segment, each in [0, updates].
  ShardStore(std::vector<float> state, int64_t updates, const OptimizerConfig& config,
             ChunkPool* pool = nullptr, std::vector<TensorSegment> segments = {},
             std::vector<int64_t> segment_updates = {});

  int64_t size() const { return size_; }  // parameters
  int num_slots() const { return num_slots_; }
  // The whole state: parameters, then the slots.
  absl::Span<const float> state() const { return state_->data(); }
  // The same buffer, for replies sent without a copy: an update never
  // writes into a buffer a message still holds (transport/pinned_floats.h).
  const std::shared_ptr<PinnedFloats>& pinned_state() const { return state_; }
  absl::Span<const float> params() const { return state().subspan(0, Index(size_)); }
  // Slot k (common/optimizer.h's order). REQUIRES: 0 <= k < num_slots().
  absl::Span<const float> slot(int k) const;
  // Updates applied (every Apply, ApplySum that was not refused).
  int64_t updates() const { return updates_; }
  // The tensor segments and the optimizer steps each has taken (its t).
  const std::vector<TensorSegment>& segments() const { return segments_; }
  const std::vector<int64_t>& segment_updates() const { return segment_updates_; }
  // Whether every segment has taken every update (no step left one out).
  bool uniform() const { return uniform_; }
  // The helpers its updates share (null: none).
  ChunkPool* pool() const { return pool_; }
  const OptimizerConfig& config() const { return config_; }
  // The state before the last update (Apply, ApplySum): the current one
  // when that update was refused; null before this store's first update.
  // It is the buffer the next update writes into when no message holds it
  // (the double buffer below), so keeping it costs nothing, and it is
  // valid until the next update. A sync shard answers a pull for its
  // previous version from it.
  const std::shared_ptr<PinnedFloats>& pinned_previous_state() const { return previous_; }
  // State-sized buffers made so far: state_ and next_state_, and one for
  // each update that found next_state_ and every kept spare held.
  int64_t buffers_made() const { return buffers_made_; }
  // Buffers kept beyond those two (at most kMaxSpares).
  size_t spares() const { return spares_.size(); }

  // Applies one optimizer step with gradient `grad` scaled by `grad_scale`
  // (an average's 1/weight) and learning rate `lr`. FailedPrecondition,
  // and nothing changed, when the result would not be finite (above). With
  // `check_grad`, InvalidArgument, and nothing changed, when `grad` itself
  // is not (IsFiniteInF32's verdict, bit for bit), checked in the update's
  // own pass instead of one of its own. `step` (may be null): the step's
  // settings (above), which take the place of `lr` and the job's
  // optimizer; absent tensors' values in `grad` are not read.
  // REQUIRES: grad.size() == size(); step's groups cover the segments'.
  absl::Status Apply(absl::Span<const float> grad, float grad_scale, float lr,
                     bool check_grad = false, const StepOptions* step = nullptr);
  // The same step for a sync version whose gradient is the sum of
  // `partial` (the version's gradients accumulated before; empty: none)
  // and `weight` x `grad` (the one that completes it), times grad_scale:
  // summed in the update's own pass instead of into the accumulator first.
  // REQUIRES: grad.size() == size(), partial empty or of that size.
  absl::Status ApplySum(absl::Span<const float> partial, absl::Span<const float> grad, float weight,
                        float grad_scale, float lr, const StepOptions* step = nullptr);

 private:
  static size_t Index(int64_t i) { return static_cast<size_t>(i); }
  // One optimizer step, the gradient formed element by element by `grad`
  // (shard_store.cc's GradientAt), block by block with the finiteness
  // check of each block's output while it is in the cache.
  // `check`: the gradient's floats to check too (null: none).
  template <typename G>
  absl::Status Update(const G& grad, float lr, const float* check, const StepOptions* step);
  // Makes next_state_ a buffer no message holds: a kept spare, or a copy
  // of state_. The held one joins the spares.
  void TakeUnheldBuffer();
  // One block [begin, end) of an update by segment, each segment with
  // segment_plan_'s scalars.
  template <typename G>
  void UpdateSegments(const G& grad, int64_t begin, int64_t end, const float* state,
                      float* next) const;
  // Each segment's scalars for an update with `step` (null: the job's
  // optimizer at `lr`), into segment_plan_.
  void PlanSegments(const StepOptions* step, float lr);

  OptimizerConfig config_;
  ChunkPool* pool_;
  int num_slots_;
  int64_t size_;
  std::shared_ptr<PinnedFloats> state_;
  // The candidate update, swapped in when it is finite: so Apply
  // allocates nothing (unless a reply still carries it, see Apply) and a
  // refused update leaves no trace.
  std::shared_ptr<PinnedFloats> next_state_;
  // An update writes every array but one: the job's optimizer, SGD without
  // momentum, writes only the parameters, and the slot (the momentum
  // buffer a step's groups may use) must then be state_'s. Which version
  // of the slots a buffer holds: slots_version_ is state_'s, bumped by
  // every update that writes the slots; next_slots_ is next_state_'s
  // (kSlotsUnknown after a refused update wrote them). An update of the
  // parameters alone into a buffer of another version copies the slots
  // in its own pass.
  static constexpr int64_t kSlotsUnknown = -1;
  int64_t slots_version_ = 0;
  int64_t next_slots_ = 0;
  std::shared_ptr<PinnedFloats> previous_;  // next_state_ or state_; see pinned_previous_state
  // Buffers next_state_ was while replies held it, kept to be written
  // again once they are let go (TakeUnheldBuffer): a fresh state-sized
  // buffer is mapped by malloc and every page of it faulted in: a 64 MiB
  // shard's PUSH_PULL with four async workers moved 1.4-2.3 GB/s against
  // 2.4-2.6 with the spares (benchmarks/log/pslite_compare.md). At most
  // kMaxSpares, so a ps keeps at most that many copies of its state
  // beyond the two; replies of more versions than kMaxSpares + 1 at once
  // make new buffers again. Let go after kQuietUpdates updates in a row
  // that found next_state_ free (one worker, or small replies).
  struct Spare {
    std::shared_ptr<PinnedFloats> buffer;
    int64_t slots;  // the version of the slots it holds (slots_version_)
  };
  static constexpr size_t kMaxSpares = 2;
  static constexpr int kQuietUpdates = 16;
  std::vector<Spare> spares_;
  int quiet_updates_ = 0;
  int64_t buffers_made_ = 2;
  int64_t updates_ = 0;
  std::vector<TensorSegment> segments_;
  std::vector<int64_t> segment_updates_;  // [segment]
  bool uniform_ = true;                   // every segment_updates_ == updates_
  // What the update under way does to each segment (PlanSegments).
  std::vector<shard_store_internal::SegmentPlan> segment_plan_;
  // Update's sums of squares of each block it wrote, and of the checked
  // gradient's (scratch).
  std::vector<std::array<float, 32>> block_lanes_;
};

}  // namespace pstrain

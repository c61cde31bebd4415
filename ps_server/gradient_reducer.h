#pragma once

// Sync: the workers' averaged gradient of one version, handed back to them
// instead of applied (REDUCE, proto/pstrain.proto). A PyTorch script's
// backward() ends with it in .grad, as DDP's does, so that what the script
// does between backward and step (clip_grad_norm_, GradScaler's unscale_
// and its inf check) sees the gradient of the whole global batch; each
// worker then pushes what .grad holds at step() as any push.
//
// A round is one version: each live rank's gradient of it, weighted by its
// examples, summed in rank order once every live rank's is in (so a run
// repeats bit for bit, as SyncPolicy's sums), times 1 / the total weight.
// A tensor is absent from the average when every contribution of examples
// said it is (step settings' absent): no worker had a gradient for it. A
// contribution of 0 examples (a worker whose step had no gradient) adds
// nothing, to the sum or to the absent tensors, but the round waits for it
// as for any. Nothing of a
// round is applied, checkpointed or replicated: after a ps restarts or a
// rollback, the workers rejoin and compute the step again.
//
// A round waits for every live rank that has not pushed the round's
// version yet (Pushed): one that did will not contribute to it.
//
// One round at a time. A contribution of a later version starts a new
// round (every worker of the previous one had its answer, or will find the
// job past it); one of an earlier version is stale (the job moved on
// without the worker) and is answered without an average, and so is one
// out of order (a version's first round other than 0, or a round other
// than the next once this one is complete), which no worker that follows
// the protocol sends: so no round waited in is ever overtaken within a
// version.
//
// Memory: one buffer per contributing rank, up to kMaxHeldFloats in all;
// past it, contributions are added on arrival instead (such a round
// repeats only to rounding).
//
// Thread safety: none; the ps's event loop owns it.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ps_server/parked_requests.h"

namespace pstrain {

class GradientReducer {
 public:
  static constexpr int64_t kMaxHeldFloats = int64_t{64} << 20;

  // `num_workers` rank slots, gradients of `size` floats.
  GradientReducer(int num_workers, int64_t size);

  enum class Added {
    kWaiting,   // in; the round waits for other ranks
    kComplete,  // in, and the round is complete: Take the answers
    kStale,     // of a version before the round's: not kept
  };
  // Rank `rank`'s gradient of `version` (its reduce `round` of the step:
  // rounds are ordered by version, then round), of `num_examples` examples, with
  // the tensors it lacks (`absent`, ascending), and where its answer goes
  // (`reply`). A second contribution of the rank to the same round takes
  // the place of its first (a repeat after a reconnect), and to a complete
  // round is answered at once (kComplete).
  // REQUIRES: 0 <= rank < num_workers, grad.size() == size.
  Added Add(int rank, int64_t version, uint32_t round, absl::Span<const float> grad,
            int num_examples, absl::Span<const int32_t> absent, Parked reply);

  // A dead rank is not waited for; one back is. May complete the round.
  // REQUIRES: 0 <= rank < num_workers.
  bool SetActive(int rank, bool active);

  // Rank `rank` pushed its gradient of `version`: it has left that
  // version's rounds, and they no longer wait for it (a worker that made
  // fewer averaging passes in the step than the others, or none, would
  // otherwise leave them waiting forever). May complete the round.
  // REQUIRES: 0 <= rank < num_workers.
  bool Pushed(int rank, int64_t version);

  // Once complete: the answers waiting (each to be sent with average()
  // and absent()); none stay. Before: none.
  std::vector<Parked> TakeAnswers();
  bool complete() const { return complete_; }
  int64_t version() const { return version_; }
  const std::shared_ptr<const std::vector<float>>& average() const { return average_; }
  const std::vector<int32_t>& absent() const { return absent_; }

  // Answers that waited for a round a later one overtook (the job went
  // past it): to be answered as stale, without an average; none stay.
  std::vector<Parked> TakeOvertaken();
  // Drops rank `rank`'s waiting answer (a newer client of the rank).
  void Forget(int rank);
  // Every waiting answer, to be answered with an error; the round is
  // emptied (a rollback, a shard released).
  std::vector<Parked> TakeAll();

 private:
  void StartRound(int64_t version, uint32_t round);
  bool CheckComplete();
  void Finish();

  int64_t size_;
  int64_t version_ = -1;  // the round's (-1: none yet)
  uint32_t round_ = 0;
  bool complete_ = false;
  std::vector<bool> active_;
  std::vector<int64_t> pushed_;  // [rank] the last version it pushed (-1: none)
  std::vector<bool> in_;  // [rank] contributed to the round
  std::vector<int> examples_;
  std::vector<std::vector<float>> held_;  // [rank] as sent, until the sum (Finish weighs it)
  std::vector<bool> is_held_;
  std::vector<float> arrival_sum_;  // contributions past the memory bound
  bool arrival_sum_used_ = false;
  int64_t held_floats_ = 0;
  std::vector<std::vector<int32_t>> absent_of_;  // [rank]
  std::vector<std::optional<Parked>> waiting_;   // [rank]
  std::vector<Parked> overtaken_;
  std::shared_ptr<const std::vector<float>> average_;
  std::vector<int32_t> absent_;
};

}  // namespace pstrain

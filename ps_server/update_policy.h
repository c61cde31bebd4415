#pragma once

// When a shard applies a pushed gradient, and when it may answer a pull:
// the consistency model. One interface, two implementations:
//
//  - SyncPolicy (sync, s = 0): version v accumulates the gradients of the
//    workers computed on v, weighted by their example counts and summed
//    in rank order whatever order they arrive in (bit for bit the same
//    sum in every run); once
//    num_workers - backup_workers have arrived it applies their weighted
//    average once and moves to v + 1. A gradient computed on an older
//    version is dropped: "late" with backup workers (it missed its
//    version's cut, however far behind), "stale" without. Once the job's
//    last version (JobConfig.total_steps, if set) is applied, every push is
//    dropped as late. Pulls for version > current wait. A rank's second
//    gradient for the version just applied, which had its first, is a
//    duplicate: a restarted worker repeating the step its predecessor died
//    pushing (it reached some shards only). That worker computes the step
//    on the previous version's parameters, which the shard keeps
//    (ShardStore::pinned_previous_state), so that its gradient for the
//    shards that lack it is the one its predecessor would have sent.
//  - AsyncPolicy (async, s = infinity; ssp, 0 <= s < infinity): every
//    gradient is applied on arrival and the version moves by one; its
//    staleness (current version - version it was computed on) is recorded
//    and, with staleness_lr, divides the learning rate. With a bound s, a
//    worker about to compute step t waits until the slowest worker has
//    finished at least t - s steps (stale synchronous parallel). With
//    dynamic workers (JobConfig.dynamic_workers) the job is total_steps
//    updates, whoever pushes them: once the shard applied them, every
//    push is dropped as late, so that workers pushing at once do not
//    overshoot.
//
// Dead workers (recovery): a rank the ps declared dead (SetActive false) is
// not waited for: a sync version completes with the gradients of the live
// ranks (less the backup workers, at least one), and SSP's slowest clock is
// the slowest live rank's. A rank that comes back is waited for again.
//
// Thread safety: none; the ps's single event loop owns it.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"
#include "ps_server/shard_store.h"

namespace pstrain {

enum class PushResult {
  kAccumulated,        // sync: counted toward the current version, not applied yet
  kApplied,            // applied (sync: this push completed the version)
  kStale,              // dropped: computed on a version already passed
  kLate,               // dropped: sync with backup workers, arrived after the cut
  kEmpty,              // async: zero examples, nothing to apply
  kRefused,            // async: the update would make the shard non-finite; not applied
  kDuplicate,          // sync: this rank's gradient for this version (or for the version
                       // just applied) is in already (a restarted worker repeating its
                       // step); async and SSP: this rank's step is in already (the rank's
                       // clock is past it: a worker that rejoined computes its step in
                       // flight again and pushes it to every shard); not applied twice
  kNonFiniteGradient,  // a policy that ChecksGradient(): the gradient is not finite
                       // in f32 (IsFiniteInF32); the parameters, the version and the
                       // rank's clock are as they were (the store's previous state is
                       // its current one, as after any refused update: only sync,
                       // which checks first, reads it)
};

struct PushOutcome {
  PushResult result = PushResult::kAccumulated;
  int64_t staleness = 0;  // version at arrival - version computed on
  // The update this push led to was not applied: it would have made the
  // shard non-finite (async: with kRefused; sync: the version still
  // advances, its average unapplied, so that training goes on).
  bool update_refused = false;
};

struct PullRequest {
  int rank = 0;
  int64_t step = 0;         // steps the worker has finished (its clock)
  int64_t min_version = 0;  // the version it needs at least
};

class UpdatePolicy {
 public:
  virtual ~UpdatePolicy() = default;

  // Applies or accumulates the gradient of worker `rank` for its step
  // `step`, computed on `version`, averaged over `num_examples` examples.
  // InvalidArgument for a version from the future. A second push by the
  // same worker to the same sync version, or to the one just applied with
  // its first, is kDuplicate, not applied; so is an async or SSP push of a
  // step below the rank's clock here (not with dynamic workers, whose
  // ranks are slots that a new process takes at the slowest clock).
  // `settings` (may be null): the
  // push's own optimizer settings (ShardStore, common/param_groups.h):
  // async applies them (their lrs divided by the staleness with
  // staleness_lr); sync applies a version with those of its lowest rank
  // that sent some, leaving alone the tensors every push of the version
  // says are absent. A schedule of the job's (JobConfig.lr_schedule) scales
  // their lrs by its lr at the update over the job's.
  // REQUIRES: grad.size() == store size, 0 <= rank < num_workers.
  virtual absl::StatusOr<PushOutcome> Push(int rank, int64_t step, int64_t version,
                                           absl::Span<const float> grad, int num_examples,
                                           const StepOptions* settings = nullptr) = 0;

  // Whether Push refuses a gradient that is not finite in f32 itself
  // (kNonFiniteGradient, before anything else, as a caller's own check
  // would): async and SSP check it in the update's own pass
  // (ShardStore::Apply's check_grad), which saves a pass over the gradient
  // on every push. Otherwise the caller checks it before Push.
  virtual bool ChecksGradient() const { return false; }

  // Whether `pull` may be answered with the current parameters now.
  virtual bool CanServe(const PullRequest& pull) const = 0;

  // The slowest worker's clock (steps finished), for SSP; the version in
  // sync (every worker has finished that many steps).
  virtual int64_t MinClock() const = 0;

  // Each worker rank's clock (steps finished) as this shard counts it:
  // sync: the version, plus one for a rank whose gradient for it is in;
  // async/ssp: from the pushes.
  virtual std::vector<int64_t> Clocks() const = 0;

  // Whether `rank` is waited for (see above). Returns true when this
  // completed the current sync version (its average applied, or refused:
  // `*update_refused`). REQUIRES: 0 <= rank < num_workers.
  virtual bool SetActive(int rank, bool active, bool* update_refused) = 0;

  // `rank` says it has finished `steps` steps (a PULL's step): its clock
  // is at least that. It matters after a shard was restored alone from a
  // checkpoint (async/ssp), whose clocks are behind the workers': without
  // it, SSP would park every worker's first pull for steps nobody will
  // push again. REQUIRES: 0 <= rank < num_workers.
  virtual void NoteSteps(int rank, int64_t steps) {}

  // Dynamic workers: `rank`, joining, starts at the slowest other live
  // rank's clock when it is behind it (ssp; nothing to do in async, and
  // sync has no dynamic workers). REQUIRES: 0 <= rank < num_workers.
  virtual void AdmitAtSlowestClock(int rank) {}

  // Sync: how many gradients were summed on arrival rather than in rank
  // order (ShardStats.unordered_sums); 0 for the other modes.
  virtual int64_t unordered_sums() const { return 0; }
  // Sync: pushes whose optimizer settings differed from another's of the
  // same version (which applies the lowest rank's); 0 for the other modes.
  virtual int64_t settings_differences() const { return 0; }

  // Sync: whether store().pinned_previous_state() holds the parameters of
  // version() - 1 (false at version 0 and after Resume, whose store has no
  // previous state). False for the other modes.
  virtual bool HoldsPreviousVersion() const { return false; }

  // Continues from a checkpoint: the version and, for async/ssp, the
  // clocks it recorded (ignored in sync, where they equal the version).
  // Call before any push. REQUIRES: version >= 0; clocks empty or one per rank.
  virtual void Resume(int64_t version, absl::Span<const int64_t> clocks) { version_ = version; }

  int64_t version() const { return version_; }
  const ShardStore& store() const { return *store_; }

 protected:
  explicit UpdatePolicy(std::unique_ptr<ShardStore> store) : store_(std::move(store)) {}

  std::unique_ptr<ShardStore> store_;
  int64_t version_ = 0;
};

// Builds the policy for `job`'s mode. InvalidArgument for an inconsistent
// job (unknown mode, backup_workers >= num_workers, negative staleness).
absl::StatusOr<std::unique_ptr<UpdatePolicy>> CreateUpdatePolicy(
    const proto::JobConfig& job, std::unique_ptr<ShardStore> store);

}  // namespace pstrain

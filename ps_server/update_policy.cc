#include "ps_server/update_policy.h"

#include <algorithm>
#include <map>
#include <string>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "common/param_groups.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps_server/relative_weights.h"

namespace pstrain {
namespace {

// At most this many floats of buffers keep a sync version's early pushes
// to be summed in rank order (SyncPolicy::Fold): 256 MiB a shard.
constexpr int64_t kMaxHeldFloats = int64_t{64} << 20;

// A push's own settings under the job's schedule (--lr_schedule on the
// ps, a script's lr_schedule=): every group's lr times the schedule's lr
// now over the job's lr (exactly 1 for the constant schedule, and then
// nothing changes).
void ScaleByScheduleInPlace(double factor, StepOptions* settings) {
  if (factor == 1.0) return;
  for (double& lr : settings->lrs) lr *= factor;
}

class SyncPolicy final : public UpdatePolicy {
 public:
  SyncPolicy(const proto::JobConfig& job, std::unique_ptr<ShardStore> store, LrSchedule schedule)
      : UpdatePolicy(std::move(store)),
        schedule_(std::move(schedule)),
        base_lr_(job.learning_rate()),
        backup_(job.backup_workers()),
        total_steps_(job.total_steps()),
        pushed_(job.num_workers(), false),
        pushed_before_(job.num_workers(), false),
        active_(job.num_workers(), true),
        accum_(store_->size(), 0.0f),
        held_(job.num_workers()),
        held_weight_(job.num_workers(), 0.0f),
        is_held_(job.num_workers(), false) {}

  absl::StatusOr<PushOutcome> Push(int rank, int64_t step, int64_t version,
                                   absl::Span<const float> grad, int num_examples,
                                   const StepOptions* settings) override {
    if (version > version_) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient computed on version ", version, ", a version from the future"));
    }
    // Its gradient for the version just applied was in it: a restarted
    // worker's repeat of the step, for the shards its predecessor died
    // before pushing to (even after the last version: it is no straggler).
    if (version == version_ - 1 && pushed_before_[rank]) {
      return PushOutcome{PushResult::kDuplicate, 1};
    }
    // After the job's last version nothing may change the parameters (a
    // straggler that saw another shard finish may still push here).
    const bool finished = total_steps_ > 0 && version_ >= total_steps_;
    if (version < version_ || finished) {
      // With backup workers every gradient that missed its version's cut is
      // late, however far behind (TF's SyncReplicasOptimizer drops them all).
      const bool late = backup_ > 0 || finished;
      return PushOutcome{late ? PushResult::kLate : PushResult::kStale, version_ - version};
    }
    if (pushed_[rank]) return PushOutcome{PushResult::kDuplicate, 0};
    pushed_[rank] = true;
    ++num_pushed_;
    weight_ += num_examples;
    NoteSettings(rank, settings);
    const float weight = static_cast<float>(num_examples);
    if (!Complete()) {
      Fold(rank, grad, weight);
      return PushOutcome{PushResult::kAccumulated, 0};
    }
    // The gradient that completes the version is summed in the update's
    // own pass (ShardStore::ApplySum) where rank order puts it there:
    // after every other, or as the second of two (a + b == b + a) when
    // both weigh the same. (Each line below takes Folded() and then
    // weights_.Of(): the weights are relative to the first in rank order.)
    bool applied = false;
    if (num_pushed_ == 1) {
      applied = ApplyAverage({}, grad, weights_.Of(weight));
    } else if (num_pushed_ == 2 && !AnyHeld()) {
      applied = ApplyAverage(accum_, grad, weights_.Of(weight));
    } else if (num_pushed_ == 2 && held_weight_[FirstHeld()] == weight) {
      applied = ApplyAverage(held_[FirstHeld()], grad, weights_.Of(weight));
    } else if (rank > max_summed_ && rank > HighestHeld()) {
      const absl::Span<const float> before = Folded();
      applied = ApplyAverage(before, grad, weights_.Of(weight));  // last in rank order
    } else {
      Fold(rank, grad, weight);
      applied = ApplyAverage(Folded(), {}, 0.0f);
    }
    return PushOutcome{PushResult::kApplied, 0, !applied};
  }

  bool CanServe(const PullRequest& pull) const override { return version_ >= pull.min_version; }
  int64_t MinClock() const override { return version_; }
  int64_t unordered_sums() const override { return unordered_sums_; }
  int64_t settings_differences() const override { return settings_differences_; }
  // Every version is one store update (ApplyAverage), so the store's
  // previous state is the previous version's once this policy applied one.
  bool HoldsPreviousVersion() const override { return store_->pinned_previous_state() != nullptr; }
  std::vector<int64_t> Clocks() const override {
    std::vector<int64_t> clocks(pushed_.size(), version_);
    for (size_t r = 0; r < pushed_.size(); ++r) clocks[r] += pushed_[r] ? 1 : 0;
    return clocks;
  }

  bool SetActive(int rank, bool active, bool* update_refused) override {
    active_[rank] = active;
    *update_refused = false;
    if (!active) {
      Advance();  // the version's sum no longer waits for it
    } else if (rank < next_ && !pushed_[rank] && rank > max_summed_) {
      next_ = rank;  // back before anything after it was summed: waited for again
    }
    const bool finished = total_steps_ > 0 && version_ >= total_steps_;
    if (active || finished || num_pushed_ == 0 || !Complete()) return false;
    *update_refused = !ApplyAverage(Folded(), {}, 0.0f);
    return true;
  }

 private:
  // The version's settings: the lowest rank's that sent some, and a vote
  // per tensor a push said is absent.
  void NoteSettings(int rank, const StepOptions* settings) {
    if (settings == nullptr) return;
    if (settings_rank_ >= 0) NoteDifference(rank, *settings);
    if (settings_rank_ < 0 || rank < settings_rank_) {
      settings_ = *settings;
      settings_rank_ = rank;
    }
    for (int32_t t : settings->absent) ++absent_votes_[t];
  }
  // A version applies one rank's settings: a worker whose own differ (a
  // scheduler stepped on its own loss, a restarted worker's not fast
  // forwarded) trains with settings its param_groups do not show, and its
  // update says nothing of it. The ps says so, once, and counts them.
  void NoteDifference(int rank, const StepOptions& settings) {
    const bool later = rank > settings_rank_;
    const std::string difference =
        later ? SettingsDifference(settings, settings_) : SettingsDifference(settings_, settings);
    if (difference.empty()) return;
    if (settings_differences_++ > 0) return;
    LOG(WARNING) << "version " << version_ << ": rank " << std::max(rank, settings_rank_)
                 << "'s optimizer settings differ from rank " << std::min(rank, settings_rank_)
                 << "'s (" << difference << "), and a sync version applies the settings of the "
                 << "lowest rank that pushed it: the other's param_groups show settings its "
                 << "updates do not use. Step every worker's schedulers on values they share (a "
                 << "ReduceLROnPlateau stepped on each worker's own training loss does not). "
                 << "Said once for this ps";
  }

  // What the version applies with (null: the job's optimizer and schedule):
  // absent, the tensors absent from every push of the version.
  StepOptions* VersionSettings() {
    if (settings_rank_ < 0) return nullptr;
    settings_.absent.clear();
    for (const auto& [tensor, votes] : absent_votes_) {
      if (votes == num_pushed_) settings_.absent.push_back(tensor);
    }
    return &settings_;
  }

  // Whether the current version has every gradient it waits for: those of
  // the live ranks, less the backup workers (at least one).
  bool Complete() const {
    const int live = static_cast<int>(std::count(active_.begin(), active_.end(), true));
    return num_pushed_ >= std::max(1, live - backup_);
  }

  // The version's sum is formed in rank order, whatever order the pushes
  // arrive in, so that a sync run repeats bit for bit with any number of
  // workers (floating-point addition is not associative). A push of the
  // lowest rank not summed yet (next_; ranks declared dead are passed
  // over) is added to the accumulator at once, with every kept push that
  // then follows it; one that arrives before a lower rank's is kept,
  // with its weight, until then. Keeping costs the same pass as adding, and one
  // more later. When keeping it would take more than kMaxHeldFloats of
  // buffers, and for a dead rank that came back after a higher rank was
  // summed, the push is added on arrival instead (such a version repeats
  // only to rounding; a warning says so, every 100th time).
  void Fold(int rank, absl::Span<const float> grad, float weight) {
    const auto size = static_cast<int64_t>(grad.size());
    if (rank <= next_ || !MakeRoomToKeep(rank, size)) {
      if (rank != next_) {
        ++unordered_sums_;
        LOG_EVERY_N(WARNING, 100)
            << "sync: a version's gradients summed partly in arrival order ("
            << (rank < next_ ? "a rank declared dead pushed after all"
                             : "more gradients arrived before a lower rank's than are kept")
            << "); the run repeats only to rounding";
      }
      AddToAccumulator(rank, grad.data(), weights_.Of(weight));
      if (rank == next_) {
        ++next_;
        Advance();
      }
      return;
    }
    std::vector<float>& kept = held_[static_cast<size_t>(rank)];
    allocated_floats_ -= static_cast<int64_t>(kept.capacity());
    kept.resize(grad.size());
    allocated_floats_ += static_cast<int64_t>(kept.capacity());
    // + 0 as the accumulator's first (a -0 as +0): as the first of two
    // of the same weight, ApplySum adds the other to it directly.
    Eigen::Map<Eigen::VectorXf>(kept.data(), size) =
        (Eigen::Map<const Eigen::VectorXf>(grad.data(), size).array() + 0.0f).matrix();
    held_weight_[static_cast<size_t>(rank)] = weight;
    is_held_[static_cast<size_t>(rank)] = true;
  }

  // Whether rank `rank`'s push of `size` floats may be kept: at most
  // kMaxHeldFloats of buffers are allocated at any time (they are reused
  // between versions; idle ones are freed to make room).
  bool MakeRoomToKeep(int rank, int64_t size) {
    const auto r = static_cast<size_t>(rank);
    const int64_t more = size - static_cast<int64_t>(held_[r].capacity());
    if (allocated_floats_ + more <= kMaxHeldFloats) return true;
    for (size_t q = 0; q < held_.size(); ++q) {
      if (q == r || is_held_[q] || held_[q].capacity() == 0) continue;
      allocated_floats_ -= static_cast<int64_t>(held_[q].capacity());
      std::vector<float>().swap(held_[q]);
    }
    return allocated_floats_ + more <= kMaxHeldFloats;
  }

  // Moves next_ past the ranks summed, kept (adding them) or dead.
  void Advance() {
    const int n = static_cast<int>(pushed_.size());
    while (next_ < n) {
      const auto r = static_cast<size_t>(next_);
      if (is_held_[r]) {
        AddToAccumulator(next_, held_[r].data(), weights_.Of(held_weight_[r]));
        is_held_[r] = false;
      } else if (!pushed_[r] && active_[r]) {
        return;  // waited for
      }
      ++next_;
    }
  }

  // acc (+)= weight x grad; the version's first is written, not added to
  // zeros: one pass less per version, and no clearing after it (0 + x, so
  // that a -0 becomes +0 exactly as the sum did).
  void AddToAccumulator(int rank, const float* grad, float weight) {
    max_summed_ = std::max(max_summed_, rank);
    const auto size = static_cast<Eigen::Index>(accum_.size());
    Eigen::Map<Eigen::VectorXf> acc(accum_.data(), size);
    const auto weighted = weight * Eigen::Map<const Eigen::VectorXf>(grad, size);
    if (accum_empty_) {
      acc = (weighted.array() + 0.0f).matrix();
      accum_empty_ = false;
    } else {
      acc += weighted;
    }
  }

  // The version's whole sum: what is kept added in rank order.
  absl::Span<const float> Folded() {
    for (size_t r = 0; r < held_.size(); ++r) {
      if (!is_held_[r]) continue;
      AddToAccumulator(static_cast<int>(r), held_[r].data(), weights_.Of(held_weight_[r]));
      is_held_[r] = false;
    }
    return accum_;
  }

  bool AnyHeld() const { return HighestHeld() >= 0; }
  // The highest rank kept (-1: none).
  int HighestHeld() const {
    for (size_t r = is_held_.size(); r-- > 0;) {
      if (is_held_[r]) return static_cast<int>(r);
    }
    return -1;
  }
  size_t FirstHeld() const {
    return static_cast<size_t>(std::find(is_held_.begin(), is_held_.end(), true) -
                               is_held_.begin());
  }

  // Weighted average over the version's examples: with the same global
  // batch, the gradient one process would compute. Its sum is `partial`
  // (accumulated; empty: none) plus `weight` x `last` (the push that
  // completed it; empty when a dead rank's absence did), each weight
  // relative (weights_). False when the update was refused (the version
  // moves on all the same).
  bool ApplyAverage(absl::Span<const float> partial, absl::Span<const float> last, float weight) {
    const float scale = weights_.Scale(weight_);
    const double scheduled = schedule_.At(version_);
    const float lr = static_cast<float>(scheduled);
    StepOptions* settings = VersionSettings();
    if (settings != nullptr) ScaleByScheduleInPlace(scheduled / base_lr_, settings);
    const bool applied =
        last.empty() ? store_->Apply(partial, scale, lr, /*check_grad=*/false, settings).ok()
                     : store_->ApplySum(partial, last, weight, scale, lr, settings).ok();
    settings_rank_ = -1;
    absent_votes_.clear();
    pushed_before_.swap(pushed_);
    std::fill(pushed_.begin(), pushed_.end(), false);
    std::fill(is_held_.begin(), is_held_.end(), false);
    accum_empty_ = true;
    max_summed_ = -1;
    next_ = 0;
    Advance();  // past the dead ranks
    weight_ = 0;
    weights_.Reset();
    num_pushed_ = 0;
    ++version_;
    return applied;
  }

  LrSchedule schedule_;  // of the version being applied
  double base_lr_;       // the job's lr, which the schedule scales
  int backup_;
  int64_t total_steps_;  // versions the job applies; 0: no limit
  std::vector<bool> pushed_;         // [rank] its gradient for version_ is in
  std::vector<bool> pushed_before_;  // [rank] its gradient for version_ - 1 was
  std::vector<bool> active_;
  int num_pushed_ = 0;
  int64_t weight_ = 0;
  RelativeWeights weights_;  // the version's, in rank order
  std::vector<float> accum_;
  // Rank order (Fold): the lowest rank not summed yet, whether accum_
  // holds nothing of this version yet, and the pushes kept until the ranks
  // below them are in, with their weights.
  int next_ = 0;
  int max_summed_ = -1;  // the highest rank in accum_ (-1: none)
  bool accum_empty_ = true;
  std::vector<std::vector<float>> held_;  // [rank]; buffers kept between versions
  std::vector<float> held_weight_;        // [rank] the weight of what held_ keeps
  std::vector<bool> is_held_;             // [rank]
  int64_t allocated_floats_ = 0;          // in held_'s buffers (<= kMaxHeldFloats)
  int64_t unordered_sums_ = 0;            // pushes Fold added out of rank order
  int64_t settings_differences_ = 0;      // pushes whose settings differed (NoteDifference)
  // The version's settings (NoteSettings): of rank settings_rank_ (-1: no
  // push sent any), and [tensor] how many pushes said it is absent.
  StepOptions settings_;
  int settings_rank_ = -1;
  std::map<int32_t, int> absent_votes_;
};

class AsyncPolicy final : public UpdatePolicy {
 public:
  AsyncPolicy(const proto::JobConfig& job, std::unique_ptr<ShardStore> store, LrSchedule schedule,
              int64_t bound)
      : UpdatePolicy(std::move(store)),
        schedule_(std::move(schedule)),
        base_lr_(job.learning_rate()),
        staleness_lr_(job.staleness_lr()),
        bound_(bound),
        dynamic_(job.dynamic_workers()),
        last_update_(job.dynamic_workers() ? job.total_steps() : 0),
        clocks_(job.num_workers(), 0),
        active_(job.num_workers(), true) {}

  absl::StatusOr<PushOutcome> Push(int rank, int64_t step, int64_t version,
                                   absl::Span<const float> grad, int num_examples,
                                   const StepOptions* settings) override {
    const int64_t staleness = version_ - version;
    // Dynamic workers: the job is its number of updates, whoever makes
    // them; pushes that crossed the last one on the way are dropped.
    const bool late = last_update_ > 0 && version_ >= last_update_;
    // A gradient that is not finite is refused before anything else; on
    // the way to the update, by the update's own pass (ChecksGradient).
    if ((version > version_ || late || num_examples == 0) && !IsFiniteInF32(grad, store_->pool())) {
      return PushOutcome{PushResult::kNonFiniteGradient, staleness};
    }
    if (version > version_) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient computed on version ", version, ", a version from the future"));
    }
    // This rank's step is in already: a worker that rejoined after a ps
    // loss computes its step in flight again and pushes it to every
    // shard, and only the shards that lost it apply it. (A dynamic job's
    // rank is a slot, and a process that takes it starts at the slowest
    // clock of one shard, which another may be past: its pushes count.)
    if (!dynamic_ && step < clocks_[rank]) {
      return PushOutcome{PushResult::kDuplicate, staleness};
    }
    const int64_t clock_before = clocks_[rank];
    clocks_[rank] = std::max(clocks_[rank], step + 1);
    if (late) return PushOutcome{PushResult::kLate, staleness};
    if (num_examples == 0) return PushOutcome{PushResult::kEmpty, staleness};
    // Zhang et al. 2016, "Staleness-aware async-SGD": lr / staleness.
    const double at = schedule_.At(version_);
    const float scheduled = static_cast<float>(at);
    const bool divide = staleness_lr_ && staleness > 1;
    const float lr = divide ? scheduled / static_cast<float>(staleness) : scheduled;
    StepOptions scaled;
    if (settings != nullptr) {
      const double factor = (at / base_lr_) / (divide ? static_cast<double>(staleness) : 1.0);
      if (factor != 1.0) {
        scaled = *settings;
        ScaleByScheduleInPlace(factor, &scaled);
        settings = &scaled;
      }
    }
    const absl::Status applied = store_->Apply(grad, 1.0f, lr, /*check_grad=*/true, settings);
    if (absl::IsInvalidArgument(applied)) {
      clocks_[rank] = clock_before;
      return PushOutcome{PushResult::kNonFiniteGradient, staleness};
    }
    if (!applied.ok()) return PushOutcome{PushResult::kRefused, staleness, true};
    ++version_;
    return PushOutcome{PushResult::kApplied, staleness};
  }

  bool ChecksGradient() const override { return true; }

  bool CanServe(const PullRequest& pull) const override {
    return bound_ < 0 || pull.step - MinClock() <= bound_;
  }

  // The slowest live rank's clock (every rank's when none is live).
  int64_t MinClock() const override {
    int64_t min_live = -1;
    for (size_t r = 0; r < clocks_.size(); ++r) {
      if (active_[r] && (min_live < 0 || clocks_[r] < min_live)) min_live = clocks_[r];
    }
    return min_live >= 0 ? min_live : *std::min_element(clocks_.begin(), clocks_.end());
  }
  std::vector<int64_t> Clocks() const override { return clocks_; }

  bool SetActive(int rank, bool active, bool* update_refused) override {
    active_[rank] = active;
    *update_refused = false;
    return false;
  }

  void NoteSteps(int rank, int64_t steps) override {
    clocks_[rank] = std::max(clocks_[rank], steps);
  }

  void AdmitAtSlowestClock(int rank) override {
    if (bound_ < 0) return;
    int64_t slowest = -1;
    for (size_t r = 0; r < clocks_.size(); ++r) {
      if (static_cast<int>(r) == rank || !active_[r]) continue;
      if (slowest < 0 || clocks_[r] < slowest) slowest = clocks_[r];
    }
    clocks_[rank] = std::max(clocks_[rank], slowest);
  }

  void Resume(int64_t version, absl::Span<const int64_t> clocks) override {
    version_ = version;
    if (clocks.size() == clocks_.size()) clocks_.assign(clocks.begin(), clocks.end());
  }

 private:
  LrSchedule schedule_;  // of the update count (the version)
  double base_lr_;       // the job's lr, which the schedule scales
  bool staleness_lr_;
  int64_t bound_;  // -1: none (async)
  bool dynamic_;   // dynamic workers: a rank is a slot, its clock not one process's
  // Dynamic workers: the job's updates (JobConfig.total_steps), after
  // which every push is dropped as late; 0: no limit (a worker counts its
  // own steps).
  int64_t last_update_;
  std::vector<int64_t> clocks_;
  std::vector<bool> active_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<UpdatePolicy>> CreateUpdatePolicy(
    const proto::JobConfig& job, std::unique_ptr<ShardStore> store) {
  if (job.num_workers() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers must be >= 1, got ", job.num_workers()));
  }
  if (job.backup_workers() < 0 || job.backup_workers() >= job.num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup_workers must be in [0, num_workers=", job.num_workers(), "), got ",
                     job.backup_workers()));
  }
  if (job.staleness() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("staleness must be >= 0, got ", job.staleness()));
  }
  ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::FromJob(job));
  switch (job.mode()) {
    case proto::SYNC:
      return std::unique_ptr<UpdatePolicy>(
          new SyncPolicy(job, std::move(store), std::move(schedule)));
    case proto::ASYNC:
      return std::unique_ptr<UpdatePolicy>(
          new AsyncPolicy(job, std::move(store), std::move(schedule), -1));
    case proto::SSP:
      return std::unique_ptr<UpdatePolicy>(
          new AsyncPolicy(job, std::move(store), std::move(schedule), job.staleness()));
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown update mode ", job.mode()));
  }
}

}  // namespace pstrain

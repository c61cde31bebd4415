#include "ps_server/update_policy.h"

#include <algorithm>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

class SyncPolicy final : public UpdatePolicy {
 public:
  SyncPolicy(const proto::JobConfig& job, std::unique_ptr<ShardStore> store, LrSchedule schedule)
      : UpdatePolicy(std::move(store)),
        schedule_(std::move(schedule)),
        backup_(job.backup_workers()),
        total_steps_(job.total_steps()),
        pushed_(job.num_workers(), false),
        active_(job.num_workers(), true),
        accum_(store_->size(), 0.0f) {}

  absl::StatusOr<PushOutcome> Push(int rank, int64_t step, int64_t version,
                                   absl::Span<const float> grad, int num_examples) override {
    if (version > version_) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient computed on version ", version, ", a version from the future"));
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
    const bool first = num_pushed_ == 0;
    ++num_pushed_;
    if (!Complete()) {
      Accumulate(grad, num_examples, first);
      return PushOutcome{PushResult::kAccumulated, 0};
    }
    // The gradient that completes the version is summed in the update's
    // own pass (ShardStore::ApplySum), not into the accumulator first.
    weight_ += num_examples;
    const bool applied = ApplyAverage(first ? absl::Span<const float>() : accum_, grad,
                                      static_cast<float>(num_examples));
    return PushOutcome{PushResult::kApplied, 0, !applied};
  }

  bool CanServe(const PullRequest& pull) const override { return version_ >= pull.min_version; }
  int64_t MinClock() const override { return version_; }
  std::vector<int64_t> Clocks() const override {
    std::vector<int64_t> clocks(pushed_.size(), version_);
    for (size_t r = 0; r < pushed_.size(); ++r) clocks[r] += pushed_[r] ? 1 : 0;
    return clocks;
  }

  bool SetActive(int rank, bool active, bool* update_refused) override {
    active_[rank] = active;
    *update_refused = false;
    const bool finished = total_steps_ > 0 && version_ >= total_steps_;
    if (active || finished || num_pushed_ == 0 || !Complete()) return false;
    *update_refused = !ApplyAverage(accum_, {}, 0.0f);
    return true;
  }

 private:
  // Whether the current version has every gradient it waits for: those of
  // the live ranks, less the backup workers (at least one).
  bool Complete() const {
    const int live = static_cast<int>(std::count(active_.begin(), active_.end(), true));
    return num_pushed_ >= std::max(1, live - backup_);
  }

  // Adds a gradient that does not complete the version; `first`: the
  // version's first.
  void Accumulate(absl::Span<const float> grad, int num_examples, bool first) {
    Eigen::Map<Eigen::VectorXf> acc(accum_.data(), static_cast<Eigen::Index>(accum_.size()));
    const auto weighted =
        static_cast<float>(num_examples) *
        Eigen::Map<const Eigen::VectorXf>(grad.data(), static_cast<Eigen::Index>(grad.size()));
    // The version's first gradient is written, not added to zeros: one
    // pass less per version, and no clearing after it. (0 + x, so that a
    // -0 becomes +0 exactly as the sum did.)
    if (first) {
      acc = (weighted.array() + 0.0f).matrix();
    } else {
      acc += weighted;
    }
    weight_ += num_examples;
  }

  // Weighted average over the version's examples: with the same global
  // batch, exactly the gradient one process would compute. Its sum is
  // `partial` (accumulated; empty: none) plus `weight` x `last` (the push
  // that completed it; empty when a dead rank's absence did). False when
  // the update was refused (the version moves on all the same).
  bool ApplyAverage(absl::Span<const float> partial, absl::Span<const float> last, float weight) {
    const float scale = weight_ > 0 ? 1.0f / static_cast<float>(weight_) : 0.0f;
    const float lr = static_cast<float>(schedule_.At(version_));
    const bool applied = last.empty() ? store_->Apply(partial, scale, lr).ok()
                                      : store_->ApplySum(partial, last, weight, scale, lr).ok();
    std::fill(pushed_.begin(), pushed_.end(), false);
    weight_ = 0;
    num_pushed_ = 0;
    ++version_;
    return applied;
  }

  LrSchedule schedule_;  // of the version being applied
  int backup_;
  int64_t total_steps_;  // versions the job applies; 0: no limit
  std::vector<bool> pushed_;
  std::vector<bool> active_;
  int num_pushed_ = 0;
  int64_t weight_ = 0;
  std::vector<float> accum_;
};

class AsyncPolicy final : public UpdatePolicy {
 public:
  AsyncPolicy(const proto::JobConfig& job, std::unique_ptr<ShardStore> store, LrSchedule schedule,
              int64_t bound)
      : UpdatePolicy(std::move(store)),
        schedule_(std::move(schedule)),
        staleness_lr_(job.staleness_lr()),
        bound_(bound),
        clocks_(job.num_workers(), 0),
        active_(job.num_workers(), true) {}

  absl::StatusOr<PushOutcome> Push(int rank, int64_t step, int64_t version,
                                   absl::Span<const float> grad, int num_examples) override {
    if (version > version_) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient computed on version ", version, ", a version from the future"));
    }
    clocks_[rank] = std::max(clocks_[rank], step + 1);
    const int64_t staleness = version_ - version;
    if (num_examples == 0) return PushOutcome{PushResult::kEmpty, staleness};
    // Zhang et al. 2016, "Staleness-aware async-SGD": lr / staleness.
    const float scheduled = static_cast<float>(schedule_.At(version_));
    const float lr = staleness_lr_ && staleness > 1 ? scheduled / static_cast<float>(staleness) : scheduled;
    if (!store_->Apply(grad, 1.0f, lr).ok()) return PushOutcome{PushResult::kRefused, staleness, true};
    ++version_;
    return PushOutcome{PushResult::kApplied, staleness};
  }

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

  void NoteSteps(int rank, int64_t steps) override { clocks_[rank] = std::max(clocks_[rank], steps); }

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
  bool staleness_lr_;
  int64_t bound_;  // -1: none (async)
  std::vector<int64_t> clocks_;
  std::vector<bool> active_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<UpdatePolicy>> CreateUpdatePolicy(
    const proto::JobConfig& job, std::unique_ptr<ShardStore> store) {
  if (job.num_workers() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers must be >= 1, got ", job.num_workers()));
  }
  if (job.backup_workers() < 0 || job.backup_workers() >= job.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("backup_workers must be in [0, num_workers=",
                                                   job.num_workers(), "), got ", job.backup_workers()));
  }
  if (job.staleness() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("staleness must be >= 0, got ", job.staleness()));
  }
  ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::FromJob(job));
  switch (job.mode()) {
    case proto::SYNC:
      return std::unique_ptr<UpdatePolicy>(new SyncPolicy(job, std::move(store), std::move(schedule)));
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

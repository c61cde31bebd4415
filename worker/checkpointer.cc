#include "worker/checkpointer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/clock.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {

Checkpointer::Checkpointer(CheckpointerOptions options, PsClient* client)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : RealClock()),
      client_(client),
      last_us_(clock_->NowMicros()) {
  CHECK_GE(options_.keep, 1);
}

int64_t Checkpointer::KeepFrom() const {
  const absl::StatusOr<int64_t> keep_from = KeepFromStep(options_.dir, options_.keep);
  return keep_from.ok() ? *keep_from : 0;
}

bool Checkpointer::Due(int64_t step, bool done) const {
  if (step == last_step_ || (options_.every_steps <= 0 && options_.every_s <= 0)) return false;
  if (done) return true;
  if (options_.every_steps > 0 && step % options_.every_steps == 0) return true;
  return options_.every_s > 0 && (clock_->NowMicros() - last_us_) * 1e-6 >= options_.every_s;
}

absl::Status Checkpointer::Save(int64_t step) {
  last_step_ = step;
  last_us_ = clock_->NowMicros();
  const std::string name = CheckpointName(step);
  // Which the ps tasks may remove their files of: decided here, where the
  // manifests are (a ps's directory may be on another host).
  ASSIGN_OR_RETURN(const int64_t keep_from, KeepFromStep(options_.dir, options_.keep));
  auto saved = client_->Save(step, options_.keep, keep_from);
  if (!saved.ok()) {
    return absl::Status(saved.status().code(),
                        absl::StrCat("checkpoint ", name, " not written: ", saved.status().message()));
  }
  const std::string created_at =
      absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  RETURN_IF_ERROR(WriteManifest(options_.dir, MakeManifest(options_.job, step, *saved, created_at)));
  const std::string path = absl::StrCat(options_.dir, "/", ManifestFileName(step));
  ASSIGN_OR_RETURN(const std::vector<int64_t> pruned,
                   PruneCheckpoints(options_.dir, options_.keep, "manifest.json"));
  LOG(INFO) << "checkpoint " << name << " written: " << path << " (" << saved->size()
            << " shards, version " << saved->front().version() << ")"
            << (pruned.empty() ? "" : absl::StrCat("; removed ", pruned.size(), " older"));
  return absl::OkStatus();
}

absl::StatusOr<proto::CheckpointManifest> Checkpointer::TryRestore(int64_t step,
                                                                   const RestoreScope& scope) {
  ASSIGN_OR_RETURN(const proto::CheckpointManifest m, ReadManifest(options_.dir, step));
  RETURN_IF_ERROR(
      CheckManifest(m, options_.job, absl::StrCat(options_.dir, "/", ManifestFileName(step))));
  const std::vector<proto::SavedShard> shards(m.shards().begin(), m.shards().end());
  // Every shard checks its file first, so that a damaged one on any ps
  // leaves every shard free to take an older checkpoint.
  const proto::JobConfig& job = options_.job.config;
  RETURN_IF_ERROR(client_->Restore(job, step, shards, /*verify_only=*/true, scope));
  RETURN_IF_ERROR(client_->Restore(job, step, shards, /*verify_only=*/false, scope));
  last_step_ = step;
  return m;
}

absl::StatusOr<proto::CheckpointManifest> Checkpointer::Resume(const RestoreScope& scope) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCheckpointSteps(options_.dir));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    auto m = TryRestore(*it, scope);
    const absl::Status s = m.status();
    if (s.ok()) {
      LOG(INFO) << "restored " << (scope.shards.empty() ? std::string("every shard")
                                                       : absl::StrCat(scope.shards.size(), " shard(s)"))
                << " from checkpoint " << CheckpointName(*it) << " in " << options_.dir;
      return m;
    }
    // A refusal that asks to rejoin (a ps restarted meanwhile) is the
    // caller's to handle, not a damaged checkpoint.
    if (IsRejoin(s)) return s;
    LOG(WARNING) << "checkpoint " << CheckpointName(*it) << " not used: " << s.message()
                 << (std::next(it) != steps.rend() ? "; trying the one before" : "");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--restore: no usable checkpoint in ", options_.dir,
      steps.empty() ? " (none was written: was the run started with --checkpoint_every_steps?)"
                    : " (every one was damaged or of another job; see the warnings above)"));
}

}  // namespace pstrain

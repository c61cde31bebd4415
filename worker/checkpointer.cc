#include "worker/checkpointer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checkpoint_dir.h"
#include "common/rejoin.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/train_options.h"

namespace pstrain {
namespace {

absl::Status Other(const std::string& path, absl::string_view field, const std::string& file,
                   const std::string& here) {
  return absl::FailedPreconditionError(absl::StrCat(path, ": a checkpoint of another job: ",
                                                    field, " is ", file, " there, ", here,
                                                    " here"));
}

proto::WorkerPosition Position(int rank, int64_t step, int64_t steps_per_epoch) {
  proto::WorkerPosition p;
  p.set_rank(rank);
  p.set_step(step);
  p.set_epoch(steps_per_epoch > 0 ? step / steps_per_epoch : 0);
  p.set_step_in_epoch(steps_per_epoch > 0 ? step % steps_per_epoch : step);
  return p;
}

// "lr 0.01, sgd (momentum 0.5, weight decay 0)".
std::string LrAndOptimizer(double lr, const absl::StatusOr<OptimizerConfig>& optimizer) {
  return absl::StrCat("lr ", lr, ", ",
                      optimizer.ok() ? DescribeOptimizer(*optimizer)
                                     : std::string(optimizer.status().message()));
}

absl::Status CheckJob(const proto::JobConfig& j, const proto::JobConfig& e, const std::string& path) {
  if (j.mode() != e.mode()) {
    return Other(path, "the mode", proto::UpdateMode_Name(j.mode()), proto::UpdateMode_Name(e.mode()));
  }
  if (j.seed() != e.seed()) return Other(path, "the seed", absl::StrCat(j.seed()), absl::StrCat(e.seed()));
  if (j.batch_size() != e.batch_size() || j.steps_per_epoch() != e.steps_per_epoch()) {
    return Other(path, "the batch size (steps per epoch)",
                 absl::StrCat(j.batch_size(), " (", j.steps_per_epoch(), ")"),
                 absl::StrCat(e.batch_size(), " (", e.steps_per_epoch(), ")"));
  }
  // A manifest from before optimizers could be chosen has none: SGD.
  const absl::StatusOr<OptimizerConfig> there = OptimizerFromJob(j);
  const absl::StatusOr<OptimizerConfig> here = OptimizerFromJob(e);
  if (j.learning_rate() != e.learning_rate() || !there.ok() || !here.ok() ||
      !SameOptimizer(*there, *here)) {
    return Other(path, "the optimizer", LrAndOptimizer(j.learning_rate(), there),
                 LrAndOptimizer(e.learning_rate(), here));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<proto::CheckpointManifest> ReadManifest(const std::string& dir, int64_t step) {
  const std::string path = absl::StrCat(dir, "/", ManifestFileName(step));
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  proto::CheckpointManifest m;
  if (absl::Status s = ParseJsonMessage(text, path, &m); !s.ok()) {
    return absl::DataLossError(absl::StrCat("damaged manifest: ", s.message()));
  }
  if (m.format_version() != proto::CHECKPOINT_FORMAT_V1) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": checkpoint format version ",
                                                      m.format_version(), "; this build reads ",
                                                      proto::CHECKPOINT_FORMAT_V1));
  }
  if (m.step() != step) {
    return absl::DataLossError(absl::StrCat(path, ": damaged manifest: step ", m.step(), " in ",
                                            CheckpointName(step)));
  }
  return m;
}

absl::Status CheckManifest(const proto::CheckpointManifest& m, const CheckpointerOptions& o,
                           const std::string& path) {
  if (m.plan_fingerprint() != o.plan_fingerprint || m.num_params() != o.num_params) {
    return Other(path, "the plan (model, ps count, shard strategy)",
                 absl::StrCat(absl::Hex(m.plan_fingerprint()), ", ", m.num_params(), " params"),
                 absl::StrCat(absl::Hex(o.plan_fingerprint), ", ", o.num_params, " params"));
  }
  if (m.job().num_workers() != o.job.num_workers()) {
    return Other(path, "the number of workers", absl::StrCat(m.job().num_workers()),
                 absl::StrCat(o.job.num_workers()));
  }
  RETURN_IF_ERROR(CheckJob(m.job(), o.job, path));
  if (m.shards_size() != o.num_shards || m.workers_size() != o.job.num_workers()) {
    return absl::DataLossError(absl::StrCat(path, ": damaged manifest: ", m.shards_size(),
                                            " shards and ", m.workers_size(), " workers"));
  }
  for (int k = 0; k < m.shards_size(); ++k) {
    if (m.shards(k).shard_index() != k) {
      return absl::DataLossError(absl::StrCat(path, ": damaged manifest: shard entry ", k,
                                              " names shard ", m.shards(k).shard_index()));
    }
  }
  return absl::OkStatus();
}

Checkpointer::Checkpointer(CheckpointerOptions options, PsClient* client)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : RealClock()),
      client_(client),
      last_us_(clock_->NowMicros()) {
  CHECK_GE(options_.keep, 1);
}

bool Checkpointer::Due(int64_t step, bool done) const {
  if (step == last_step_ || (options_.every_steps <= 0 && options_.every_s <= 0)) return false;
  if (done) return true;
  if (options_.every_steps > 0 && step % options_.every_steps == 0) return true;
  return options_.every_s > 0 && (clock_->NowMicros() - last_us_) * 1e-6 >= options_.every_s;
}

proto::CheckpointManifest Checkpointer::MakeManifest(
    int64_t step, const std::vector<proto::SavedShard>& shards) const {
  proto::CheckpointManifest m;
  m.set_format_version(proto::CHECKPOINT_FORMAT_V1);
  m.set_step(step);
  m.set_created_at(absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  m.set_mode(UpdateModeName(options_.job.mode()));
  m.set_plan_fingerprint(options_.plan_fingerprint);
  m.set_num_params(options_.num_params);
  *m.mutable_job() = options_.job;
  for (const std::string& f : options_.flags) m.add_flags(f);
  for (const proto::SavedShard& s : shards) *m.add_shards() = s;
  const int64_t spe = options_.job.steps_per_epoch();
  for (int rank = 0; rank < options_.job.num_workers(); ++rank) {
    // Sync: everybody is at the chief's step. Async/ssp: a rank's gradient
    // is in the model once every shard applied it: the smallest clock.
    int64_t at = step;
    if (rank > 0 && options_.job.mode() != proto::SYNC) {
      for (const proto::SavedShard& s : shards) {
        if (rank < s.worker_steps_size()) at = std::min(at, s.worker_steps(rank));
      }
    }
    *m.add_workers() = Position(rank, at, spe);
  }
  return m;
}

absl::Status Checkpointer::Save(int64_t step) {
  last_step_ = step;
  last_us_ = clock_->NowMicros();
  const std::string name = CheckpointName(step);
  auto saved = client_->Save(step, options_.keep);
  if (!saved.ok()) {
    return absl::Status(saved.status().code(),
                        absl::StrCat("checkpoint ", name, " not written: ", saved.status().message()));
  }
  const std::string path = absl::StrCat(options_.dir, "/", ManifestFileName(step));
  RETURN_IF_ERROR(MakeDirs(CheckpointPath(options_.dir, step)));
  RETURN_IF_ERROR(WriteFileAtomic(path, ToJson(MakeManifest(step, *saved))));
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
  RETURN_IF_ERROR(CheckManifest(m, options_, absl::StrCat(options_.dir, "/", ManifestFileName(step))));
  std::vector<uint64_t> checksums;
  for (const proto::SavedShard& s : m.shards()) checksums.push_back(s.checksum());
  // Every shard checks its file first, so that a damaged one on any ps
  // leaves every shard free to take an older checkpoint.
  RETURN_IF_ERROR(client_->Restore(options_.job, step, checksums, /*verify_only=*/true, scope));
  RETURN_IF_ERROR(client_->Restore(options_.job, step, checksums, /*verify_only=*/false, scope));
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

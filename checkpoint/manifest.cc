#include "checkpoint/manifest.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "common/update_mode.h"

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

proto::CheckpointManifest MakeManifest(const CheckpointJob& job, int64_t step,
                                       const std::vector<proto::SavedShard>& shards,
                                       const std::string& created_at) {
  proto::CheckpointManifest m;
  m.set_format_version(proto::CHECKPOINT_FORMAT_V1);
  m.set_step(step);
  m.set_created_at(created_at);
  m.set_mode(UpdateModeName(job.config.mode()));
  m.set_plan_fingerprint(job.plan_fingerprint);
  m.set_num_params(job.num_params);
  *m.mutable_job() = job.config;
  for (const std::string& f : job.flags) m.add_flags(f);
  for (const proto::SavedShard& s : shards) *m.add_shards() = s;
  const int64_t spe = job.config.steps_per_epoch();
  for (int rank = 0; rank < job.config.num_workers(); ++rank) {
    int64_t at = step;
    if (rank > 0 && job.config.mode() != proto::SYNC) {
      for (const proto::SavedShard& s : shards) {
        if (rank < s.worker_steps_size()) at = std::min(at, s.worker_steps(rank));
      }
    }
    *m.add_workers() = Position(rank, at, spe);
  }
  return m;
}

absl::Status WriteManifest(const std::string& dir, const proto::CheckpointManifest& manifest) {
  RETURN_IF_ERROR(MakeDirs(CheckpointPath(dir, manifest.step())));
  return WriteFileAtomic(absl::StrCat(dir, "/", ManifestFileName(manifest.step())), ToJson(manifest));
}

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

absl::Status CheckManifest(const proto::CheckpointManifest& m, const CheckpointJob& job,
                           const std::string& path) {
  if (m.plan_fingerprint() != job.plan_fingerprint || m.num_params() != job.num_params) {
    return Other(path, "the plan (model, ps count, shard strategy)",
                 absl::StrCat(absl::Hex(m.plan_fingerprint()), ", ", m.num_params(), " params"),
                 absl::StrCat(absl::Hex(job.plan_fingerprint), ", ", job.num_params, " params"));
  }
  if (m.job().num_workers() != job.config.num_workers()) {
    return Other(path, "the number of workers", absl::StrCat(m.job().num_workers()),
                 absl::StrCat(job.config.num_workers()));
  }
  RETURN_IF_ERROR(CheckJob(m.job(), job.config, path));
  if (m.shards_size() != job.num_shards || m.workers_size() != job.config.num_workers()) {
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

std::string RecordedFlag(const std::vector<std::string>& flags, const std::string& name) {
  const std::string prefix = absl::StrCat("--", name, "=");
  std::string value;
  for (const std::string& f : flags) {
    if (absl::StartsWith(f, prefix)) value = f.substr(prefix.size());
  }
  return value;
}

}  // namespace pstrain

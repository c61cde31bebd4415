// The worker runtime's embedding tables (worker_runtime.h: EmbeddingPull,
// EmbeddingPush): what a job with tables may be, how a worker's tables
// must match the chief's, and the step's row requests.

#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/status_macros.h"
#include "worker/worker_runtime.h"

namespace pstrain {

absl::Status CheckTables(const WorkerRuntimeOptions& options) {
  if (options.tables.empty()) return absl::OkStatus();
  proto::JobConfig job;
  job.set_seed(options.train.seed);
  for (const proto::EmbeddingTableConfig& t : options.tables) *job.add_tables() = t;
  RETURN_IF_ERROR(ValidateEmbeddingTables(job));
  const TrainOptions& o = options.train;
  if (o.ps_replicas > 0) {
    return absl::InvalidArgumentError(
        "embedding tables do not work with --ps_replicas yet: a standby does not hold their "
        "rows; leave it out (checkpoints keep them: --checkpoint_every_steps)");
  }
  return absl::OkStatus();
}

std::string TableDifference(const proto::JobConfig& chiefs, const proto::JobConfig& mine) {
  const int n = std::max(chiefs.tables_size(), mine.tables_size());
  for (int i = 0; i < n; ++i) {
    const bool theirs = i < chiefs.tables_size(), ours = i < mine.tables_size();
    if (theirs && ours && chiefs.tables(i).SerializeAsString() == mine.tables(i).SerializeAsString()) {
      continue;
    }
    auto describe = [](const proto::EmbeddingTableConfig& t) {
      return absl::StrCat("\"", t.name(), "\" (dim ", t.dim(), ", ", t.ShortDebugString(), ")");
    };
    return absl::StrCat("this worker's embedding table ", i, " differs from the chief's: ",
                        ours ? describe(mine.tables(i)) : "none", " here, ",
                        theirs ? describe(chiefs.tables(i)) : "none",
                        " at the chief; every worker must make the same tables in the same order");
  }
  return "";
}

absl::Status WorkerRuntime::EmbeddingPull(absl::Span<const EmbeddingRows> tables) {
  return client_->EmbeddingPull(tables);
}

absl::Status WorkerRuntime::EmbeddingPush(int num_examples, absl::Span<const EmbeddingRows> tables) {
  return client_->EmbeddingPush(global_step_, versions_, num_examples, tables);
}

}  // namespace pstrain

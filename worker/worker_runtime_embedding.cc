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

absl::Status WorkerRuntime::EmbeddingPull(absl::Span<const EmbeddingRows> tables, bool prefetched) {
  return prefetched ? client_->EmbeddingPullPrefetched(tables) : client_->EmbeddingPull(tables);
}

absl::Status WorkerRuntime::StageEmbeddingPrefetch(absl::Span<const EmbeddingRows> tables) {
  if (options_.train.mode != proto::ASYNC) return absl::OkStatus();
  return client_->StageEmbeddingPrefetch(tables);
}

int64_t WorkerRuntime::prefetched_tables() const {
  return prefetched_before_ + (client_ != nullptr ? client_->prefetched_tables() : 0);
}

absl::Status WorkerRuntime::EmbeddingPush(int num_examples, absl::Span<const EmbeddingRows> tables) {
  if (options_.train.ps_replicas > 0) {
    sent_rows_.step = global_step_;
    sent_rows_.num_examples = num_examples;
    sent_rows_.tables.resize(tables.size());
    for (size_t t = 0; t < tables.size(); ++t) {
      SentRows::Table& copy = sent_rows_.tables[t];
      copy.ids.assign(tables[t].ids.begin(), tables[t].ids.end());
      copy.grads.assign(tables[t].grads.begin(), tables[t].grads.end());
      copy.rows = tables[t];
      copy.rows.ids = copy.ids;
      copy.rows.grads = copy.grads;
      copy.rows.rows = {};
    }
  }
  return client_->EmbeddingPush(global_step_, versions_, num_examples, tables);
}

absl::Status WorkerRuntime::ResendRows(const std::vector<bool>& to) {
  if (sent_rows_.step != step_->step()) return absl::OkStatus();  // none this step
  std::vector<EmbeddingRows> rows;
  for (const SentRows::Table& t : sent_rows_.tables) rows.push_back(t.rows);
  return client_->EmbeddingPush(sent_rows_.step, step_->computed_on(), sent_rows_.num_examples,
                                rows, &to);
}

}  // namespace pstrain

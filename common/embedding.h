#pragma once

// Embedding tables: rows of floats by int64 id, held by the ps tasks
// (ps_server/embedding_tables.h) and read and updated a step's rows at a
// time (EMBEDDING_PULL, EMBEDDING_PUSH). What the worker and the ps must
// agree on is here: which ps holds an id, a row's initial values, and
// which table configurations can run.
//
// - An id's ps is EmbeddingShardOf(id, n): a hash of the id modulo the ps
//   count (the hash spreads the frequent small ids of a Zipf distribution).
// - A row's initial values are a pure function of (the job's seed, the
//   table's index, the id, the column): every worker, every restart and
//   a one-process reference (the C API's PstrainEmbeddingInitialRows)
//   agree without storing anything. Normal: Box-Muller over pairs of
//   columns from two 53-bit uniforms of Mix64 (common/random.h); uniform:
//   one such uniform per column, in [-init_std, init_std).

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// The most floats a row may have, and tables a job may have.
inline constexpr int kMaxEmbeddingDim = 4096;
inline constexpr int kMaxEmbeddingTables = 1024;
// The most ids one request (and one C API call) may carry.
inline constexpr int64_t kMaxEmbeddingIds = int64_t{1} << 24;
// The largest init_std: a row's values (at most 8.6 x it for "normal")
// stay finite in f32.
inline constexpr double kMaxInitStd = 1e36;

// The ps (of `num_shards`) that holds `id`'s rows. REQUIRES: num_shards > 0.
int EmbeddingShardOf(int64_t id, int num_shards);

// Row `id`'s initial values of table `table` (its index in the job) into
// `row` (table.dim() floats). REQUIRES: row.size() == table.dim().
void InitialRow(const proto::EmbeddingTableConfig& table, uint64_t seed, int table_index,
                int64_t id, absl::Span<float> row);

// Optimizer state floats per row: sgd 0, adagrad 1 (the sum), adam 2
// (exp_avg, exp_avg_sq); each dim floats.
int RowSlots(proto::RowOptimizer optimizer);

// InvalidArgument naming the table and the field for a configuration that
// cannot run: an empty or repeated name, dim outside [1, kMaxEmbeddingDim],
// a negative num_embeddings, an unknown optimizer, a negative or
// non-finite lr, eps <= 0 (adagrad, adam), betas outside [0, 1), a
// negative initial_accumulator, init_std, admit_after,
// evict_after_updates or max_rows_per_ps.
absl::Status ValidateEmbeddingTables(const proto::JobConfig& job);

// "sgd", "adagrad", "adam" -> the enum; InvalidArgument otherwise.
absl::StatusOr<proto::RowOptimizer> ParseRowOptimizer(const std::string& name);

}  // namespace pstrain

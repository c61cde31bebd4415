#include "common/embedding.h"

#include <cmath>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/random.h"

namespace pstrain {
namespace {

// A uniform in (0, 1) with 53 bits, from 64 random bits.
double Uniform53(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1p-53; }

absl::Status TableError(const proto::EmbeddingTableConfig& t, int index, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("embedding table ", index, " (\"", t.name(), "\"): ", what));
}

}  // namespace

int EmbeddingShardOf(int64_t id, int num_shards) {
  return static_cast<int>(Mix64(static_cast<uint64_t>(id) ^ 0x5EED5EED5EED5EEDull) %
                          static_cast<uint64_t>(num_shards));
}

void InitialRow(const proto::EmbeddingTableConfig& table, uint64_t seed, int table_index,
                int64_t id, absl::Span<float> row) {
  const uint64_t key = Mix64(Mix64(seed ^ 0xE1B2D3C4A5968778ull) + static_cast<uint64_t>(table_index));
  const uint64_t base = Mix64(key ^ static_cast<uint64_t>(id));
  const double scale = table.init_std();
  const size_t dim = row.size();
  if (table.init_uniform()) {
    for (size_t j = 0; j < dim; ++j) {
      const double u = Uniform53(Mix64(base + 2 * j));
      row[j] = static_cast<float>(scale * (2.0 * u - 1.0));
    }
    return;
  }
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (size_t j = 0; j < dim; j += 2) {
    const double u1 = Uniform53(Mix64(base + 2 * j));
    const double u2 = Uniform53(Mix64(base + 2 * j + 1));
    const double r = std::sqrt(-2.0 * std::log(u1));
    row[j] = static_cast<float>(scale * r * std::cos(kTwoPi * u2));
    if (j + 1 < dim) row[j + 1] = static_cast<float>(scale * r * std::sin(kTwoPi * u2));
  }
}

int RowSlots(proto::RowOptimizer optimizer) {
  switch (optimizer) {
    case proto::ROW_ADAGRAD:
      return 1;
    case proto::ROW_ADAM:
      return 2;
    default:
      return 0;
  }
}

absl::StatusOr<proto::RowOptimizer> ParseRowOptimizer(const std::string& name) {
  if (name == "sgd") return proto::ROW_SGD;
  if (name == "adagrad") return proto::ROW_ADAGRAD;
  if (name == "adam" || name == "sparse_adam") return proto::ROW_ADAM;
  return absl::InvalidArgumentError(absl::StrCat(
      "an embedding table's optimizer is sgd, adagrad or adam (torch's SparseAdam), not \"", name,
      "\""));
}

absl::Status ValidateEmbeddingTables(const proto::JobConfig& job) {
  if (job.embedding_memory_per_ps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding_memory_per_ps ", job.embedding_memory_per_ps(), " < 0"));
  }
  if (job.tables_size() > kMaxEmbeddingTables) {
    return absl::InvalidArgumentError(absl::StrCat(job.tables_size(), " embedding tables (at most ",
                                                   kMaxEmbeddingTables, ")"));
  }
  std::set<std::string> names;
  for (int i = 0; i < job.tables_size(); ++i) {
    const proto::EmbeddingTableConfig& t = job.tables(i);
    if (t.name().empty() || t.name().size() > 256) {
      return TableError(t, i, "a name of 1 to 256 characters is needed");
    }
    if (!names.insert(t.name()).second) return TableError(t, i, "the name is another table's too");
    if (t.dim() < 1 || t.dim() > kMaxEmbeddingDim) {
      return TableError(t, i, absl::StrCat("embedding_dim ", t.dim(), " is not in [1, ",
                                           kMaxEmbeddingDim, "]"));
    }
    if (t.num_embeddings() < 0) return TableError(t, i, "num_embeddings must be >= 0 (0: any id)");
    if (!proto::RowOptimizer_IsValid(t.optimizer())) return TableError(t, i, "unknown optimizer");
    if (!std::isfinite(t.lr()) || t.lr() < 0) return TableError(t, i, "lr must be finite and >= 0");
    const bool adaptive = t.optimizer() != proto::ROW_SGD;
    if (adaptive && !(std::isfinite(t.eps()) && t.eps() > 0)) {
      return TableError(t, i, "eps must be finite and > 0");
    }
    if (t.optimizer() == proto::ROW_ADAM) {
      if (!(t.beta1() >= 0 && t.beta1() < 1)) return TableError(t, i, "beta1 must be in [0, 1)");
      if (!(t.beta2() >= 0 && t.beta2() < 1)) return TableError(t, i, "beta2 must be in [0, 1)");
    }
    if (!(std::isfinite(t.initial_accumulator()) && t.initial_accumulator() >= 0)) {
      return TableError(t, i, "initial_accumulator_value must be finite and >= 0");
    }
    if (!(t.init_std() >= 0 && t.init_std() <= kMaxInitStd)) {
      return TableError(t, i, "init_std must be 0 to 1e36 (a row's values are f32)");
    }
    if (t.admit_after() < 0 || t.admit_after() > (int64_t{1} << 30)) {
      return TableError(t, i, "admit_after must be in [0, 2^30]");
    }
    if (t.evict_after_updates() < 0) return TableError(t, i, "evict_after_steps must be >= 0");
    if (t.max_rows_per_ps() < 0) return TableError(t, i, "max_rows_per_ps must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace pstrain

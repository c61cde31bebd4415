// The client's embedding requests (ps_client.h: EmbeddingPull,
// EmbeddingPush): each table's ids split by the ps that holds them
// (common/embedding.h), one request per ps for every table at once.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/status_macros.h"
#include "worker/ps_client.h"

namespace pstrain {
namespace {

// Where each table's ids go: for ps k and table t, the positions in the
// table's ids of those ps k holds.
using Split = std::vector<std::vector<std::vector<size_t>>>;  // [ps][table] -> positions

Split SplitByPs(absl::Span<const EmbeddingRows> tables, int num_shards) {
  Split split(num_shards, std::vector<std::vector<size_t>>(tables.size()));
  for (size_t t = 0; t < tables.size(); ++t) {
    for (size_t i = 0; i < tables[t].ids.size(); ++i) {
      split[EmbeddingShardOf(tables[t].ids[i], num_shards)][t].push_back(i);
    }
  }
  return split;
}

// Sizes `payload` for `bytes` (kept from call to call: no shrinking, and
// no zeroing of what will be overwritten but its first growth).
char* Presize(std::vector<char>* payload, size_t bytes) {
  payload->resize(bytes);
  return payload->data();
}

}  // namespace

// One EMBEDDING_PULL per ps holding any of `tables`' ids (by `split`), its
// ids packed into out[k] and its reply's rows into in[k].
std::vector<PsClient::Call> PsClient::PullCalls(absl::Span<const EmbeddingRows> tables,
                                                const Split& split,
                                                std::vector<std::vector<char>>* out,
                                                std::vector<std::vector<float>>* in) {
  std::vector<Call> calls;
  out->resize(num_shards());
  in->resize(num_shards());
  for (Call& c : ShardCalls(proto::EMBEDDING_PULL, 0, {})) {
    const int k = c.shard;
    size_t ids = 0;
    for (size_t t = 0; t < tables.size(); ++t) ids += split[k][t].size();
    if (ids == 0) continue;
    char* to = Presize(&(*out)[k], ids * sizeof(int64_t));
    for (size_t t = 0; t < tables.size(); ++t) {
      if (split[k][t].empty()) continue;
      proto::EmbeddingSlice* slice = c.header.mutable_embedding()->add_slices();
      slice->set_table(tables[t].table);
      slice->set_num_ids(static_cast<int64_t>(split[k][t].size()));
      for (size_t i : split[k][t]) {
        std::memcpy(to, &tables[t].ids[i], sizeof(int64_t));
        to += sizeof(int64_t);
      }
    }
    c.payload = (*out)[k];
    c.raw = &(*in)[k];
    calls.push_back(std::move(c));
  }
  return calls;
}

// The rows of answered PullCalls into each table's rows.
absl::Status PsClient::ScatterRows(absl::Span<const Call> calls,
                                   absl::Span<const EmbeddingRows> tables, const Split& split,
                                   const std::vector<std::vector<float>>& in) const {
  for (const Call& c : calls) {
    const int k = c.shard;
    const std::vector<float>& rows = in[k];
    size_t want = 0;
    for (size_t t = 0; t < tables.size(); ++t) want += split[k][t].size() * tables[t].dim;
    if (rows.size() != want) {
      return absl::DataLossError(
          absl::StrCat(ShardName(k), ": ", rows.size(), " floats of embedding rows for ", want));
    }
    const float* from = rows.data();
    for (size_t t = 0; t < tables.size(); ++t) {
      const size_t dim = static_cast<size_t>(tables[t].dim);
      for (size_t i : split[k][t]) {
        std::memcpy(tables[t].rows.data() + i * dim, from, dim * sizeof(float));
        from += dim;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::EmbeddingPull(absl::Span<const EmbeddingRows> tables) {
  if (prefetch_.in) {
    std::vector<EmbeddingRows> rest;
    for (const EmbeddingRows& t : tables) {
      if (!FromPrefetch(t)) rest.push_back(t);
    }
    if (rest.size() < tables.size()) return rest.empty() ? absl::OkStatus() : EmbeddingPull(rest);
  }
  const Split split = SplitByPs(tables, num_shards());
  std::vector<Call> calls = PullCalls(tables, split, &embedding_pull_out_, &embedding_in_);
  if (calls.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(Exchange(&calls));
  return ScatterRows(calls, tables, split, embedding_in_);
}

void PsClient::StageEmbeddingPrefetch(absl::Span<const EmbeddingRows> tables) {
  if (prefetch_.in || !prefetch_.calls.empty()) prefetch_ = Prefetch();  // the last step's
  for (const EmbeddingRows& t : tables) {
    auto it = std::find(prefetch_.tables.begin(), prefetch_.tables.end(), t.table);
    if (it == prefetch_.tables.end()) {
      prefetch_.tables.push_back(t.table);
      prefetch_.dims.push_back(t.dim);
      prefetch_.ids.emplace_back();
      it = prefetch_.tables.end() - 1;
    }
    const size_t j = static_cast<size_t>(it - prefetch_.tables.begin());
    prefetch_.dims[j] = t.dim;
    prefetch_.ids[j].assign(t.ids.begin(), t.ids.end());
  }
}

void PsClient::DropStalePrefetch() {
  // A push changes rows: what a prefetch brought before it is stale. One
  // staged and not sent yet goes out behind this step's dense push.
  if (prefetch_.in || !prefetch_.calls.empty()) prefetch_ = Prefetch();
}

absl::Status PsClient::SendPrefetch(int64_t deadline_us) {
  if (prefetch_.empty() || prefetch_.in || !prefetch_.calls.empty()) return absl::OkStatus();
  std::vector<EmbeddingRows> tables(prefetch_.tables.size());
  for (size_t j = 0; j < tables.size(); ++j) {
    tables[j].table = prefetch_.tables[j];
    tables[j].dim = prefetch_.dims[j];
    tables[j].ids = prefetch_.ids[j];
  }
  prefetch_.split = SplitByPs(tables, num_shards());
  std::vector<Call> calls = PullCalls(tables, prefetch_.split, &prefetch_out_, &prefetch_in_);
  for (Call& c : calls) {
    if (absl::Status s = SendCall(c, deadline_us); !s.ok()) {
      prefetch_ = Prefetch();
      return s;
    }
  }
  prefetch_.calls = std::move(calls);
  if (prefetch_.calls.empty()) return TakePrefetch();  // no ids at all
  return absl::OkStatus();
}

absl::Status PsClient::TakePrefetch() {
  std::vector<EmbeddingRows> tables(prefetch_.tables.size());
  prefetch_.rows.resize(tables.size());
  for (size_t j = 0; j < tables.size(); ++j) {
    prefetch_.rows[j].resize(prefetch_.ids[j].size() * static_cast<size_t>(prefetch_.dims[j]));
    tables[j].table = prefetch_.tables[j];
    tables[j].dim = prefetch_.dims[j];
    tables[j].ids = prefetch_.ids[j];
    tables[j].rows = absl::MakeSpan(prefetch_.rows[j]);
  }
  const absl::Status s = ScatterRows(prefetch_.calls, tables, prefetch_.split, prefetch_in_);
  prefetch_.calls.clear();
  if (!s.ok()) {
    prefetch_ = Prefetch();
    return s;
  }
  prefetch_.in = true;
  return absl::OkStatus();
}

bool PsClient::FromPrefetch(const EmbeddingRows& t) {
  for (size_t j = 0; j < prefetch_.tables.size(); ++j) {
    if (prefetch_.tables[j] != t.table || prefetch_.dims[j] != t.dim ||
        !std::equal(t.ids.begin(), t.ids.end(), prefetch_.ids[j].begin(), prefetch_.ids[j].end())) {
      continue;
    }
    std::copy(prefetch_.rows[j].begin(), prefetch_.rows[j].end(), t.rows.begin());
    ++prefetched_tables_;
    return true;
  }
  return false;
}

absl::Status PsClient::EmbeddingPush(int64_t step, absl::Span<const int64_t> versions,
                                     int num_examples, absl::Span<const EmbeddingRows> tables,
                                     const std::vector<bool>* only) {
  // The last push's requests may still be queued from its buffers.
  RETURN_IF_ERROR(WaitRowPushes());
  DropStalePrefetch();
  const Split split = SplitByPs(tables, num_shards());
  std::vector<Call> calls = ShardCalls(proto::EMBEDDING_PUSH, step, versions);
  if (only != nullptr) {
    calls.erase(std::remove_if(calls.begin(), calls.end(),
                               [only](const Call& c) { return !(*only)[c.shard]; }),
                calls.end());
  }
  embedding_push_out_.resize(num_shards());
  for (Call& c : calls) {
    const int k = c.shard;
    c.header.set_num_examples(num_examples);
    size_t bytes = 0;
    for (size_t t = 0; t < tables.size(); ++t) {
      bytes += split[k][t].size() * (sizeof(int64_t) + tables[t].dim * sizeof(float));
    }
    char* to = Presize(&embedding_push_out_[k], bytes);
    for (size_t t = 0; t < tables.size(); ++t) {
      proto::EmbeddingSlice* slice = c.header.mutable_embedding()->add_slices();
      slice->set_table(tables[t].table);
      slice->set_num_ids(static_cast<int64_t>(split[k][t].size()));
      slice->set_has_grad(tables[t].has_grad);
      if (tables[t].has_grad && tables[t].lr >= 0) {
        slice->set_has_lr(true);
        slice->set_lr(tables[t].lr);
      }
      for (size_t i : split[k][t]) {
        std::memcpy(to, &tables[t].ids[i], sizeof(int64_t));
        to += sizeof(int64_t);
      }
    }
    for (size_t t = 0; t < tables.size(); ++t) {
      const size_t row_bytes = static_cast<size_t>(tables[t].dim) * sizeof(float);
      for (size_t i : split[k][t]) {
        std::memcpy(to, tables[t].grads.data() + i * tables[t].dim, row_bytes);
        to += row_bytes;
      }
    }
    c.payload = embedding_push_out_[k];
  }
  // Sent now, answered with the step's dense push (ps_client.h).
  const int64_t deadline = RpcDeadline();
  for (Call& c : calls) {
    RETURN_IF_ERROR(SendCall(c, deadline));
    rows_unanswered_.push_back(std::move(c));
  }
  return absl::OkStatus();
}

}  // namespace pstrain

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

absl::Status PsClient::EmbeddingPullPrefetched(absl::Span<const EmbeddingRows> tables) {
  if (ready_.tables.empty()) return EmbeddingPull(tables);
  // What a pull would have found out: a ps lost, or a shard moved.
  if (watch_heartbeat_) {
    RETURN_IF_ERROR(heartbeat_->status());
    RETURN_IF_ERROR(CheckRoutes());
  }
  std::vector<EmbeddingRows> rest;
  for (const EmbeddingRows& t : tables) {
    if (!FromPrefetch(t)) rest.push_back(t);
  }
  return rest.empty() ? absl::OkStatus() : EmbeddingPull(rest);
}

absl::Status PsClient::EmbeddingPull(absl::Span<const EmbeddingRows> tables) {
  const Split split = SplitByPs(tables, num_shards());
  std::vector<Call> calls = PullCalls(tables, split, &embedding_pull_out_, &embedding_in_);
  if (calls.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(Exchange(&calls));
  return ScatterRows(calls, tables, split, embedding_in_);
}

absl::Status PsClient::StageEmbeddingPrefetch(absl::Span<const EmbeddingRows> tables) {
  Prefetch staged = staged_;
  for (const EmbeddingRows& t : tables) {
    auto it = std::find(staged.tables.begin(), staged.tables.end(), t.table);
    if (it == staged.tables.end()) {
      staged.tables.push_back(t.table);
      staged.dims.push_back(t.dim);
      staged.ids.emplace_back();
      it = staged.tables.end() - 1;
    }
    const size_t j = static_cast<size_t>(it - staged.tables.begin());
    staged.dims[j] = t.dim;
    staged.ids[j].assign(t.ids.begin(), t.ids.end());
  }
  // One request to each ps for all of it: within what a request and its
  // answer may be (counted whole, as if one ps held every id).
  size_t ids = 0, bytes = 0;
  for (size_t j = 0; j < staged.tables.size(); ++j) {
    ids += staged.ids[j].size();
    bytes += staged.ids[j].size() * static_cast<size_t>(staged.dims[j]) * sizeof(float);
  }
  if (ids > static_cast<size_t>(kMaxEmbeddingIds) ||
      bytes > static_cast<size_t>(options_.max_message_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prefetch staged for this step would be ", ids, " ids and ", bytes,
        " bytes of rows; one request holds at most 2^24 ids and its answer --max_message_mb (",
        options_.max_message_bytes >> 20, " MiB): prefetch fewer tables or ids"));
  }
  staged_ = std::move(staged);
  return absl::OkStatus();
}

absl::Status PsClient::SendPrefetch(int64_t deadline_us) {
  if (staged_.tables.empty() || !staged_.calls.empty()) return absl::OkStatus();
  std::vector<EmbeddingRows> tables(staged_.tables.size());
  for (size_t j = 0; j < tables.size(); ++j) {
    tables[j].table = staged_.tables[j];
    tables[j].dim = staged_.dims[j];
    tables[j].ids = staged_.ids[j];
  }
  staged_.split = SplitByPs(tables, num_shards());
  std::vector<Call> calls = PullCalls(tables, staged_.split, &prefetch_out_, &prefetch_in_);
  for (Call& c : calls) {
    if (absl::Status s = SendCall(c, deadline_us); !s.ok()) {
      staged_ = Prefetch();
      return s;
    }
  }
  staged_.calls = std::move(calls);
  if (staged_.calls.empty()) return TakePrefetch();  // no ids at all
  return absl::OkStatus();
}

absl::Status PsClient::TakePrefetch() {
  Prefetch taken = std::move(staged_);
  staged_ = Prefetch();
  if (taken.refused) return absl::OkStatus();  // dropped: the forward pulls as before
  std::vector<EmbeddingRows> tables(taken.tables.size());
  taken.rows.resize(tables.size());
  for (size_t j = 0; j < tables.size(); ++j) {
    taken.rows[j].resize(taken.ids[j].size() * static_cast<size_t>(taken.dims[j]));
    tables[j].table = taken.tables[j];
    tables[j].dim = taken.dims[j];
    tables[j].ids = taken.ids[j];
    tables[j].rows = absl::MakeSpan(taken.rows[j]);
  }
  RETURN_IF_ERROR(ScatterRows(taken.calls, tables, taken.split, prefetch_in_));
  taken.calls.clear();
  ready_ = std::move(taken);
  return absl::OkStatus();
}

bool PsClient::FromPrefetch(const EmbeddingRows& t) {
  for (size_t j = 0; j < ready_.tables.size(); ++j) {
    if (ready_.tables[j] != t.table || ready_.dims[j] != t.dim ||
        !std::equal(t.ids.begin(), t.ids.end(), ready_.ids[j].begin(), ready_.ids[j].end())) {
      continue;
    }
    std::copy(ready_.rows[j].begin(), ready_.rows[j].end(), t.rows.begin());
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
  ready_ = Prefetch();  // a push makes what a prefetch brought stale
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

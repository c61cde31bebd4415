#include "ps_server/embedding_tables.h"

#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/embedding_checkpoint.h"
#include "common/embedding.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {

EmbeddingTables::EmbeddingTables(const proto::JobConfig& job, int shard_index, int num_shards)
    : shard_index_(shard_index),
      num_shards_(num_shards),
      memory_cap_(job.embedding_memory_per_ps()) {
  for (int i = 0; i < job.tables_size(); ++i) {
    tables_.push_back(std::make_unique<EmbeddingTable>(job.tables(i), job.seed(), i));
  }
}

size_t EmbeddingTables::MaxPayloadBytes() const {
  int max_dim = 0;
  for (const auto& t : tables_) max_dim = std::max(max_dim, t->dim());
  return static_cast<size_t>(kMaxIds) * (sizeof(int64_t) + sizeof(float) * max_dim);
}

absl::Status EmbeddingTables::Sizes(const proto::EmbeddingRequest& request, int64_t* ids,
                                    int64_t* floats) const {
  *ids = *floats = 0;
  if (request.slices_size() > static_cast<int>(tables_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(request.slices_size(), " slices for ",
                                                   tables_.size(), " embedding tables"));
  }
  for (const proto::EmbeddingSlice& s : request.slices()) {
    if (s.table() < 0 || s.table() >= static_cast<int>(tables_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding table ", s.table(), " is not one of the job's ", tables_.size()));
    }
    if (s.num_ids() < 0 || s.num_ids() > kMaxIds - *ids) {
      return absl::InvalidArgumentError(
          absl::StrCat("a request of more than ", kMaxIds, " ids, or a negative count"));
    }
    *ids += s.num_ids();
    *floats += s.num_ids() * tables_[s.table()]->dim();
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> EmbeddingTables::PushBytes(const proto::EmbeddingRequest& request) const {
  int64_t num_ids = 0, num_floats = 0;
  RETURN_IF_ERROR(Sizes(request, &num_ids, &num_floats));
  return static_cast<size_t>(num_ids) * sizeof(int64_t) +
         static_cast<size_t>(num_floats) * sizeof(float);
}

absl::Status EmbeddingTables::ReadIds(int table, int64_t count, absl::Span<const char> payload,
                                      size_t* offset, std::vector<int64_t>* ids) const {
  ids->resize(static_cast<size_t>(count));
  if (count > 0) std::memcpy(ids->data(), payload.data() + *offset, ids->size() * sizeof(int64_t));
  *offset += ids->size() * sizeof(int64_t);
  const proto::EmbeddingTableConfig& config = tables_[table]->config();
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids->size());
  for (int64_t id : *ids) {
    if (config.num_embeddings() > 0 && (id < 0 || id >= config.num_embeddings())) {
      return absl::InvalidArgumentError(absl::StrCat("id ", id, " of table \"", config.name(),
                                                     "\" is outside [0, ", config.num_embeddings(),
                                                     ")"));
    }
    if (EmbeddingShardOf(id, num_shards_) != shard_index_) {
      return absl::InvalidArgumentError(absl::StrCat("id ", id, " of table \"", config.name(),
                                                     "\" is held by ps ",
                                                     EmbeddingShardOf(id, num_shards_), ", not ps ",
                                                     shard_index_));
    }
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", id, " of table \"", config.name(), "\" twice in one request"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> EmbeddingTables::Pull(const proto::EmbeddingRequest& request,
                                                         absl::Span<const char> payload) {
  int64_t num_ids = 0, num_floats = 0;
  RETURN_IF_ERROR(Sizes(request, &num_ids, &num_floats));
  if (payload.size() != static_cast<size_t>(num_ids) * sizeof(int64_t)) {
    return absl::InvalidArgumentError(absl::StrCat("a payload of ", payload.size(),
                                                   " bytes for ", num_ids, " ids"));
  }
  std::vector<std::vector<int64_t>> ids(request.slices_size());
  size_t offset = 0;
  for (int i = 0; i < request.slices_size(); ++i) {
    const proto::EmbeddingSlice& s = request.slices(i);
    RETURN_IF_ERROR(ReadIds(s.table(), s.num_ids(), payload, &offset, &ids[i]));
  }
  std::vector<float> rows(static_cast<size_t>(num_floats));
  size_t at = 0;
  for (int i = 0; i < request.slices_size(); ++i) {
    EmbeddingTable& t = *tables_[request.slices(i).table()];
    const size_t n = ids[i].size() * static_cast<size_t>(t.dim());
    t.Read(ids[i], absl::MakeSpan(rows).subspan(at, n));
    at += n;
  }
  return rows;
}

absl::StatusOr<EmbeddingTables::Push> EmbeddingTables::ParsePush(
    const proto::EmbeddingRequest& request, absl::Span<const char> payload,
    int num_examples) const {
  int64_t num_ids = 0, num_floats = 0;
  RETURN_IF_ERROR(Sizes(request, &num_ids, &num_floats));
  ASSIGN_OR_RETURN(const size_t want, PushBytes(request));
  if (payload.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("a payload of ", payload.size(), " bytes for ",
                                                   num_ids, " ids and their rows (", want, ")"));
  }
  Push push;
  push.num_examples = num_examples;
  absl::flat_hash_set<int> tables;
  size_t offset = 0;
  for (const proto::EmbeddingSlice& s : request.slices()) {
    if (!tables.insert(s.table()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding table ", s.table(), " in two slices of one push"));
    }
    if (!s.has_grad() && s.num_ids() > 0) {
      return absl::InvalidArgumentError("a slice with ids and no gradient");
    }
    if (s.has_lr() && !(std::isfinite(s.lr()) && s.lr() >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("lr ", s.lr(), " is not finite and >= 0"));
    }
    Push::Slice slice;
    slice.table = s.table();
    slice.has_grad = s.has_grad();
    slice.lr = s.has_lr() ? s.lr() : tables_[s.table()]->config().lr();
    RETURN_IF_ERROR(ReadIds(s.table(), s.num_ids(), payload, &offset, &slice.ids));
    push.slices.push_back(std::move(slice));
  }
  for (Push::Slice& slice : push.slices) {
    slice.grads.resize(slice.ids.size() * static_cast<size_t>(tables_[slice.table]->dim()));
    if (!slice.grads.empty()) {
      std::memcpy(slice.grads.data(), payload.data() + offset, slice.grads.size() * sizeof(float));
    }
    offset += slice.grads.size() * sizeof(float);
    if (!AllFinite(slice.grads)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a row gradient of table \"", tables_[slice.table]->config().name(), "\" is not finite"));
    }
  }
  return push;
}

void EmbeddingTables::Apply(const Push& push) {
  int64_t clock = 0;
  for (const Push::Slice& slice : push.slices) {
    if (!slice.has_grad) continue;
    if (clock == 0) clock = Tick();
    tables_[slice.table]->Update(slice.ids, slice.grads, slice.lr, clock);
  }
  if (clock != 0) Ticked(clock);
}

void EmbeddingTables::Ticked(int64_t clock) {
  for (const auto& t : tables_) t->Tick(clock);
  EnforceMemoryCap();
}

void EmbeddingTables::EnforceMemoryCap() {
  if (memory_cap_ <= 0) return;
  int64_t bytes = 0;
  for (const auto& t : tables_) bytes += t->rows() * t->RowCost();
  while (bytes > memory_cap_) {
    EmbeddingTable* oldest = nullptr;
    for (const auto& t : tables_) {
      if (t->rows() > 0 && (oldest == nullptr || t->oldest_update() < oldest->oldest_update())) {
        oldest = t.get();
      }
    }
    if (oldest == nullptr) return;
    oldest->EvictLeastRecent();
    bytes -= oldest->RowCost();
  }
}

void EmbeddingTables::HoldPending(int rank, Push push) { pending_[rank] = std::move(push); }

void EmbeddingTables::ApplyPending(int rank) {
  auto it = pending_.find(rank);
  if (it == pending_.end()) return;
  Apply(it->second);
  pending_.erase(it);
}

void EmbeddingTables::DropPending(int rank) { pending_.erase(rank); }

bool EmbeddingTables::Hold(int rank, int64_t version, Push push) {
  return held_[version].emplace(rank, Held{std::move(push), false}).second;
}

void EmbeddingTables::Confirm(int rank, int64_t version) {
  auto v = held_.find(version);
  if (v == held_.end()) return;
  if (auto r = v->second.find(rank); r != v->second.end()) r->second.confirmed = true;
}

void EmbeddingTables::ApplyThrough(int64_t version) {
  while (!held_.empty() && held_.begin()->first < version) {
    int64_t clock = 0;                // ticked at the version's first table update
    std::vector<const Push*> pushes;  // the confirmed ones, in rank order
    int64_t examples = 0;
    for (const auto& [rank, held] : held_.begin()->second) {
      if (!held.confirmed) continue;
      pushes.push_back(&held.push);
      examples += held.push.num_examples;
    }
    for (size_t t = 0; t < tables_.size(); ++t) {
      EmbeddingTable& table = *tables_[t];
      const size_t dim = static_cast<size_t>(table.dim());
      bool has_grad = false;
      double lr = 0;  // the lowest rank's with a gradient
      std::vector<int64_t> ids;
      std::vector<float> sum;
      absl::flat_hash_map<int64_t, size_t> at;
      for (const Push* push : pushes) {
        for (const Push::Slice& slice : push->slices) {
          if (static_cast<size_t>(slice.table) != t || !slice.has_grad) continue;
          if (!has_grad) lr = slice.lr;
          has_grad = true;
          // The gradient's weight in the average: its examples' share (one
          // push alone: exactly its gradient).
          const float w = pushes.size() == 1 || examples == 0
                              ? 1.0f
                              : static_cast<float>(static_cast<double>(push->num_examples) /
                                                   static_cast<double>(examples));
          for (size_t i = 0; i < slice.ids.size(); ++i) {
            auto [it, fresh] = at.emplace(slice.ids[i], ids.size());
            if (fresh) {
              ids.push_back(slice.ids[i]);
              sum.resize(sum.size() + dim, 0.0f);
            }
            float* dst = sum.data() + it->second * dim;
            const float* g = slice.grads.data() + i * dim;
            for (size_t j = 0; j < dim; ++j) dst[j] += w * g[j];
          }
        }
      }
      if (!has_grad) continue;
      if (clock == 0) clock = Tick();
      table.Update(ids, sum, lr, clock);
    }
    held_.erase(held_.begin());
    if (clock != 0) Ticked(clock);
  }
}

absl::Status EmbeddingTables::Save(const std::string& dir, int64_t step, int64_t version, int keep,
                                   int64_t keep_from_step, proto::SavedShard* saved) {
  const bool delta = saved_step_ >= 0 && saved_step_ < step && deltas_ + 1 < keep;
  EmbeddingCheckpoint c;
  proto::EmbeddingCheckpointHeader& h = c.header;
  h.set_step(step);
  h.set_shard_index(shard_index_);
  h.set_num_shards(num_shards_);
  h.set_version(version);
  h.set_delta(delta);
  h.set_clock(clock_);
  if (delta) {
    h.set_previous_step(saved_step_);
    h.set_previous_checksum(saved_checksum_);
  }
  c.tables.resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) tables_[t]->Save(delta, &c.tables[t]);
  const std::string file = EmbeddingFileName(step, shard_index_, num_shards_);
  RETURN_IF_ERROR(WriteEmbeddingCheckpoint(absl::StrCat(dir, "/", file), &c));
  for (const auto& t : tables_) t->MarkSaved();
  chain_start_[step] = delta ? chain_start_[saved_step_] : step;
  saved_step_ = step;
  saved_checksum_ = h.payload_checksum();
  deltas_ = delta ? deltas_ + 1 : 0;
  RETURN_IF_ERROR(RemoveFilesBefore(dir, keep_from_step));
  saved->set_embedding_file(file);
  saved->set_embedding_checksum(h.payload_checksum());
  saved->set_embedding_bytes(h.payload_bytes());
  saved->set_embedding_delta(delta);
  return absl::OkStatus();
}

absl::Status EmbeddingTables::RemoveFilesBefore(const std::string& dir, int64_t keep_from_step) {
  // Chains start no earlier for later checkpoints: what the oldest kept
  // needs, every newer one has.
  const auto oldest_kept = chain_start_.find(keep_from_step);
  if (keep_from_step <= 0 || oldest_kept == chain_start_.end()) return absl::OkStatus();
  const int64_t needed_from = oldest_kept->second;
  const std::string file = EmbeddingFileName(needed_from, shard_index_, num_shards_);
  RETURN_IF_ERROR(
      RemoveOwnFilesBefore(dir, needed_from, file.substr(file.rfind('/') + 1)).status());
  chain_start_.erase(chain_start_.begin(), chain_start_.lower_bound(needed_from));
  return absl::OkStatus();
}

absl::StatusOr<EmbeddingTables> EmbeddingTables::Load(const proto::JobConfig& job,
                                                      int shard_index, int num_shards,
                                                      const std::string& dir, int64_t step,
                                                      uint64_t checksum, int64_t version) {
  // The chain, newest first, each file checked against what its successor
  // (or the manifest) says it is.
  std::vector<std::pair<std::string, EmbeddingCheckpoint>> chain;
  for (int64_t at = step;;) {
    const std::string path = absl::StrCat(dir, "/", EmbeddingFileName(at, shard_index, num_shards));
    ASSIGN_OR_RETURN(EmbeddingCheckpoint c, ReadEmbeddingCheckpoint(path));
    const proto::EmbeddingCheckpointHeader& h = c.header;
    if (h.payload_checksum() != checksum) {
      return absl::DataLossError(absl::StrCat(path, ": its checksum is not the one ",
                                              chain.empty() ? "the manifest" : "its successor",
                                              " recorded"));
    }
    if (h.step() != at || h.shard_index() != shard_index || h.num_shards() != num_shards ||
        h.tables_size() != job.tables_size() || (chain.empty() && h.version() != version)) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": the tables of another checkpoint, shard or job (step ", h.step(), ", shard ",
          h.shard_index(), " of ", h.num_shards(), ", ", h.tables_size(), " tables, version ",
          h.version(), ")"));
    }
    const bool delta = h.delta();
    const int64_t previous = h.previous_step();
    checksum = h.previous_checksum();
    chain.emplace_back(path, std::move(c));
    if (!delta) break;
    if (previous < 0 || previous >= at) {
      return absl::DataLossError(absl::StrCat(path, ": a delta after step ", previous));
    }
    at = previous;
  }
  EmbeddingTables tables(job, shard_index, num_shards);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    for (size_t t = 0; t < tables.tables_.size(); ++t) {
      RETURN_IF_ERROR(tables.tables_[t]->Load(it->second.tables[t], it->second.header.delta(),
                                             it->first));
    }
  }
  // The clock of the newest file (a file without one: the tables' own
  // counts, the most any table made).
  tables.clock_ = chain.begin()->second.header.clock();
  for (const auto& t : tables.tables_) tables.clock_ = std::max(tables.clock_, t->updates());
  for (const auto& t : tables.tables_) {
    t->set_clock(tables.clock_);
    t->FinishLoad();
  }
  // The next save writes every row: its chain must not need files from
  // before this restore.
  return tables;
}

EmbeddingTables EmbeddingTables::Resharded(std::vector<EmbeddingTables>& old,
                                           const proto::JobConfig& job, int shard_index,
                                           int num_shards, int64_t* rows) {
  EmbeddingTables tables(job, shard_index, num_shards);
  // The rows' clocks are their old ps's, which in sync are one clock (every
  // ps applies every version); the new ps goes on from the latest.
  for (const EmbeddingTables& o : old) tables.clock_ = std::max(tables.clock_, o.clock_);
  for (size_t t = 0; t < tables.tables_.size(); ++t) {
    EmbeddingTableState merged;
    *merged.meta.mutable_config() = job.tables(static_cast<int>(t));
    const size_t stride = merged.stride();
    struct Row {
      int64_t last_update;
      size_t from;   // old shard
      size_t index;  // its place in that shard's state
    };
    std::vector<EmbeddingTableState> states(old.size());
    std::vector<Row> order;
    for (size_t j = 0; j < old.size(); ++j) {
      old[j].tables_[t]->Save(/*delta=*/false, &states[j]);
      merged.meta.set_updates(std::max(merged.meta.updates(), states[j].meta.updates()));
      for (size_t i = 0; i < states[j].ids.size(); ++i) {
        if (EmbeddingShardOf(states[j].ids[i], num_shards) != shard_index) continue;
        order.push_back({states[j].last_updates[i], j, i});
      }
      for (const auto& [id, touches] : states[j].waiting) {
        if (EmbeddingShardOf(id, num_shards) == shard_index) merged.waiting.emplace_back(id, touches);
      }
    }
    // Least recently updated first, as a table saves its rows.
    std::stable_sort(order.begin(), order.end(),
                     [](const Row& a, const Row& b) { return a.last_update < b.last_update; });
    for (const Row& r : order) {
      const EmbeddingTableState& from = states[r.from];
      merged.ids.push_back(from.ids[r.index]);
      merged.last_updates.push_back(r.last_update);
      merged.floats.insert(merged.floats.end(), from.floats.begin() + r.index * stride,
                           from.floats.begin() + (r.index + 1) * stride);
    }
    *rows += static_cast<int64_t>(merged.ids.size());
    // Cannot fail: the rows come from tables of this very configuration.
    const absl::Status s = tables.tables_[t]->Load(merged, /*delta=*/false, "reshard");
    if (!s.ok()) LOG(ERROR) << s;
    tables.tables_[t]->set_clock(tables.clock_);
    tables.tables_[t]->FinishLoad();
  }
  return tables;
}

namespace {

proto::EmbeddingCheckpointHeader ReplicaHeader(int shard_index, int num_shards, int64_t version,
                                               int64_t clock, bool delta) {
  proto::EmbeddingCheckpointHeader h;
  h.set_shard_index(shard_index);
  h.set_num_shards(num_shards);
  h.set_version(version);
  h.set_clock(clock);
  h.set_delta(delta);
  return h;
}

}  // namespace

std::string EmbeddingTables::Encode(int64_t version) const {
  EmbeddingCheckpoint c;
  c.header = ReplicaHeader(shard_index_, num_shards_, version, clock_, /*delta=*/false);
  c.tables.resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) tables_[t]->Save(/*delta=*/false, &c.tables[t]);
  return EncodeEmbeddingCheckpoint(&c);
}

bool EmbeddingTables::EncodeSince(int64_t since, int64_t version, std::string* out) const {
  EmbeddingCheckpoint c;
  c.header = ReplicaHeader(shard_index_, num_shards_, version, clock_, /*delta=*/true);
  c.tables.resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (!tables_[t]->SaveSince(since, &c.tables[t])) return false;
  }
  *out = EncodeEmbeddingCheckpoint(&c);
  return true;
}

void EmbeddingTables::StartChangeLog() {
  for (const auto& t : tables_) t->StartChangeLog();
}

void EmbeddingTables::ForgetThrough(int64_t clock) {
  for (const auto& t : tables_) t->ForgetThrough(clock);
}

absl::Status EmbeddingTables::ApplyEncoded(absl::string_view bytes, bool delta,
                                           const std::string& what) {
  ASSIGN_OR_RETURN(EmbeddingCheckpoint c, DecodeEmbeddingCheckpoint(bytes, what));
  const proto::EmbeddingCheckpointHeader& h = c.header;
  if (h.delta() != delta || h.shard_index() != shard_index_ || h.num_shards() != num_shards_ ||
      c.tables.size() != tables_.size() || h.clock() < clock_ || h.clock() > (int64_t{1} << 48)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the tables of another shard or job, or an older clock (shard ",
                     h.shard_index(), " of ", h.num_shards(), ", ", c.tables.size(),
                     " tables, clock ", h.clock(), ", delta ", h.delta(), ")"));
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    RETURN_IF_ERROR(tables_[t]->Load(c.tables[t], delta, what));
  }
  clock_ = h.clock();
  for (const auto& t : tables_) t->set_clock(clock_);
  return absl::OkStatus();
}

std::vector<proto::EmbeddingTableStats> EmbeddingTables::Stats() const {
  std::vector<proto::EmbeddingTableStats> out;
  for (const auto& t : tables_) out.push_back(t->Stats());
  return out;
}

}  // namespace pstrain

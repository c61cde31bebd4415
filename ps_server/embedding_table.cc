#include "ps_server/embedding_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/embedding.h"

namespace pstrain {

EmbeddingTable::EmbeddingTable(const proto::EmbeddingTableConfig& config, uint64_t seed, int index)
    : config_(config),
      seed_(seed),
      index_in_job_(index),
      dim_(config.dim()),
      stride_(static_cast<size_t>(config.dim()) * (1 + RowSlots(config.optimizer()))) {}

namespace {
// How far ahead of its use a lookup or a row is requested: far enough to
// cover a memory access's latency with the work of the rows between.
constexpr size_t kLookAhead = 16;
}  // namespace

bool AllFinite(absl::Span<const float> values) {
  // x * 0 is (+-)0 for a finite x and NaN for an infinite or NaN one; the
  // products are summed in lanes, which the compiler vectorises (one sum
  // would be a chain it must keep in order).
  constexpr size_t kLanes = 16;
  float lanes[kLanes] = {};
  const float* x = values.data();
  size_t i = 0;
  for (; i + kLanes <= values.size(); i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lanes[j] += x[i + j] * 0.0f;
  }
  float sum = 0.0f;
  for (; i < values.size(); ++i) sum += x[i] * 0.0f;
  for (float lane : lanes) sum += lane;
  return sum == 0.0f;
}

void EmbeddingTable::FindSlots(absl::Span<const int64_t> ids, std::vector<uint32_t>* slots) const {
  slots->resize(ids.size());
  for (size_t i = 0; i < std::min(kLookAhead, ids.size()); ++i) index_.prefetch(ids[i]);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kLookAhead < ids.size()) index_.prefetch(ids[i + kLookAhead]);
    const auto it = index_.find(ids[i]);
    (*slots)[i] = it == index_.end() ? kNone : it->second;
  }
}

void EmbeddingTable::PrefetchRow(uint32_t slot) const {
  const char* row = reinterpret_cast<const char*>(RowAt(slot));
  const size_t bytes = stride_ * sizeof(float);
  for (size_t at = 0; at < bytes; at += 64) __builtin_prefetch(row + at);
  __builtin_prefetch(row + bytes - 1);
  __builtin_prefetch(&records_[slot]);
}

void EmbeddingTable::Read(absl::Span<const int64_t> ids, absl::Span<float> out) {
  const size_t dim = static_cast<size_t>(dim_);
  FindSlots(ids, &slots_);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kLookAhead < ids.size() && slots_[i + kLookAhead] != kNone) {
      PrefetchRow(slots_[i + kLookAhead]);
    }
    absl::Span<float> dst = out.subspan(i * dim, dim);
    if (const uint32_t slot = slots_[i]; slot != kNone) {
      std::memcpy(dst.data(), RowAt(slot), dim * sizeof(float));
    } else if (config_.admit_after() > 0) {
      std::fill(dst.begin(), dst.end(), 0.0f);
    } else {
      InitialRow(config_, seed_, index_in_job_, ids[i], dst);
    }
  }
  stats_.set_rows_pulled(stats_.rows_pulled() + static_cast<int64_t>(ids.size()));
}

void EmbeddingTable::Admit(int64_t id) {
  if (waiting_.size() >= kMaxWaitingIds && !waiting_.contains(id)) {
    waiting_.clear();
    waiting_reset_at_ = clock_;
    stats_.set_waiting_reset(stats_.waiting_reset() + 1);
  }
  if (logging_) Log(&touched_log_, id);
  int64_t& touches = waiting_[id];
  if (++touches < config_.admit_after()) return;
  waiting_.erase(id);
  MakeRow(id);  // admitted: its initial row; this gradient was computed on zeros
}

uint32_t EmbeddingTable::NewSlot() {
  if (!free_.empty()) {
    const uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  const auto slot = static_cast<uint32_t>(records_.size());
  records_.emplace_back();
  uint32_t offset = 0;
  if (const int chunk = ChunkOf(slot, &offset); offset == 0) {
    chunks_.push_back(std::make_unique<float[]>(ChunkRows(chunk) * stride_));
  }
  return slot;
}

uint32_t EmbeddingTable::MakeRow(int64_t id) {
  if (config_.max_rows_per_ps() > 0 && rows() >= config_.max_rows_per_ps() && tail_ != kNone) {
    DropRow(tail_);
    stats_.set_rows_evicted_cap(stats_.rows_evicted_cap() + 1);
  }
  const uint32_t slot = NewSlot();
  float* row = RowAt(slot);
  const size_t dim = static_cast<size_t>(dim_);
  InitialRow(config_, seed_, index_in_job_, id, absl::MakeSpan(row, dim));
  const float initial_slot =
      config_.optimizer() == proto::ROW_ADAGRAD ? static_cast<float>(config_.initial_accumulator())
                                                : 0.0f;
  std::fill(row + dim, row + stride_, initial_slot);
  records_[slot].id = id;
  records_[slot].last_update = clock_;
  PushFront(slot);
  index_.emplace(id, slot);
  if (tracking_) changed_.insert(id);
  stats_.set_rows_admitted(stats_.rows_admitted() + 1);
  return slot;
}

void EmbeddingTable::DropRow(uint32_t slot) {
  ++drops_;
  Unlink(slot);
  const int64_t id = records_[slot].id;
  index_.erase(id);
  if (tracking_) {
    changed_.erase(id);
    dropped_.insert(id);
  }
  if (logging_) Log(&dropped_log_, id);
  free_.push_back(slot);
}

void EmbeddingTable::Unlink(uint32_t slot) {
  RowRecord& r = records_[slot];
  (r.prev == kNone ? head_ : records_[r.prev].next) = r.next;
  (r.next == kNone ? tail_ : records_[r.next].prev) = r.prev;
  r.prev = r.next = kNone;
}

void EmbeddingTable::PushFront(uint32_t slot) {
  RowRecord& r = records_[slot];
  r.prev = kNone;
  r.next = head_;
  if (head_ != kNone) records_[head_].prev = slot;
  head_ = slot;
  if (tail_ == kNone) tail_ = slot;
}

void EmbeddingTable::ApplyRow(float* row, const float* g, double lr, double adam_step_size) {
  const int dim = dim_;
  switch (config_.optimizer()) {
    case proto::ROW_SGD: {
      const float alpha = static_cast<float>(-lr);
      for (int j = 0; j < dim; ++j) row[j] += alpha * g[j];
      return;
    }
    case proto::ROW_ADAGRAD: {
      const float alpha = static_cast<float>(-lr);
      const float eps = static_cast<float>(config_.eps());
      float* sum = row + dim;
      for (int j = 0; j < dim; ++j) {
        sum[j] += g[j] * g[j];
        const float std = std::sqrt(sum[j]) + eps;
        row[j] += alpha * (g[j] / std);
      }
      return;
    }
    case proto::ROW_ADAM: {
      const float c1 = static_cast<float>(1.0 - config_.beta1());
      const float c2 = static_cast<float>(1.0 - config_.beta2());
      const float eps = static_cast<float>(config_.eps());
      const float step = static_cast<float>(-adam_step_size);
      float* m = row + dim;
      float* v = row + 2 * dim;
      for (int j = 0; j < dim; ++j) {
        const float m_old = m[j], v_old = v[j];
        const float dm = (g[j] - m_old) * c1;
        const float dv = (g[j] * g[j] - v_old) * c2;
        m[j] = m_old + dm;
        v[j] = v_old + dv;
        const float denom = std::sqrt(dv + v_old) + eps;
        row[j] += step * ((dm + m_old) / denom);
      }
      return;
    }
    default:
      return;  // ValidateEmbeddingTables refused it
  }
}

void EmbeddingTable::Update(absl::Span<const int64_t> ids, absl::Span<const float> grads, double lr,
                            int64_t clock) {
  ++updates_;
  clock_ = std::max(clock_, clock);
  stats_.set_updates(updates_);
  double adam_step_size = 0;
  if (config_.optimizer() == proto::ROW_ADAM) {
    const double t = static_cast<double>(updates_);
    const double bc1 = 1 - std::pow(config_.beta1(), t);
    const double bc2 = 1 - std::pow(config_.beta2(), t);
    adam_step_size = lr * std::sqrt(bc2) / bc1;
  }
  const size_t dim = static_cast<size_t>(dim_);
  FindSlots(ids, &slots_);
  const int64_t drops_before = drops_;
  int64_t unadmitted = 0, refused = 0, applied = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    // Rows and records ahead into the caches, then (half as far ahead,
    // their records in by then) their neighbours in the recency list.
    if (i + kLookAhead < ids.size() && slots_[i + kLookAhead] != kNone) {
      PrefetchRow(slots_[i + kLookAhead]);
    }
    if (const size_t j = i + kLookAhead / 2; j < ids.size() && slots_[j] != kNone) {
      const RowRecord& r = records_[slots_[j]];
      if (r.prev != kNone) __builtin_prefetch(&records_[r.prev]);
      if (r.next != kNone) __builtin_prefetch(&records_[r.next]);
    }
    uint32_t slot = slots_[i];
    if (drops_ != drops_before) {  // the cap dropped a row: the slots found may be stale
      const auto it = index_.find(ids[i]);
      slot = it == index_.end() ? kNone : it->second;
    }
    if (slot != kNone) {
      Unlink(slot);
      PushFront(slot);
    } else if (config_.admit_after() == 0) {
      slot = MakeRow(ids[i]);
    } else {
      Admit(ids[i]);
      ++unadmitted;
      continue;
    }
    records_[slot].last_update = clock_;
    if (tracking_) changed_.insert(ids[i]);
    // An update that would make the row (or its state) non-finite in f32
    // is not applied, as a dense shard's is not (huge gradients, a huge lr).
    float* row = RowAt(slot);
    scratch_.assign(row, row + stride_);
    ApplyRow(row, grads.data() + i * dim, lr, adam_step_size);
    if (!AllFinite(absl::MakeConstSpan(row, stride_))) {
      std::copy(scratch_.begin(), scratch_.end(), row);
      ++refused;
      continue;
    }
    ++applied;
  }
  stats_.set_gradients_unadmitted(stats_.gradients_unadmitted() + unadmitted);
  stats_.set_refused_row_updates(stats_.refused_row_updates() + refused);
  stats_.set_row_updates(stats_.row_updates() + applied);
  EvictIdle();
}

void EmbeddingTable::EvictIdle() {
  const int64_t after = config_.evict_after_updates();
  if (after <= 0) return;
  while (tail_ != kNone && clock_ - records_[tail_].last_update >= after) {
    DropRow(tail_);
    stats_.set_rows_evicted_idle(stats_.rows_evicted_idle() + 1);
  }
}

void EmbeddingTable::Tick(int64_t clock) {
  clock_ = std::max(clock_, clock);
  EvictIdle();
}

void EmbeddingTable::EvictLeastRecent() {
  DropRow(tail_);
  stats_.set_rows_evicted_memory(stats_.rows_evicted_memory() + 1);
}

int64_t EmbeddingTable::RowCost() const {
  return static_cast<int64_t>(stride_ * sizeof(float) + sizeof(RowRecord) +
                              sizeof(std::pair<int64_t, uint32_t>) + 1);
}

proto::EmbeddingTableStats EmbeddingTable::Stats() const {
  proto::EmbeddingTableStats s = stats_;
  s.set_name(config_.name());
  s.set_rows(rows());
  s.set_row_bytes(rows() * static_cast<int64_t>(stride_ * sizeof(float)));
  s.set_ids_waiting(static_cast<int64_t>(waiting_.size()));
  // What the structures take: the chunks, the records, the free list, the
  // two hash maps (a slot and a control byte per bucket).
  const int64_t index_bytes = static_cast<int64_t>(
      index_.bucket_count() * (sizeof(std::pair<int64_t, uint32_t>) + 1) +
      waiting_.bucket_count() * (sizeof(std::pair<int64_t, int64_t>) + 1));
  size_t chunk_rows = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) chunk_rows += ChunkRows(static_cast<int>(c));
  s.set_memory_bytes(static_cast<int64_t>(chunk_rows * stride_ * sizeof(float) +
                                          records_.capacity() * sizeof(RowRecord) +
                                          free_.capacity() * sizeof(uint32_t)) +
                     index_bytes);
  return s;
}

void EmbeddingTable::SaveFront(size_t count, int64_t after, EmbeddingTableState* out) const {
  out->meta.Clear();
  *out->meta.mutable_config() = config_;
  out->meta.set_updates(updates_);
  *out->meta.mutable_stats() = Stats();
  // Least recently updated first. The changed rows are the front of the
  // recency order (every change moves a row there).
  std::vector<uint32_t> order;
  order.reserve(std::min(count, index_.size()));
  for (uint32_t slot = head_;
       slot != kNone && order.size() < count && records_[slot].last_update > after;
       slot = records_[slot].next) {
    order.push_back(slot);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    out->ids.push_back(records_[*it].id);
    out->last_updates.push_back(records_[*it].last_update);
    const float* row = RowAt(*it);
    out->floats.insert(out->floats.end(), row, row + stride_);
  }
}

void EmbeddingTable::Save(bool delta, EmbeddingTableState* out) const {
  SaveFront(delta ? changed_.size() : index_.size(), INT64_MIN, out);
  if (delta) out->deleted.assign(dropped_.begin(), dropped_.end());
  out->waiting.assign(waiting_.begin(), waiting_.end());
}

void EmbeddingTable::MarkSaved() {
  tracking_ = true;
  changed_.clear();
  dropped_.clear();
}

absl::Status EmbeddingTable::Load(const EmbeddingTableState& state, bool delta,
                                  const std::string& what) {
  auto damaged = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(what, ": table \"", config_.name(), "\": ", why));
  };
  if (state.meta.config().SerializeAsString() != config_.SerializeAsString()) {
    return damaged("saved with another configuration than the job's");
  }
  if (state.meta.updates() < 0) return damaged("a negative update count");
  if (!delta) {
    while (tail_ != kNone) DropRow(tail_);
  }
  for (int64_t id : state.deleted) {
    if (auto it = index_.find(id); it != index_.end()) DropRow(it->second);
  }
  // Oldest first, each to the front: the newest ends there, as saved. The
  // clocks go up along the order, within what a clock may be (eviction
  // subtracts them).
  for (size_t i = 0; i < state.last_updates.size(); ++i) {
    const int64_t t = state.last_updates[i];
    if (t < 0 || t > (int64_t{1} << 48) || (i > 0 && t < state.last_updates[i - 1])) {
      return damaged("a row's last update out of range or out of order");
    }
  }
  for (size_t i = 0; i < state.ids.size(); ++i) {
    const float* values = state.floats.data() + i * stride_;
    if (!std::all_of(values, values + stride_, [](float v) { return std::isfinite(v); })) {
      return damaged("a row that is not finite");
    }
    uint32_t slot;
    if (auto it = index_.find(state.ids[i]); it != index_.end()) {
      slot = it->second;
      Unlink(slot);
    } else {
      slot = NewSlot();
    }
    std::memcpy(RowAt(slot), values, stride_ * sizeof(float));
    records_[slot].id = state.ids[i];
    records_[slot].last_update = state.last_updates[i];
    PushFront(slot);
    index_[state.ids[i]] = slot;
  }
  // A delta's waiting ids are changes (0 touches: no longer waiting);
  // otherwise the waiting ids are all there are.
  const bool waiting_delta = delta && state.meta.waiting_delta();
  if (!waiting_delta) waiting_.clear();
  for (const auto& [id, touches] : state.waiting) {
    if (touches < (waiting_delta ? 0 : 1)) return damaged("an id waiting with no touches");
    if (touches == 0) {
      waiting_.erase(id);
    } else {
      waiting_[id] = touches;
    }
  }
  updates_ = state.meta.updates();
  clock_ = updates_;  // a table of its own; EmbeddingTables sets the ps's (set_clock)
  stats_ = state.meta.stats();
  return absl::OkStatus();
}

void EmbeddingTable::FinishLoad() {
  // A checkpoint cut for more ps (pstrain reshard to fewer) may hold more
  // rows than the cap: the least recently updated go, as a new row's
  // would push them out.
  while (config_.max_rows_per_ps() > 0 && rows() > config_.max_rows_per_ps() && tail_ != kNone) {
    DropRow(tail_);
    stats_.set_rows_evicted_cap(stats_.rows_evicted_cap() + 1);
  }
  MarkSaved();
}

void EmbeddingTable::StartChangeLog() {
  logging_ = true;
  log_since_ = clock_;
  dropped_log_.clear();
  touched_log_.clear();
}

void EmbeddingTable::Log(std::vector<std::pair<int64_t, int64_t>>* log, int64_t id) {
  if (dropped_log_.size() + touched_log_.size() >=
      std::max(kMaxLogEntries, 2 * static_cast<size_t>(rows()))) {
    // A standby this far behind is sent the whole table.
    dropped_log_.clear();
    touched_log_.clear();
    log_since_ = clock_;
  }
  log->emplace_back(clock_, id);
}

void EmbeddingTable::ForgetThrough(int64_t clock) {
  log_since_ = std::max(log_since_, clock);
  auto forget = [clock](std::vector<std::pair<int64_t, int64_t>>* log) {
    const auto end =
        std::find_if(log->begin(), log->end(), [clock](const auto& e) { return e.first > clock; });
    log->erase(log->begin(), end);
  };
  forget(&dropped_log_);
  forget(&touched_log_);
}

bool EmbeddingTable::SaveSince(int64_t clock, EmbeddingTableState* out) const {
  if (!logging_ || clock < log_since_) return false;
  SaveFront(SIZE_MAX, clock, out);  // the rows stamped after `clock`
  absl::flat_hash_set<int64_t> seen;
  for (auto it = dropped_log_.rbegin(); it != dropped_log_.rend() && it->first > clock; ++it) {
    if (seen.insert(it->second).second) out->deleted.push_back(it->second);
  }
  if (waiting_reset_at_ > clock) {
    out->waiting.assign(waiting_.begin(), waiting_.end());  // every waiting id
    return true;
  }
  out->meta.set_waiting_delta(true);
  seen.clear();
  for (auto it = touched_log_.rbegin(); it != touched_log_.rend() && it->first > clock; ++it) {
    if (!seen.insert(it->second).second) continue;
    const auto w = waiting_.find(it->second);
    out->waiting.emplace_back(it->second, w == waiting_.end() ? 0 : w->second);
  }
  return true;
}

}  // namespace pstrain

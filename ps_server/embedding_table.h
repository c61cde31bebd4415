#pragma once

// One embedding table's rows on one ps: the rows of the ids this ps holds
// (common/embedding.h: EmbeddingShardOf), their optimizer state, and the
// table's admission and eviction.
//
// The update rules are torch.optim's on a sparse gradient (the gradient of
// nn.EmbeddingBag(sparse=True)), in f32 as PyTorch's CPU kernels compute
// them; only the rows of the update's ids change:
//   sgd      p -= lr * g
//   adagrad  sum += g^2; p -= lr * g / (sqrt(sum) + eps)
//            (torch.optim.Adagrad with lr_decay 0 and no weight decay:
//            neither applies to sparse gradients)
//   adam     torch.optim.SparseAdam: with t the table's update count,
//            m += (g - m)(1 - beta1); v += (g^2 - v)(1 - beta2);
//            p -= lr sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps).
//            t counts the table's updates, as SparseAdam's step counts
//            the optimizer's steps, not the row's own (lazy Adam's
//            moments, torch's bias correction).
//
// Rows come and go:
//  - An id with no row reads as its initial row (common/embedding.h) and
//    gets one at its first update, which then applies to it.
//  - Admission (admit_after = k > 0): an id has no row until k updates
//    touched it; until then it reads as zeros and its gradients are
//    dropped (counted), the k-th one included: that gradient was computed
//    on zeros. Its row is then its initial row. Touch counts are kept for
//    at most kMaxWaitingIds ids; past that they start again from zero
//    (counted as waiting_reset).
//  - A row update that would make the row or its optimizer state
//    non-finite in f32 is not applied (refused_row_updates), as a dense
//    shard's update is not.
//  - Eviction: a row that no update touched for evict_after_updates ticks
//    of the clock is dropped, and with max_rows_per_ps the least recently
//    updated row makes room for a new one. A dropped row's id starts again
//    as an id never seen (its initial row, or admission). The clock is
//    the ps's count of embedding updates over all its tables
//    (EmbeddingTables), so that recency compares across tables (the ps's
//    memory cap drops the least recent row of any: EvictLeastRecent); a
//    table updated alone counts its own updates.
//
// Checkpoints (checkpoint/embedding_checkpoint.h): Save writes every row,
// or only those made or updated since the last MarkSaved with the ids
// dropped meanwhile, least recently updated first (every change moves a
// row to the front, so the changed rows are the front of the recency
// order); Load applies such states, a full one first, in that order. A table saved and
// loaded goes on exactly as it would have: its rows, optimizer state,
// update count, recency order and waiting ids are all in the file.
//
// Memory: rows (values, then the optimizer's slots) live in chunks of 64
// rows, then 128, ... doubling up to kRowsPerChunk, then kRowsPerChunk
// each, so that a table of a few rows takes a few rows' room; each row has
// a 24-byte record and a hash-index entry. For a 16-float row under
// Adagrad (128 bytes) that is about 1.45x the row's bytes, for 64 floats
// under SGD (256 bytes) 1.26x. Between saves, the ids of the rows changed
// since are kept too (about 16 bytes each).
//
// Thread safety: none; the ps's event loop owns it.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "checkpoint/embedding_checkpoint.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// Whether every value is finite (no infinity, no NaN), in one vectorised
// pass: a row gradient's check, and an updated row's.
bool AllFinite(absl::Span<const float> values);

class EmbeddingTable {
 public:
  static constexpr uint32_t kRowsPerChunk = 4096;
  static constexpr size_t kMaxWaitingIds = size_t{1} << 22;

  // REQUIRES: `config` valid (ValidateEmbeddingTables).
  EmbeddingTable(const proto::EmbeddingTableConfig& config, uint64_t seed, int index);

  int dim() const { return dim_; }
  const proto::EmbeddingTableConfig& config() const { return config_; }

  // The rows of `ids` into `out`, one after another (above: a row, the
  // initial row, or zeros for an id not admitted). Reading changes nothing.
  // REQUIRES: out.size() == ids.size() * dim().
  void Read(absl::Span<const int64_t> ids, absl::Span<float> out);

  // One update of the table (its optimizer's step): row gradients `grads`
  // (ids.size() x dim(), in ids' order) of the distinct `ids`, at learning
  // rate `lr`. REQUIRES: grads.size() == ids.size() * dim(); ids distinct;
  // grads finite; lr finite and >= 0.
  // `clock`: the ps's embedding clock at this update (above), which never
  // goes back.
  void Update(absl::Span<const int64_t> ids, absl::Span<const float> grads, double lr,
              int64_t clock);
  void Update(absl::Span<const int64_t> ids, absl::Span<const float> grads, double lr) {
    Update(ids, grads, lr, updates_ + 1);
  }
  void Update(absl::Span<const int64_t> ids, absl::Span<const float> grads) {
    Update(ids, grads, config_.lr());
  }

  // The clock of the least recently updated row's last update (INT64_MAX
  // when the table has no row).
  int64_t oldest_update() const { return tail_ == kNone ? INT64_MAX : records_[tail_].last_update; }
  // Drops the least recently updated row (the ps's memory cap). REQUIRES:
  // rows() > 0.
  void EvictLeastRecent();
  // What one row costs on the ps: its values and optimizer state, its
  // record and its hash-index entry (not counting the index's free
  // buckets and the chunks' unused rows).
  int64_t RowCost() const;

  int64_t updates() const { return updates_; }
  // The clock a loaded table goes on from (the ps's, from its checkpoint).
  void set_clock(int64_t clock) { clock_ = clock; }
  // The ps's clock moved to `clock`, whether or not this table was updated:
  // rows idle for evict_after_updates ticks are dropped.
  void Tick(int64_t clock);
  int64_t rows() const { return static_cast<int64_t>(index_.size()); }
  proto::EmbeddingTableStats Stats() const;

  // The table as a checkpoint holds it: every row, or (`delta`) the rows
  // made or updated since the last MarkSaved and the ids dropped since.
  void Save(bool delta, EmbeddingTableState* out) const;
  // What Save wrote is the table's saved state: the next delta starts here.
  void MarkSaved();
  // Applies a saved state: a full one replaces the table, a delta goes on
  // top of what is loaded. DataLoss naming `what` for a state that does
  // not fit the table (another config, a row that is not finite, a count
  // out of range); the table is then unusable (load into a fresh one).
  absl::Status Load(const EmbeddingTableState& state, bool delta, const std::string& what);
  // After the last Load: rows over max_rows_per_ps (a checkpoint resharded
  // to fewer ps) are dropped, least recent first, then the table counts as
  // saved.
  void FinishLoad();

  // The hot standby's deltas (ps_server/replicator.h): from StartChangeLog
  // on, the table logs the clock of every drop and of every change of an
  // id's touches, beside the rows' own last updates, so that a standby
  // holding the table as it was at any clock since can be brought up to
  // date. SaveSince writes what changed after `clock` as a delta (the rows
  // updated or made since, the ids dropped since, the waiting ids whose
  // touches changed since, with their touches now, 0 for none), or returns
  // false when the log does not reach back to `clock` (never started, or
  // cut: it holds at most max(kMaxLogEntries, 2 x rows) entries).
  static constexpr size_t kMaxLogEntries = size_t{1} << 20;
  void StartChangeLog();
  bool SaveSince(int64_t clock, EmbeddingTableState* out) const;
  // The standby has the table as it was at `clock`: the log forgets that.
  void ForgetThrough(int64_t clock);

 private:
  struct RowRecord {
    int64_t id = 0;
    int64_t last_update = 0;
    uint32_t prev = kNone;  // toward the most recently updated
    uint32_t next = kNone;  // toward the least recently updated
  };
  static constexpr uint32_t kNone = UINT32_MAX;

  // The chunks: 64, 128, ..., 2048 rows (4,032 in all), then kRowsPerChunk each.
  static constexpr uint32_t kFirstChunkRows = 64;
  static constexpr uint32_t kRowsInGrowingChunks = kRowsPerChunk - kFirstChunkRows;
  static int ChunkOf(uint32_t slot, uint32_t* offset) {
    if (slot < kRowsInGrowingChunks) {
      const uint32_t x = slot / kFirstChunkRows + 1;  // chunk c holds x in [2^c, 2^(c+1))
      const int c = 31 - __builtin_clz(x);
      *offset = slot - kFirstChunkRows * ((1u << c) - 1);
      return c;
    }
    *offset = (slot - kRowsInGrowingChunks) % kRowsPerChunk;
    return 6 + static_cast<int>((slot - kRowsInGrowingChunks) / kRowsPerChunk);
  }
  static size_t ChunkRows(int chunk) {
    return chunk < 6 ? size_t{kFirstChunkRows} << chunk : size_t{kRowsPerChunk};
  }
  float* RowAt(uint32_t slot) const {
    uint32_t offset = 0;
    const int chunk = ChunkOf(slot, &offset);
    return chunks_[static_cast<size_t>(chunk)].get() + size_t{offset} * stride_;
  }
  // A slot for a new row: a dropped row's, or a new one (and a new chunk
  // when the last is full).
  uint32_t NewSlot();
  // A row for `id` (its initial values, fresh optimizer state), making
  // room under max_rows_per_ps first.
  uint32_t MakeRow(int64_t id);
  void DropRow(uint32_t slot);
  // The slot of every id's row (kNone: no row) into `slots`. A table far
  // larger than the caches spends a lookup waiting for memory, and the
  // lookups of distinct ids are independent: each looks its id up with the
  // index's lines for an id kLookAhead further already requested.
  void FindSlots(absl::Span<const int64_t> ids, std::vector<uint32_t>* slots) const;
  // Requests `slot`'s row (values and state) and record into the caches.
  void PrefetchRow(uint32_t slot) const;
  // Unlinks `slot` from the recency list / puts it at its head.
  void Unlink(uint32_t slot);
  void PushFront(uint32_t slot);
  // Save's and SaveSince's start: the meta, and the rows at the front of
  // the recency order (at most `count`, those last updated after `after`),
  // least recently updated first.
  void SaveFront(size_t count, int64_t after, EmbeddingTableState* out) const;
  // An update touched `id`, which has no row: counts the touch, and makes
  // its row at the admit_after-th (admission).
  void Admit(int64_t id);
  void ApplyRow(float* row, const float* g, double lr, double adam_step_size);
  void EvictIdle();

  proto::EmbeddingTableConfig config_;
  uint64_t seed_;
  int index_in_job_;
  int dim_;
  size_t stride_;  // floats a row takes: values and slots
  std::vector<std::unique_ptr<float[]>> chunks_;
  std::vector<RowRecord> records_;
  std::vector<uint32_t> free_;
  absl::flat_hash_map<int64_t, uint32_t> index_;
  absl::flat_hash_map<int64_t, int64_t> waiting_;  // id -> updates that touched it
  std::vector<float> scratch_;  // a row before its update
  std::vector<uint32_t> slots_;  // Read's and Update's FindSlots
  int64_t drops_ = 0;            // rows dropped (a slot found before one may be stale)
  uint32_t head_ = kNone, tail_ = kNone;
  int64_t updates_ = 0;
  int64_t clock_ = 0;  // the last update's clock
  // Since the last MarkSaved (kept from the first one on: before it, a
  // save writes every row): ids whose row was made or updated, ids dropped.
  bool tracking_ = false;
  absl::flat_hash_set<int64_t> changed_;
  absl::flat_hash_set<int64_t> dropped_;
  // The change log (StartChangeLog): (clock, id) of drops and of touches,
  // oldest first; complete for every clock >= log_since_.
  void Log(std::vector<std::pair<int64_t, int64_t>>* log, int64_t id);
  bool logging_ = false;
  int64_t log_since_ = 0;
  int64_t waiting_reset_at_ = -1;  // the clock of the last reset of waiting_
  std::vector<std::pair<int64_t, int64_t>> dropped_log_, touched_log_;
  proto::EmbeddingTableStats stats_;
};

}  // namespace pstrain

#pragma once

// A shard's embedding tables (JobConfig.tables): the rows of the ids this
// ps holds, read by EMBEDDING_PULL and updated by EMBEDDING_PUSH, with the
// update modes' meaning (ps_server/update_policy.h):
//  - async and SSP apply a push when the same rank's dense gradient of the
//    step is applied (the worker sends its rows first, on the same
//    connection): one update of each table the push had a gradient for.
//    A push whose dense gradient is dropped or refused (it crossed the
//    job's last update, say) is dropped with it;
//  - sync applies the pushes of version v together, once the shard applies
//    its version v (ApplyThrough, called by the request handler after every
//    request): each row's gradient is the pushes' average weighted by
//    their examples (rows a worker did not touch count as zeros), in rank
//    order, as the dense gradient's. A worker sends its EMBEDDING_PUSH
//    before its PUSH of the same step on the same connection, so it is in
//    before the version can complete. A push for a version already applied
//    is dropped (stale), a rank's second push for a version is a duplicate.
//
// The clock: every embedding update of the ps (a push applied in async, a
// version applied in sync, that had a gradient of any table) ticks it, and
// each row keeps the clock of its last update (EmbeddingTable). Idle
// eviction counts its ticks, in every table at every tick; the memory cap
// (JobConfig.embedding_memory_per_ps) drops, after an update that left the ps's rows over it, the
// rows with the oldest last update of any table (lowest table index first on a tie) until they fit,
// each row costing EmbeddingTable::RowCost.
//
// Checkpoints: Save writes the tables' file of a checkpoint
// (checkpoint/embedding_checkpoint.h) beside the shard's, every row at the
// first save and every `keep`-th, else only what changed since the
// previous save (a delta): a chain of at most `keep` files. Its files go
// once no checkpoint the chief keeps needs them: those before the start of
// the chain of the oldest it keeps (SAVE's keep_from_step), where this
// process made that chain (a restarted ps keeps every older file until
// the checkpoints it saved itself are the oldest kept). Load
// reads a checkpoint's chain back to its full file, each file checked
// against the checksum its successor (or the manifest) recorded, and
// applies it oldest first: the tables go on bit for bit.
//
// Requests are checked whole before anything is applied: every slice
// names a table, ids are distinct within a slice, held by this ps
// (EmbeddingShardOf) and inside num_embeddings when the table has one, the
// payload is exactly the ids (and rows), gradients are finite, and a
// request holds at most kMaxIds ids. A refusal says which check failed.
//
// Thread safety: none; the ps's event loop owns it.

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"
#include "common/embedding.h"
#include "ps_server/embedding_table.h"

namespace pstrain {

class EmbeddingTables {
 public:
  static constexpr int64_t kMaxIds = kMaxEmbeddingIds;

  EmbeddingTables() = default;
  // The job's tables as shard `shard_index` of `num_shards` holds them,
  // all empty. REQUIRES: ValidateEmbeddingTables(job) OK.
  EmbeddingTables(const proto::JobConfig& job, int shard_index, int num_shards);

  bool empty() const { return tables_.empty(); }
  // The largest payload an EMBEDDING_PULL or EMBEDDING_PUSH may carry.
  size_t MaxPayloadBytes() const;

  // EMBEDDING_PULL: the rows of the request's ids (f32, slice after slice).
  absl::StatusOr<std::vector<float>> Pull(const proto::EmbeddingRequest& request,
                                          absl::Span<const char> payload);

  // EMBEDDING_PUSH, checked whole.
  struct Push {
    struct Slice {
      int table = 0;
      bool has_grad = false;
      double lr = 0;  // the update's learning rate (the table's unless the push set it)
      std::vector<int64_t> ids;
      std::vector<float> grads;  // ids.size() x dim
    };
    std::vector<Slice> slices;
    int num_examples = 0;
  };
  absl::StatusOr<Push> ParsePush(const proto::EmbeddingRequest& request,
                                 absl::Span<const char> payload, int num_examples) const;

  // Applies `push` now.
  void Apply(const Push& push);

  // Async / SSP: keeps `rank`'s push until its dense gradient is applied
  // (ApplyPending) or not (DropPending); a later push of the rank replaces
  // one whose dense gradient never came.
  void HoldPending(int rank, Push push);
  void ApplyPending(int rank);
  void DropPending(int rank);

  // Sync: keeps `push` of `rank` for `version` until ApplyThrough passes
  // it. Returns false (and keeps nothing) when that rank's push for
  // `version` is in already.
  bool Hold(int rank, int64_t version, Push push);
  // Sync: `rank`'s dense gradient of `version` is in the version: its
  // held rows are too. Rows whose dense gradient never came (the rank died
  // between the two pushes, or its gradient was refused) are dropped with
  // the version, as its dense gradient was.
  void Confirm(int rank, int64_t version);
  // Sync: applies, in version order, every held version below `version`
  // (the shard's current one): the confirmed pushes of each.
  void ApplyThrough(int64_t version);

  // Writes the tables' file of checkpoint `step` into `dir` (this shard
  // `shard_index` of `num_shards`, at the shard's `version`; a full file
  // every `keep`-th save) and removes the files no checkpoint from
  // `keep_from_step` on needs (0: none). Fills `saved`'s embedding fields.
  absl::Status Save(const std::string& dir, int64_t step, int64_t version, int keep,
                    int64_t keep_from_step, proto::SavedShard* saved);
  // Removes this shard's files in `dir` that no checkpoint from
  // `keep_from_step` on needs (0, or one saved before this process: none).
  absl::Status RemoveFilesBefore(const std::string& dir, int64_t keep_from_step);
  // The job's tables as checkpoint `step`'s chain in `dir` holds them;
  // `checksum`: the manifest's for its file, `version`: the shard's in it.
  // DataLoss / FailedPrecondition / NotFound naming the file.
  static absl::StatusOr<EmbeddingTables> Load(const proto::JobConfig& job, int shard_index,
                                              int num_shards, const std::string& dir,
                                              int64_t step, uint64_t checksum, int64_t version);

  // Shard `shard_index` of `num_shards`'s tables made of the rows of `old`
  // (every old shard's tables of the same job) that it holds: each table's
  // rows merged by their last update, its waiting ids, its update count
  // (the highest). Returns the rows it took.
  static EmbeddingTables Resharded(std::vector<EmbeddingTables>& old, const proto::JobConfig& job,
                                   int shard_index, int num_shards, int64_t* rows);

  // The payload an EMBEDDING_PUSH with `request`'s slices must have (its
  // ids, then their rows), or InvalidArgument for slices that cannot be:
  // what a ps allows a push in pieces before any piece is kept.
  absl::StatusOr<size_t> PushBytes(const proto::EmbeddingRequest& request) const;

  // The hot standby (ps_server/replicator.h) holds a copy of these tables,
  // sent whole once and then as deltas, each in a checkpoint file's
  // encoding (checkpoint/embedding_checkpoint.h; `version`: the shard's).
  // Every row, optimizer state, waiting id and counter:
  std::string Encode(int64_t version) const;
  // What changed after the clock `since` (EmbeddingTable::SaveSince), in
  // `*out`; false when a table's log does not reach back that far (send
  // them whole). StartChangeLog: every table logs from now on (at a whole
  // send); ForgetThrough: the standby has them as they were at `clock`.
  bool EncodeSince(int64_t since, int64_t version, std::string* out) const;
  void StartChangeLog();
  void ForgetThrough(int64_t clock);
  // Applies Encode's bytes (replacing every table) or EncodeSince's (on
  // top of these tables, which must be as they were at its `since` or
  // later). DataLoss or InvalidArgument naming what does not fit this
  // shard's tables; they are then unusable (apply whole ones to fresh
  // tables).
  absl::Status ApplyEncoded(absl::string_view bytes, bool delta, const std::string& what);
  // The ps's embedding clock: its embedding updates so far.
  int64_t clock() const { return clock_; }

  // Each table's counters, in the job's order.
  std::vector<proto::EmbeddingTableStats> Stats() const;

 private:
  // Reads `count` ids at `*offset` of `payload`, checked for `table`.
  absl::Status ReadIds(int table, int64_t count, absl::Span<const char> payload, size_t* offset,
                       std::vector<int64_t>* ids) const;
  // The sizes the request's slices claim: ids, and floats of rows.
  absl::Status Sizes(const proto::EmbeddingRequest& request, int64_t* ids, int64_t* floats) const;

  // Ticks the clock (the first table update of an embedding update).
  int64_t Tick() { return ++clock_; }
  // After an embedding update at `clock`: every table's idle rows, then
  // the memory cap.
  void Ticked(int64_t clock);
  // Drops the least recently updated rows of any table until the rows fit
  // memory_cap_.
  void EnforceMemoryCap();

  int shard_index_ = 0;
  int num_shards_ = 1;
  int64_t memory_cap_ = 0;  // bytes; 0: none
  int64_t clock_ = 0;
  std::vector<std::unique_ptr<EmbeddingTable>> tables_;
  struct Held {
    Push push;
    bool confirmed = false;
  };
  std::map<int64_t, std::map<int, Held>> held_;  // sync: version -> rank -> push
  std::map<int, Push> pending_;                  // async, ssp: rank -> push
  // The previous save's file (a delta's base), and deltas since the last full.
  int64_t saved_step_ = -1;
  uint64_t saved_checksum_ = 0;
  int deltas_ = 0;
  // This process's saves: step -> the step of its chain's full file.
  std::map<int64_t, int64_t> chain_start_;
};

}  // namespace pstrain

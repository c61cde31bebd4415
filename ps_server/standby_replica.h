#pragma once

// A ps's copy of another ps's shard, as its hot standby (--ps_replicas=1):
// ps k keeps the state of shard (k - 1) mod n, which that shard's primary
// sends it after every change (REPLICATE; the primary's side is
// ps_server/replicator.h), and gives it to the chief (FETCH_REPLICA), which
// restores a restarted primary from it or has this ps serve the shard
// meanwhile (failover: ps_server/hosted_shards.h).
//
// Keep() takes a REPLICATE only from this ps's primary, for its own shard,
// of a cluster of this size, never of an older placement term than the
// replica held (the shard moved while that primary was away), and only a
// state a shard of its range and optimizer could have, finite in f32; its
// tables' delta only on the tables it holds of that primary's stream at
// the delta's base or later (else FailedPrecondition: the primary sends
// them whole next).
// Thread safety: none; the ps's event loop owns it.

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/shard_checkpoint.h"
#include "proto/pstrain.pb.h"
#include "ps_server/access_control.h"
#include "ps_server/embedding_tables.h"
#include "transport/transport.h"

namespace pstrain {

// A standby's copy of another ps's shard: the last REPLICATE's header (job,
// plan, range, ReplicaState, the primary's counters) and its state,
// parameters then the optimizer's slots (null: none held); a job with
// embedding tables: the shard's tables too, kept up to date by the
// REPLICATEs' deltas (null: none held, or a delta failed: the replica is
// then of no use until its primary sends them whole).
struct HeldReplica {
  proto::Header header;
  std::shared_ptr<const std::vector<float>> state;
  std::shared_ptr<EmbeddingTables> tables;
  bool held() const { return state != nullptr && (header.job().tables_size() == 0 || tables); }
};

// The floats of the state a message carries (a REPLICATE, or a RESTORE
// from a standby's state): its range's parameters and the slots of its
// job's optimizer (common/optimizer.h), followed in the payload by its
// tables' bytes exactly when the job has tables (ReplicaState.tables_bytes).
// InvalidArgument when the range, the optimizer, the payload or the
// ReplicaState is not one a shard of a job of `num_workers` ranks could
// have.
absl::StatusOr<size_t> CheckState(const Message& m, int num_workers);
// The bytes of the whole payload such a message has: its state's and its
// tables' (ReplicaState.tables_bytes); what a state sent in parts
// (transport/state_parts.h) must add up to.
absl::StatusOr<uint64_t> StatePayloadBytes(const proto::Header& h);
// The tables' bytes of a message CheckState accepted, `floats` its result.
absl::string_view TablesOf(const Message& m, size_t floats);

// A RESTORE from_payload's state as a checkpoint (version, updates,
// clocks and counters from its ReplicaState and stats), checked as
// CheckState does and finite in f32.
absl::StatusOr<ShardCheckpoint> StateFromPayload(const Message& m, int num_workers);

// A replica's payload as FETCH_REPLICA sends it and RESTORE from_payload
// takes it: its state's floats, then its tables whole, which `r` (the
// message's ReplicaState) is told of (tables_bytes, not a delta).
std::vector<float> ReplicaPayload(const HeldReplica& replica, proto::ReplicaState* r);
// Appends `bytes` to `payload`, zero-padded to whole floats.
void AppendTables(const std::string& bytes, std::vector<float>* payload);

class StandbyReplica {
 public:
  StandbyReplica(int shard_index, int num_workers)
      : shard_index_(shard_index), num_workers_(num_workers) {}

  // Why Keep refused a REPLICATE.
  enum class Refusal { kNone, kNotMyPrimary, kStaleTerm, kBadState, kTablesBehind };

  // Keeps the state REPLICATE `m` from `who` carries, in a cluster of
  // `num_shards` ps (see above); the refusal otherwise, and which.
  absl::Status Keep(const Principal& who, const Message& m, int num_shards,
                    Refusal* refusal = nullptr);

  // Whether this ps takes a REPLICATE with header `h` from `who` (Keep's
  // checks of the header alone, which a part of a state gets before it is
  // kept: ps_server/request_handler_recovery.cc): only from its primary,
  // for its own shard, of a cluster of `num_shards` ps, never of an older
  // term than the replica held.
  absl::Status Admit(const Principal& who, const proto::Header& h, int num_shards,
                     Refusal* refusal = nullptr) const;

  const HeldReplica& held() const { return held_; }
  void Set(HeldReplica replica) {
    held_ = std::move(replica);
    ++changes_;
  }
  // How many times the replica held changed (Keep, Set).
  uint64_t changes() const { return changes_; }

 private:
  // The tables of an accepted REPLICATE `m` whose state is `floats` floats.
  absl::Status KeepTables(const Message& m, size_t floats, int num_shards);

  int shard_index_;
  int num_workers_;
  HeldReplica held_;
  uint64_t changes_ = 0;
};

}  // namespace pstrain

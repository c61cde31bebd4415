#pragma once

// Where one ps keeps its shard's checkpoints: SAVE writes the shard's file
// of checkpoint ckpt-<step> into its --checkpoint_dir and removes its files
// of checkpoints older than the chief keeps (checkpoint/checkpoint_dir.h);
// RESTORE reads one back and checks it against what the chief's request
// says the shard is. The file format is checkpoint/shard_checkpoint.h, the
// directory layout checkpoint/checkpoint_dir.h.
//
//   CheckpointStore store(dir, shard_index);
//   ASSIGN_OR_RETURN(proto::SavedShard saved, store.Save(&checkpoint, num_shards, keep_from));
//   ASSIGN_OR_RETURN(ShardCheckpoint c, store.Load(restore_request, num_shards));
//
// Errors name the file. Both read and write on the caller's thread (the
// ps's event loop): for these models' shards a few milliseconds, fsyncs
// included. Thread safety: none needed (no mutable state).

#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/shard_checkpoint.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

class CheckpointStore {
 public:
  // Steps (and versions read back) beyond this are refused: 2^48.
  static constexpr int64_t kMaxStep = int64_t{1} << 48;

  // `dir` empty: SAVE and RESTORE from files are refused.
  CheckpointStore(std::string dir, int shard_index)
      : dir_(std::move(dir)), shard_index_(shard_index) {}

  bool enabled() const { return !dir_.empty(); }

  // Writes `checkpoint` (its header's step, shard and range set by the
  // caller) as this shard's file of ckpt-<step>, then removes this shard's
  // files of checkpoints before `keep_from_step` (SAVE's). Returns what the
  // manifest records of it. REQUIRES: enabled().
  absl::StatusOr<proto::SavedShard> Save(ShardCheckpoint* checkpoint, int num_shards,
                                         int64_t keep_from_step) const;

  // Removes this shard's files of checkpoints before `keep_from_step`.
  absl::Status RemoveBefore(int64_t keep_from_step, int num_shards) const;

  // The file RESTORE `request` names (request.restore().step(), this shard
  // of `num_shards`), checked against the request: shard, range, plan,
  // the manifest's checksum, the job's mode and optimizer; and its version,
  // update count and values in range and finite. REQUIRES: enabled().
  absl::StatusOr<ShardCheckpoint> Load(const proto::Header& request, int num_shards) const;

 private:
  std::string dir_;
  int shard_index_;
};

}  // namespace pstrain

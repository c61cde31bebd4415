#include "ps_server/checkpoint_store.h"

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps_server/shard_store.h"

namespace pstrain {
namespace {

// "shard-0-of-2.ckpt": the file's name inside its ckpt-<step> directory.
std::string BaseName(const std::string& relative) {
  return relative.substr(relative.rfind('/') + 1);
}

}  // namespace

absl::StatusOr<proto::SavedShard> CheckpointStore::Save(ShardCheckpoint* checkpoint, int num_shards,
                                                        int64_t keep_from_step) const {
  const proto::ShardCheckpointHeader& hdr = checkpoint->header;
  const std::string file = ShardFileName(hdr.step(), shard_index_, num_shards);
  RETURN_IF_ERROR(WriteShardCheckpoint(absl::StrCat(dir_, "/", file), checkpoint));
  RETURN_IF_ERROR(RemoveBefore(keep_from_step, num_shards));
  proto::SavedShard saved;
  saved.set_shard_index(shard_index_);
  saved.set_file(file);
  saved.set_checksum(hdr.payload_checksum());
  saved.set_version(hdr.version());
  saved.set_payload_bytes(hdr.payload_bytes());
  *saved.mutable_worker_steps() = hdr.worker_clocks();
  LOG(INFO) << "saved " << file << " at version " << hdr.version();
  return saved;
}

absl::Status CheckpointStore::RemoveBefore(int64_t keep_from_step, int num_shards) const {
  const std::string file = ShardFileName(keep_from_step, shard_index_, num_shards);
  return RemoveOwnFilesBefore(dir_, keep_from_step, BaseName(file)).status();
}

absl::StatusOr<ShardCheckpoint> CheckpointStore::Load(const proto::Header& h,
                                                      int num_shards) const {
  const std::string path =
      absl::StrCat(dir_, "/", ShardFileName(h.restore().step(), shard_index_, num_shards));
  ASSIGN_OR_RETURN(ShardCheckpoint c, ReadShardCheckpoint(path));
  const ShardCheckpointExpectation expected{shard_index_,          num_shards,
                                            h.range_begin(),       h.range_end(),
                                            h.plan_fingerprint(),  h.restore().checksum(),
                                            &h.job()};
  RETURN_IF_ERROR(CheckShardCheckpoint(c, expected, path));
  const auto n = static_cast<int64_t>(h.range_end() - h.range_begin());
  if (c.header.version() < 0 || c.header.version() > kMaxStep || c.header.updates() < 0 ||
      !IsFiniteState(c.state, n)) {
    return absl::DataLossError(
        absl::StrCat(path, ": damaged checkpoint: a version, update count or value out of range"));
  }
  return c;
}

}  // namespace pstrain

#pragma once

// A checkpoint's manifest: DIR/ckpt-<step>/manifest.json, which the chief
// writes after every ps wrote its shard file (checkpoint/checkpoint_dir.h
// has the layout, proto/checkpoint.proto the fields). It names every shard
// file with its checksum, the job and the flags that made it, and each
// worker's position in the data. Written last and atomically: a checkpoint
// without a manifest that reads back does not exist.
//
// Errors name the file: NotFound for a missing manifest, DataLoss for a
// damaged one, FailedPrecondition for one of another job or a format
// version this build does not read.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// The job whose checkpoints a manifest describes: what a manifest records,
// and what a resume requires of one.
struct CheckpointJob {
  proto::JobConfig config;         // the chief's job (what RESTORE sends)
  std::vector<std::string> flags;  // the chief's training flags, recorded only
  uint64_t plan_fingerprint = 0;
  int64_t num_params = 0;
  int num_shards = 1;
};

// The manifest of checkpoint `step` of `job`, whose shards wrote `shards`
// (by shard), stamped `created_at` (RFC 3339). Each worker's position: the
// chief's step in sync; in async and ssp a rank's smallest clock over the
// shards (its gradient is in the model once every shard applied it).
proto::CheckpointManifest MakeManifest(const CheckpointJob& job, int64_t step,
                                       const std::vector<proto::SavedShard>& shards,
                                       const std::string& created_at);

// Writes `manifest` as DIR/ckpt-<step>/manifest.json atomically (the
// checkpoint's directory is created when missing).
absl::Status WriteManifest(const std::string& dir, const proto::CheckpointManifest& manifest);

// "--name=value" -> "value" for the last such flag in `flags` (a
// manifest's or launch.json's recorded flags); "" if none.
std::string RecordedFlag(const std::vector<std::string>& flags, const std::string& name);

// Reads and parses DIR/ckpt-<step>/manifest.json. NotFound or DataLoss
// naming the file; FailedPrecondition for another format version.
absl::StatusOr<proto::CheckpointManifest> ReadManifest(const std::string& dir, int64_t step);

// FailedPrecondition naming `path` and the field when the manifest is not a
// checkpoint of `job`: plan fingerprint, number of shards or workers,
// mode, seed, batch size, steps per epoch or optimizer differ. DataLoss
// when it is inconsistent in itself (missing shards or workers).
absl::Status CheckManifest(const proto::CheckpointManifest& manifest, const CheckpointJob& job,
                           const std::string& path);

}  // namespace pstrain

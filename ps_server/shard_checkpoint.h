#pragma once

// One ps shard's checkpoint file: a versioned protobuf header and the raw
// f32 payload (parameters, then momentum), each guarded by a 64-bit
// checksum. The layout is documented in proto/checkpoint.proto.
//
// Errors name the file: DataLoss for a damaged file (bad magic, a header or
// payload whose checksum does not match, a size that disagrees with the
// header), FailedPrecondition for a well-formed file that belongs to
// another job shape (another shard, range, plan or optimizer), NotFound for
// a missing file. Nothing here aborts on a file's bytes.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/checkpoint.pb.h"

namespace pstrain {

struct ShardCheckpoint {
  proto::ShardCheckpointHeader header;
  std::vector<float> params;
  std::vector<float> momentum;  // same size as params
};

// FNV-1a 64 of the payload: the bytes of `params`, then of `momentum`
// (little-endian f32 on every supported host).
uint64_t PayloadChecksum(absl::Span<const float> params, absl::Span<const float> momentum);

// The file's bytes. Sets header.format_version, encoding, payload_bytes and
// payload_checksum. REQUIRES: params.size() == momentum.size().
std::string EncodeShardCheckpoint(ShardCheckpoint* checkpoint);

// Parses and checks a file's bytes; `path` names it in errors.
absl::StatusOr<ShardCheckpoint> DecodeShardCheckpoint(const std::string& bytes,
                                                      const std::string& path);

// EncodeShardCheckpoint, then WriteFileAtomic (temporary file, fsync,
// rename, fsync of the directory, which is created if missing).
absl::Status WriteShardCheckpoint(const std::string& path, ShardCheckpoint* checkpoint);

// Reads and decodes `path`.
absl::StatusOr<ShardCheckpoint> ReadShardCheckpoint(const std::string& path);

// What the restoring side expects of a checkpoint.
struct ShardCheckpointExpectation {
  int shard_index = 0;
  int num_shards = 1;
  uint64_t range_begin = 0;
  uint64_t range_end = 0;
  uint64_t plan_fingerprint = 0;
  uint64_t payload_checksum = 0;  // 0: any (no manifest to compare with)
  const proto::JobConfig* job = nullptr;  // mode and optimizer must agree; null: not checked
};

// FailedPrecondition naming `path` and the first field that disagrees.
absl::Status CheckShardCheckpoint(const ShardCheckpoint& checkpoint,
                                  const ShardCheckpointExpectation& expected,
                                  const std::string& path);

}  // namespace pstrain

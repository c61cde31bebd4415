#pragma once

// One ps shard's checkpoint file: a versioned protobuf header and the raw
// f32 payload (the shard's state: parameters, then the optimizer's slots,
// common/optimizer.h), each guarded by a 64-bit checksum. The layout is
// documented in proto/checkpoint.proto. Files of format version 2 are
// written; version 1 (SGD, its momentum buffer the one slot) is read too.
//
// Errors name the file: DataLoss for a damaged file (bad magic, a header or
// payload whose checksum does not match, a size that disagrees with the
// header), FailedPrecondition for a well-formed file that belongs to
// another job shape (another shard, range, plan or optimizer) or that this
// build cannot read (a format version or optimizer it does not know),
// NotFound for a missing file. Nothing here aborts on a file's bytes.

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
  // The shard's state: its range_end - range_begin parameters, then the
  // slots of header.job's optimizer, as many floats each.
  std::vector<float> state;
};

// FNV-1a 64 of the payload: the bytes of `state` (little-endian f32 on
// every supported host). For an SGD shard, the same value as format
// version 1's checksum of its parameters, then its momentum.
uint64_t PayloadChecksum(absl::Span<const float> state);

// The file's bytes, of the current format version. Sets
// header.format_version, encoding, payload_bytes and payload_checksum.
// REQUIRES: header.job is a valid optimizer's (OptimizerFromJob) and
// state.size() == StateFloats(that optimizer, range_end - range_begin).
std::string EncodeShardCheckpoint(ShardCheckpoint* checkpoint);

// Parses and checks a file's bytes; `path` names it in errors. The
// state's size is checked against the range and the file's optimizer.
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

// FailedPrecondition naming `path` and the first field that disagrees (the
// optimizer: its kind and the hyperparameters it reads, SameOptimizer).
absl::Status CheckShardCheckpoint(const ShardCheckpoint& checkpoint,
                                  const ShardCheckpointExpectation& expected,
                                  const std::string& path);

}  // namespace pstrain

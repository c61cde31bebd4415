#pragma once

// A ps's embedding tables in a checkpoint (the layout: proto/checkpoint.proto,
// EmbeddingCheckpointHeader): every row of every table (a full file), or the
// rows changed and the ids dropped since the ps's previous file (a delta),
// with each table's update count, recency counter, ids waiting for
// admission and counters. A restore reads the chain back to its full file
// and applies it oldest first (ps_server/embedding_tables.h).
//
// Errors name the file: DataLoss for damage (magic, checksums, sizes that
// disagree), FailedPrecondition for a format this build cannot read,
// NotFound for a missing file. Nothing aborts on a file's bytes.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/checkpoint.pb.h"

namespace pstrain {

// One table's part of the file.
struct EmbeddingTableState {
  proto::EmbeddingTableCheckpoint meta;  // config, updates, stats
  // Row records, least recently updated first: ids, their last update,
  // and their floats (values then optimizer state), stride each.
  std::vector<int64_t> ids;
  std::vector<int64_t> last_updates;
  std::vector<float> floats;
  std::vector<int64_t> deleted;
  std::vector<std::pair<int64_t, int64_t>> waiting;  // (id, touches)

  // Floats a row takes: the config's dim x (1 + the optimizer's slots).
  size_t stride() const;
};

struct EmbeddingCheckpoint {
  proto::EmbeddingCheckpointHeader header;  // its tables' metas are the states'
  std::vector<EmbeddingTableState> tables;
};

// "ckpt-20/embedding-0-of-2.ckpt": relative to the checkpoint directory.
std::string EmbeddingFileName(int64_t step, int shard, int num_shards);

// The file's bytes. Sets the header's format version, tables (each state's
// meta with its counts), payload size and checksum.
// REQUIRES: each state's vectors agree with its counts and stride.
std::string EncodeEmbeddingCheckpoint(EmbeddingCheckpoint* checkpoint);
absl::StatusOr<EmbeddingCheckpoint> DecodeEmbeddingCheckpoint(absl::string_view bytes,
                                                              const std::string& path);

// Encode, then WriteFileAtomic (its directory made if missing); Read then Decode.
absl::Status WriteEmbeddingCheckpoint(const std::string& path, EmbeddingCheckpoint* checkpoint);
absl::StatusOr<EmbeddingCheckpoint> ReadEmbeddingCheckpoint(const std::string& path);

}  // namespace pstrain

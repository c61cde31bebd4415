#pragma once

// A checkpoint rewritten for another number of ps tasks (`pstrain reshard`):
// the newest usable checkpoint of a checkpoint directory, its shards cut
// again by the job's shard plan for `num_ps` ps (the parameters, each
// optimizer slot and each tensor's step count follow their floats), and
// its embedding tables' rows moved to the ps that holds each id for
// `num_ps` (common/embedding.h), each new ps's file a full one. The new
// files and manifest replace the old checkpoint's; every other checkpoint
// of the directory (of the old ps count, which no job of the new count can
// restore) is removed. A job of `num_ps` ps restored from it goes on as
// the old one would have: the same parameters, slots and rows; in async
// and SSP each new shard takes the lowest version and clocks of the old
// shards it overlaps.
//
// Errors name the file: a checkpoint directory without a usable
// checkpoint, a manifest without the job's layout (an older chief's), a
// damaged or missing shard or embedding file (nothing is changed then).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace pstrain {

struct ReshardResult {
  int64_t step = 0;     // the checkpoint rewritten (ckpt-<step>)
  int from_ps = 0;
  int to_ps = 0;
  int64_t rows = 0;     // embedding rows moved (all tables)
  int removed = 0;      // checkpoints of the old ps count removed
};

// REQUIRES: num_ps >= 1.
absl::StatusOr<ReshardResult> ReshardCheckpoint(const std::string& dir, int num_ps);

}  // namespace pstrain

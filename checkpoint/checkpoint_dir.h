#pragma once

// The layout of a checkpoint directory, shared by the ps (its shard files)
// and the chief (the manifests):
//
//   DIR/ckpt-<step>/shard-<k>-of-<n>.ckpt   written by ps k (SAVE)
//   DIR/ckpt-<step>/manifest.json           written by the chief, last
//
// <step> is the chief's steps finished, in decimal without padding; order is
// numeric. Nothing here reads a file's contents (proto/checkpoint.proto has
// the formats).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// "ckpt-20".
std::string CheckpointName(int64_t step);
// "DIR/ckpt-20".
std::string CheckpointPath(const std::string& dir, int64_t step);
// "ckpt-20/shard-0-of-2.ckpt": relative to the checkpoint directory.
std::string ShardFileName(int64_t step, int shard, int num_shards);
// "ckpt-20/manifest.json".
std::string ManifestFileName(int64_t step);

// The steps of the ckpt-<step> directories in `dir`, ascending; other
// entries are ignored. Empty when `dir` does not exist; Internal naming
// `dir` when it cannot be listed.
absl::StatusOr<std::vector<int64_t>> ListCheckpointSteps(const std::string& dir);

// The most checkpoints a job keeps (--keep_checkpoints; a SAVE's).
inline constexpr int kMaxKeepCheckpoints = 1 << 20;

// Which checkpoints stay: the newest `keep` complete ones (with their
// manifest.json, which the chief writes once every shard is saved) and
// every directory newer than the oldest of them. Counting only complete
// ones, a save that failed on one ps (a full disk) leaves the others'
// files in a directory that pushes no complete checkpoint out. The chief
// decides, from its directory, and tells each ps (SAVE's keep_from_step),
// whose directory may be another host's.

// The oldest of the newest `keep` complete checkpoints of `dir`; 0 when
// there are not that many. InvalidArgument unless 1 <= keep <=
// kMaxKeepCheckpoints.
absl::StatusOr<int64_t> KeepFromStep(const std::string& dir, int keep);

// In every ckpt-<step> directory of `dir` with a step below `before`,
// removes the file named `file_in_checkpoint` (e.g. "manifest.json" for
// the chief, "shard-0-of-2.ckpt" for ps 0) and the temporaries of it a
// killed writer may have left (NAME.tmp.<pid>), then the directory itself
// if it is empty (the chief and the ps tasks may share `dir`, each
// removing its own files; whoever is last removes the directory). Returns
// the steps it pruned.
absl::StatusOr<std::vector<int64_t>> RemoveOwnFilesBefore(const std::string& dir, int64_t before,
                                                          const std::string& file_in_checkpoint);

// RemoveOwnFilesBefore(dir, KeepFromStep(dir, keep), file): the chief's,
// whose directory holds the manifests.
absl::StatusOr<std::vector<int64_t>> PruneCheckpoints(const std::string& dir, int keep,
                                                      const std::string& file_in_checkpoint);

}  // namespace pstrain

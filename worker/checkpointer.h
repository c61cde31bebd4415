#pragma once

// The chief's side of checkpoints (the formats are checkpoint/: the ps's
// shard files, the manifest, the directory's layout):
//
//  - Save: every ps writes its shard (SAVE, at whatever version it has:
//    in sync, after the chief's PUSH_PULL, all shards are at the chief's
//    step); then the chief writes DIR/ckpt-<step>/manifest.json naming
//    every shard file with its checksum, the plan fingerprint, the job and
//    the flags, and each worker's data position; then keeps the newest K.
//    The manifest is written last and atomically, so a checkpoint without
//    one (a crash in between) does not exist.
//  - Resume: the newest checkpoint whose manifest reads back, matches this
//    job and whose shard files every ps accepts (RESTORE, verify_only), is
//    restored on every ps; a damaged or mismatched one is skipped with a
//    warning naming the file, and the one before it is tried. Recovery
//    restores only some shards (a restarted ps in async), or rolls live
//    ones back with them (sync): RestoreScope.
//
// Thread safety: none; the training thread owns it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/manifest.h"
#include "common/clock.h"
#include "proto/checkpoint.pb.h"
#include "worker/ps_client.h"

namespace pstrain {

struct CheckpointerOptions {
  std::string dir;            // the chief's checkpoint directory
  int64_t every_steps = 0;    // 0: not by steps
  double every_s = 0.0;       // 0: not by time
  int keep = 3;               // REQUIRES: >= 1
  CheckpointJob job;          // what the manifests record, and a resume must match
  const Clock* clock = nullptr;  // for every_s; null: the real clock
};

class Checkpointer {
 public:
  // `client` is borrowed and must outlive this.
  Checkpointer(CheckpointerOptions options, PsClient* client);

  // Whether the chief should save after finishing `step` steps: every
  // every_steps steps, every every_s seconds, and once when training is
  // `done` (if either is on); never twice at one step.
  bool Due(int64_t step, bool done) const;

  // Saves checkpoint `step`. A failure is logged and returned, and the
  // previous checkpoints stay as they were.
  absl::Status Save(int64_t step);

  // Restores the shards of `scope` from the newest usable checkpoint;
  // returns its manifest (its step is the chief's position).
  // FailedPrecondition naming the directory when none is usable.
  absl::StatusOr<proto::CheckpointManifest> Resume(const RestoreScope& scope = {});

  // The oldest checkpoint kept now (KeepFromStep of the directory; 0 when
  // fewer are complete or it cannot be listed): SHUTDOWN tells the ps
  // tasks, whose files of the checkpoint before it outlived its last save.
  int64_t KeepFrom() const;

  // After the chief made a new client (recovery). `client` is borrowed.
  void set_client(PsClient* client) { client_ = client; }

 private:
  absl::StatusOr<proto::CheckpointManifest> TryRestore(int64_t step, const RestoreScope& scope);

  CheckpointerOptions options_;
  const Clock* clock_;
  PsClient* client_;
  int64_t last_step_ = -1;
  int64_t last_us_ = 0;  // monotonic time of the last save (or of construction)
};

}  // namespace pstrain

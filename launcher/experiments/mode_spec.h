#pragma once

// The update modes an experiment runs, written as `pstrain compare
// --modes=...` takes them:
//
//   sync            synchronous: each version averages all N gradients
//   sync+backup:B   synchronous, each version applied once N-B gradients
//                   arrived; the late ones are dropped (backup workers)
//   async           every gradient applied on arrival, no bound
//   ssp:S           stale synchronous parallel: a worker waits when it is
//                   more than S steps ahead of the slowest. ssp:0 is bulk
//                   synchronous, but gradients are applied one by one as they
//                   arrive, not averaged as in sync.
//   +slr            suffix for async and ssp: staleness-aware learning rate
//                   (the step divided by the gradient's staleness)

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/train_options.h"

namespace pstrain {

struct ModeSpec {
  std::string label;        // normalised: "ssp:2", "sync+backup:1", "async+slr"
  std::string mode;         // "sync", "async" or "ssp"
  int staleness = 0;        // ssp's bound
  int backup_workers = 0;   // sync only
  bool staleness_lr = false;

  // A file name for the label: "ssp-2", "sync_backup-1", "async_slr".
  std::string DirName() const;
  // Sets the training options that select this mode: mode, staleness,
  // backup_workers, staleness_lr.
  void ApplyTo(TrainOptions* options) const;
  // One sentence on what the mode does, for reports.
  std::string Describe() const;
};

// Parses one mode. InvalidArgument naming the text for anything else.
absl::StatusOr<ModeSpec> ParseModeSpec(absl::string_view text);

// Parses a comma-separated list; InvalidArgument for an empty list, a bad
// item or the same mode twice.
absl::StatusOr<std::vector<ModeSpec>> ParseModeList(absl::string_view text);

}  // namespace pstrain

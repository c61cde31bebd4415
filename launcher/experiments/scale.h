#pragma once

// `pstrain scale`: one update mode over a matrix of ps and worker counts,
// each cell a local cluster on this machine, then one report:
//
//   OUT/specs/ps<P>_w<W>.json   the generated cluster specs (the launcher
//                               replaces their ports with free ones)
//   OUT/ps<P>_w<W>/             each run's directory
//   OUT/report.md               images/s measured and predicted (`pstrain
//                               plan`'s model, calibrated from --calibrate
//                               runs or else the matrix's first cell),
//                               speedup over 1 worker, scaling efficiency,
//                               time to 95%/97%, final accuracy
//   OUT/plots/                  throughput and time-to-accuracy against
//                               the worker count (one line per ps count),
//                               and every run's accuracy curve

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "launcher/experiments/experiment.h"
#include "launcher/experiments/mode_spec.h"

namespace pstrain {

struct ScaleOptions {
  ExperimentOptions experiment;
  std::vector<int> workers;         // ascending, distinct, >= 1
  std::vector<int> ps;              // ascending, distinct, >= 1
  ModeSpec mode;                    // the same in every cell
  bool lr_given = false;            // --lr was set (else the mode's default)
  // Run directories that calibrate the predicted images/s; empty: the
  // matrix's first cell (the fewest ps and workers).
  std::vector<std::string> calibrate;
};

// "1,2,4,8" -> {1, 2, 4, 8} (sorted, duplicates removed). InvalidArgument
// naming `flag` for an empty list or an item outside 1..max.
absl::StatusOr<std::vector<int>> ParseCountList(absl::string_view text, absl::string_view flag, int max);

// The cluster JSON of a local cluster with `ps` ps and `workers` workers, on
// placeholder localhost ports (a launch with free ports replaces them).
std::string LocalSpecJson(int ps, int workers);

// Runs every (ps, workers) cell, ps-major, and writes the report. Failed
// runs are reported and the others still run (then Aborted after the
// report); InvalidArgument before any run when the mode cannot run on the
// smallest cell (backup workers >= workers); Cancelled when
// experiment.cancel fires.
absl::Status RunScale(const ScaleOptions& options);

}  // namespace pstrain

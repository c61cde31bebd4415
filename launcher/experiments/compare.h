#pragma once

// `pstrain compare`: the same cluster spec, seed and data trained in
// several update modes, one run after the other, then one report:
//
//   OUT/<mode>/        each run's directory (summary.json, evals.csv, ...)
//   OUT/report.md      the table (accuracy, time to 95/97%, images/s,
//                      updates, dropped gradients, staleness) and figures
//   OUT/plots/         accuracy_vs_time, loss_vs_step, staleness_histogram:
//                      PNGs drawn by gnuplot, with their data and scripts

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "launcher/experiments/experiment.h"
#include "launcher/experiments/mode_spec.h"

namespace pstrain {

struct CompareOptions {
  ExperimentOptions experiment;
  std::string cluster_spec_path;
  std::vector<ModeSpec> modes;
  bool lr_given = false;  // --lr was set (else each mode's default)
};

// Runs every mode and writes the report. A run that fails is reported as
// such and the others still run; the status is then Aborted naming the
// failed modes, after the report is written. InvalidArgument / NotFound for
// a bad spec or a mode it cannot run (backup workers >= workers), before
// any run; Cancelled when experiment.cancel fires (no report). Without
// gnuplot the report says so and has its tables; that is not an error.
absl::Status RunCompare(const CompareOptions& options);

}  // namespace pstrain

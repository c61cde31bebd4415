#pragma once

// The run directory's outputs that a new run must not inherit. A run that
// fails leaves what it wrote so far; the next run into the same directory
// would otherwise sit beside a summary.json, final_params.f32 or
// steps_worker7.csv that are not its own, and a reader could not tell.

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// Removes from `run_dir` what an earlier run there may have left:
// summary.json, final_params.f32, epochs.csv, evals.csv, recoveries.json,
// task_cpu.csv, buffers/ (pstrain.torch's workers' saved buffers, with what
// it holds), the CSVs a resumed run moved aside (*.csv.old, *.csv.old.K),
// and steps_worker<r>.csv for every rank r not in `live_ranks` (the files
// of workers of this run that may have opened theirs already). Returns the
// names removed, sorted; empty
// when there were none or `run_dir` does not exist. Internal naming the
// file that cannot be removed.
//
// Called once per run: by the launcher before it starts any task, or by the
// chief when run by hand (TrainOptions::clean_run_dir).
absl::StatusOr<std::vector<std::string>> RemoveStaleRunOutputs(const std::string& run_dir,
                                                               const std::set<int>& live_ranks);

// "removed the outputs of an earlier run from DIR: a, b" for a log line.
std::string DescribeRemoved(const std::string& run_dir, const std::vector<std::string>& removed);

}  // namespace pstrain

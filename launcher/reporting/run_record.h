#pragma once

// What one training run left in its run directory, read back for a report:
// summary.json, the chief's evals.csv and every worker's steps CSV; and the
// figures a report derives from them.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/run_summary.pb.h"

namespace pstrain {

// One row of evals.csv.
struct EvalSample {
  int64_t step = 0;            // the chief's steps before it
  double train_seconds = 0;    // the chief's training seconds before it (evaluation excluded)
  double accuracy = 0;         // 0..1, on the 10k test set
  double loss = 0;
  // train_seconds plus the time the gradients that other workers applied
  // during earlier evaluation pauses would have taken (AdjustForPauses):
  // the time axis of the reports, fair to every mode.
  double seconds = 0;
};

// One row of steps_worker<r>.csv.
struct StepRow {
  int64_t step = 0;
  double end_unix_s = 0;    // when its push-pull returned
  double loss = 0;
  int64_t examples = 0;
  double compute_ms = 0;
  double comm_ms = 0;
  // -1 in the CSV of a version that did not write them.
  double wait_ms = -1;      // of comm_ms: the ps held the push back
  double ahead_ms = -1;     // of compute_ms: the next step's forward, run during the push/pull

  double start_unix_s() const { return end_unix_s - (compute_ms + comm_ms) * 1e-3; }
};

// Training loss at one step (per-worker step index).
struct LossSample {
  int64_t step = 0;
  double loss = 0;
};

// Throughput with the chief's evaluation pauses left out in every mode.
// summary.json leaves them out only where everybody waits (sync, ssp); in
// async the others train on, so its figure would fall with every added
// evaluation. Here a pause is the gap between the chief's steps around an
// evaluation; the steps of other workers that lie inside one are set apart
// (`gradients_during_pauses`: what the accuracy curve, whose time axis
// leaves the pauses out, got for free; steps that straddle a pause's edge
// are not counted, so it is a lower bound).
struct Throughput {
  double images_per_sec = 0;
  double train_seconds = 0;         // first step to last, pauses left out
  double pause_seconds = 0;
  int64_t gradients_during_pauses = 0;
  int64_t gradients = 0;            // rows of all workers
  double gradients_per_sec = 0;     // outside the pauses
};
struct RunRecord {
  std::string label;              // "ssp:2", "1 ps, 4 workers"
  std::string run_dir;
  absl::Status status;            // why the run failed; OK if it finished
  proto::RunSummary summary;      // valid when status is OK
  std::vector<EvalSample> evals;
  std::vector<std::vector<StepRow>> steps;  // by worker rank; rank 0 is the chief
  int64_t eval_every_steps = 0;   // what the run was given (0: epoch ends only)
  Throughput throughput;          // MeasureThroughput(steps, evals)
};

// Reads summary.json, evals.csv and steps_worker<r>.csv for every rank the
// summary names into `record`. NotFound / DataLoss naming the file.
absl::Status ReadRunDir(const std::string& run_dir, RunRecord* record);

// The test accuracies whose time the reports give (time to 95% ... 99%).
inline constexpr double kAccuracyTargets[] = {0.95, 0.97, 0.98, 0.99};

// kAccuracyTargets and `target` (--target_accuracy), ascending, once each.
std::vector<double> ReportedTargets(double target);

// A run whose final test accuracy is this far below its reference (scale:
// the fewest workers' with the same ps; compare: the best mode's) lost the
// model: the reports say so as a finding, not as one more row.
inline constexpr double kCollapseGap = 0.05;

// The first evaluation's `seconds` at which accuracy >= target;
// nullopt if no evaluation reached it (the rule summary.json's
// seconds_to_95/97/98/99 follow).
std::optional<double> SecondsToAccuracy(const std::vector<EvalSample>& evals, double target);

// The mean loss per step over the workers' rows; non-finite losses (a
// worker's empty last batch) are skipped.
std::vector<LossSample> MeanLossByStep(const std::vector<std::vector<StepRow>>& steps);

// Trailing moving average over `window` samples (window >= 1).
std::vector<LossSample> MovingAverage(const std::vector<LossSample>& loss, int window);

Throughput MeasureThroughput(const std::vector<std::vector<StepRow>>& steps,
                             const std::vector<EvalSample>& evals);

// Images/s once training is steady: each worker's images over its own
// window, from the end of the first tenth of its steps (the warm-up) to
// the end of its last, the chief's evaluation pauses left out; summed over
// the workers. (A window common to every worker would cut a short sync
// run's last round: up to one step of each worker but one.)
// `throughput.images_per_sec` when a worker has too few steps.
double SteadyImagesPerSecond(const RunRecord& record);

// Sets each evaluation's `seconds`: its train_seconds plus, for the
// gradients other workers applied inside the pauses before it, the time they
// would have taken at the run's pause-free rate. In sync nobody trains during
// a pause and nothing changes; in async the curve no longer gains from the
// chief's evaluations.
void AdjustForPauses(const std::vector<std::vector<StepRow>>& steps, const Throughput& throughput,
                     std::vector<EvalSample>* evals);

}  // namespace pstrain

#pragma once

// The records of a `pstrain chaos` experiment and its report: report.md (a
// table with one row per run, then the totals) and report.json (the same,
// for scripts). Pure functions of the records, so tests can check the text.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "launcher/experiments/experiment.h"
#include "launcher/supervisor/launch.h"

namespace pstrain {

// One run of a chaos experiment.
struct ChaosRunRecord {
  std::string name;                // "baseline", "run-001"
  std::string run_dir;
  std::vector<Fault> planned;      // in time order
  std::vector<FaultRecord> sent;   // the planned faults that were sent (a task not running gets none)
  absl::Status status;             // how the launch ended: DeadlineExceeded is a hang
  int restarts = 0;                // the launcher's, whatever the outcome
  double wall_s = 0;               // the launch's wall time, whatever the outcome
  // From the run's summary.json; meaningful when status is OK.
  int updates_lost = 0;
  int recoveries = 0;
  double accuracy = 0;             // final test accuracy, 0..1
};

struct ChaosTotals {
  int runs = 0;          // runs with faults (the baseline is not one)
  int hangs = 0;         // runs that ended DeadlineExceeded
  int failed = 0;        // runs that ended in another error
  int restarts = 0;      // over every run with faults
  int updates_lost = 0;  // over the runs that finished
  // Final test accuracy minus the baseline's, over the runs that finished;
  // nullopt when none did.
  std::optional<double> accuracy_diff_min, accuracy_diff_median, accuracy_diff_max;
  double baseline_accuracy = 0;
};

struct ChaosResult {
  ChaosRunRecord baseline;
  std::vector<ChaosRunRecord> runs;
  ChaosTotals totals;
};

// The totals of `runs` against `baseline` (a median of an even count is the
// mean of the middle two).
ChaosTotals SumUpChaos(const ChaosRunRecord& baseline, const std::vector<ChaosRunRecord>& runs);

// What a report states besides the runs.
struct ChaosReportFacts {
  std::string command_line;
  std::string date;                 // RFC 3339, UTC
  MachineInfo machine;
  std::vector<std::string> facts;   // the cluster, the training, the fault plan, ...
};

// "ok", "hang: <message>" or "failed: <message>".
std::string DescribeRunOutcome(const absl::Status& status);

// A run's faults: "kill worker:1 at 3.2 s", each planned one that was not
// sent followed by "(not sent)".
std::string DescribeRunFaults(const ChaosRunRecord& run);

std::string ChaosReportMarkdown(const ChaosReportFacts& facts, const ChaosResult& result);
std::string ChaosReportJson(const ChaosReportFacts& facts, const ChaosResult& result);

// One line: "chaos: 10 runs, 0 hangs, 0 failed runs, 12 restarts, 340
// updates lost; accuracy vs baseline 0.9712: min -0.0123, median -0.0040,
// max +0.0010".
std::string ChaosTotalsLine(const ChaosTotals& totals);

}  // namespace pstrain

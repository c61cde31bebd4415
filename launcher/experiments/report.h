#pragma once

// Markdown reports of experiments: the facts every report states, tables,
// figures, and `pstrain compare`'s results. Pure functions of what the runs
// left, so tests can check the text.

#include <string>
#include <vector>

#include "launcher/experiments/experiment.h"
#include "launcher/reporting/markdown.h"
#include "launcher/reporting/plot.h"
#include "launcher/reporting/run_record.h"

namespace pstrain {

// "# title", the command that made the report, the machine, then `facts`
// as a bullet list.
std::string ReportPreamble(const std::string& title, const std::string& command_line,
                           const MachineInfo& machine, const std::vector<std::string>& facts);

// SGD's default learning rate in `mode` as a formula of the worker count
// and the momentum (worker/train_options.h): "0.01 x workers" for sync,
// "0.02 x (1 - momentum) x min(workers, 12 / (workers - 1))" for async and
// ssp, with the given words in their places.
std::string DescribeSgdDefaultRate(const std::string& mode, const std::string& workers,
                                   const std::string& workers_less_one, const std::string& momentum);

// "0.02 (0.01 x 2 workers, sync's default)", "0.0342857 (0.02 x (1 -
// momentum 0) x min(8, 12 / 7), async's default)" or "0.05 (--lr)".
std::string DescribeLearningRate(const proto::RunSummary& summary, bool lr_given);

// The sentence on --straggler: "worker:1 slowed by 40 ms per step" or "none".
std::string DescribeStraggler(const ExperimentOptions& options);

// `pstrain compare`'s table: one row per mode; a failed run's row says so.
// `targets`: the accuracies whose time is a column (ReportedTargets).
std::string CompareTable(const std::vector<RunRecord>& runs, const std::vector<double>& targets);

// A few plain facts from the table: the best final accuracy, the fastest to
// 95% and 97%, the highest throughput.
// A mode that ended kCollapseGap or more below the best one is a finding,
// first.
std::vector<std::string> CompareHighlights(const std::vector<RunRecord>& runs,
                                           const std::vector<double>& targets);

// "Evaluation pauses:" one line per run: how long the chief's evaluations
// paused it and how many gradients the others applied meanwhile.
std::string EvaluationCost(const std::vector<RunRecord>& runs);

// Test accuracy against the chief's training seconds, one line per run,
// with the 95% and 97% marks.
LineChart AccuracyChart(const std::vector<RunRecord>& runs);

// What the columns and axes mean (shared by both commands' reports).
std::string HowToRead(bool with_staleness);

}  // namespace pstrain

#pragma once

// `pstrain scale`'s numbers and tables: speedup and scaling efficiency over
// the fewest workers with the same number of ps, and the notes that say
// when the workers outnumber the machine's cores.

#include <optional>
#include <string>
#include <vector>

#include "launcher/experiments/experiment.h"
#include "launcher/plan/plan.h"
#include "launcher/reporting/run_record.h"

namespace pstrain {

// One cell of the (ps, workers) matrix and the run that measured it.
struct ScaleCell {
  int ps = 1;
  int workers = 1;
  RunRecord record;
  std::optional<CheckRow> prediction;  // `pstrain plan`'s, for a finished run
};

struct Scaling {
  int baseline_workers = 0;           // the fewest workers with the same ps
  std::optional<double> speedup;      // images/s over the baseline's
  std::optional<double> efficiency;   // speedup / (workers / baseline_workers)
};

// Scaling of each cell (same order). A cell whose run or baseline failed,
// or whose baseline measured no throughput, has no speedup.
std::vector<Scaling> ComputeScaling(const std::vector<ScaleCell>& cells);

// "" when the cell fits the machine, else what oversubscribes it:
// "4 workers > 2 cores" or "1 ps + 2 workers > 2 cores".
std::string CoreNote(int ps, int workers, int cores);

// The table: ps, workers, lr, images/s, predicted images/s, speedup,
// efficiency, time to each of `targets` (ReportedTargets), final accuracy,
// note (a lost model, an oversubscribed machine).
std::string ScaleTable(const std::vector<ScaleCell>& cells, int cores, const std::vector<double>& targets);

// For each cell (same order): how far its final test accuracy fell below
// that of the fewest workers with the same ps, when it fell kCollapseGap or
// more (a lost model); nullopt otherwise, and for failed cells.
std::vector<std::optional<double>> AccuracyLost(const std::vector<ScaleCell>& cells);

// The cells with a prediction: ps, workers, measured images/s once steady,
// predicted, error, what bounds the cell; "" when none has one.
std::string PredictionTable(const std::vector<ScaleCell>& cells);

// Plain sentences: a finding for each cell that lost the model (first), the
// machine, the cells that oversubscribe it, and per ps count the throughput
// and speedup at the most workers.
std::vector<std::string> ScaleSummary(const std::vector<ScaleCell>& cells, const MachineInfo& machine);

}  // namespace pstrain

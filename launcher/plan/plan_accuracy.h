#pragma once

// `pstrain plan`'s time to a test accuracy: the images a calibration run of
// the same mode had trained on when it first reached the target, over a
// cell's predicted images/s.
//
// It assumes that the images needed to reach the target do not depend on
// the worker and ps counts of the mode: the curve of the calibration run
// with the nearest worker count stands for every cell. That holds while
// the defaults' learning rate keeps a step's progress per image (sync's
// linear scaling, async's staleness-bounded step; docs/training.md) and fails
// beyond: sync with fewer, larger updates than the run had, async with more
// staleness. So the further a cell's worker count is from a calibration
// run's of its mode, the more optimistic its time; a run of each mode near
// the counts asked about fixes that.

#include <optional>
#include <string>
#include <vector>

#include "launcher/plan/plan_calibration.h"

namespace pstrain {

// What one calibration run says about the target.
struct AccuracyCurve {
  std::string run_dir;
  bool sync = true;
  int workers = 1;
  double images = 0;  // every worker's images before the first evaluation at or above the target
};

// The runs whose evaluations reached `target`, one curve each.
std::vector<AccuracyCurve> CurvesToTarget(const std::vector<CalibrationRun>& runs, double target);

// The curve for a cell of `sync`'s mode with `workers` workers: the run of
// that mode with the nearest worker count (by ratio; a tie goes to the
// larger count, which is the less optimistic), a run of one worker counting
// for either mode (one worker is the same job in both); nullopt when no
// such run reached the target.
std::optional<AccuracyCurve> CurveFor(const std::vector<AccuracyCurve>& curves, bool sync, int workers);

}  // namespace pstrain

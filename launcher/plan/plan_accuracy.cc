#include "launcher/plan/plan_accuracy.h"

#include <cmath>

namespace pstrain {

std::vector<AccuracyCurve> CurvesToTarget(const std::vector<CalibrationRun>& runs, double target) {
  std::vector<AccuracyCurve> out;
  for (const CalibrationRun& r : runs) {
    const proto::RunSummary& s = r.record.summary;
    for (const EvalSample& e : r.record.evals) {
      if (e.accuracy < target) continue;
      out.push_back({r.run_dir, r.sync, s.num_workers(),
                     static_cast<double>(e.step) * s.batch_size() * s.num_workers()});
      break;
    }
  }
  return out;
}

std::optional<AccuracyCurve> CurveFor(const std::vector<AccuracyCurve>& curves, bool sync, int workers) {
  std::optional<AccuracyCurve> best;
  double best_distance = 0;
  for (const AccuracyCurve& c : curves) {
    if ((c.sync != sync && c.workers != 1) || c.workers < 1) continue;
    const double distance = std::fabs(std::log(static_cast<double>(c.workers) / workers));
    if (!best || distance < best_distance || (distance == best_distance && c.workers > best->workers)) {
      best = c;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace pstrain

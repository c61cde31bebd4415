// `pstrain plan`'s time to accuracy: which evaluation of which calibration
// run stands for a cell (no processes).

#include "launcher/plan/plan_accuracy.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

CalibrationRun Calibration(const std::string& dir, bool sync, int workers, std::vector<EvalSample> evals) {
  CalibrationRun r;
  r.run_dir = dir;
  r.sync = sync;
  r.record.summary.set_num_workers(workers);
  r.record.summary.set_batch_size(128);
  r.record.evals = std::move(evals);
  return r;
}

TEST(PlanAccuracy, TheImagesBeforeTheFirstEvaluationAtTheTarget) {
  const std::vector<CalibrationRun> runs = {
      Calibration("s2", true, 2, {{100, 5, 0.95, 0, 5}, {200, 9, 0.975, 0, 9}, {300, 14, 0.97, 0, 14}}),
      Calibration("a4", false, 4, {{100, 5, 0.96, 0, 5}}),  // never 97%
      Calibration("s8", true, 8, {{50, 4, 0.971, 0, 4}})};
  const std::vector<AccuracyCurve> curves = CurvesToTarget(runs, 0.97);
  ASSERT_EQ(curves.size(), 2u);
  EXPECT_EQ(curves[0].run_dir, "s2");
  EXPECT_EQ(curves[0].images, 200.0 * 128 * 2);  // the chief's steps x the global batch
  EXPECT_EQ(curves[1].images, 50.0 * 128 * 8);
  EXPECT_TRUE(CurvesToTarget(runs, 0.99).empty());
}

TEST(PlanAccuracy, ACellTakesItsModesNearestWorkerCount) {
  const std::vector<AccuracyCurve> curves = {
      {"s2", true, 2, 1}, {"s8", true, 8, 2}, {"a4", false, 4, 3}};
  EXPECT_EQ(CurveFor(curves, true, 1)->run_dir, "s2");
  EXPECT_EQ(CurveFor(curves, true, 3)->run_dir, "s2");   // 3/2 < 8/3
  EXPECT_EQ(CurveFor(curves, true, 4)->run_dir, "s8");   // a tie (x2 either way): the larger count
  EXPECT_EQ(CurveFor(curves, true, 64)->run_dir, "s8");
  EXPECT_EQ(CurveFor(curves, false, 64)->run_dir, "a4");
  EXPECT_FALSE(CurveFor({{"s2", true, 2, 1}}, false, 4).has_value());
  // One worker is the same job in every mode.
  const std::vector<AccuracyCurve> with_one = {{"s1", true, 1, 1}, {"a8", false, 8, 2}};
  EXPECT_EQ(CurveFor(with_one, false, 1)->run_dir, "s1");
  EXPECT_EQ(CurveFor(with_one, false, 2)->run_dir, "s1");  // x2 against x4
  EXPECT_EQ(CurveFor(with_one, false, 4)->run_dir, "a8");
  EXPECT_EQ(CurveFor(with_one, true, 8)->run_dir, "s1");
}

}  // namespace
}  // namespace pstrain

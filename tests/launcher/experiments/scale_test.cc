// `pstrain scale`'s numbers without processes: speedup, efficiency, the
// notes on an oversubscribed machine, the table and the generated specs.

#include "launcher/experiments/scale.h"

#include "absl/strings/str_split.h"
#include "common/cluster_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/experiments/report_scale.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ScaleCell Cell(int ps, int workers, double images_per_sec) {
  ScaleCell c{ps, workers, {}, std::nullopt};
  c.record.label = absl::StrCat(ps, " ps, ", workers, " workers");
  c.record.throughput.images_per_sec = images_per_sec;
  c.record.summary.set_learning_rate(0.01 * workers);
  c.record.summary.set_final_test_accuracy(0.97);
  return c;
}

TEST(Scale, ParsesCountListsSortedAndDistinct) {
  EXPECT_THAT(*ParseCountList("4,1, 2,2", "workers", 8), ElementsAre(1, 2, 4));
  for (const char* bad : {"", "0", "1,x", "9", "-1"}) EXPECT_FALSE(ParseCountList(bad, "workers", 8).ok()) << bad;
}

TEST(Scale, SpeedupAndEfficiencyAreOverTheFewestWorkersWithTheSamePs) {
  const std::vector<ScaleCell> cells = {Cell(1, 1, 1000), Cell(1, 2, 1800), Cell(1, 4, 2000),
                                        Cell(2, 2, 2000), Cell(2, 4, 3000)};
  const std::vector<Scaling> s = ComputeScaling(cells);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_DOUBLE_EQ(*s[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(*s[1].speedup, 1.8);
  EXPECT_DOUBLE_EQ(*s[1].efficiency, 0.9);
  EXPECT_DOUBLE_EQ(*s[2].efficiency, 0.5);
  EXPECT_EQ(s[3].baseline_workers, 2);  // no 1-worker run with 2 ps
  EXPECT_DOUBLE_EQ(*s[4].speedup, 1.5);
  EXPECT_DOUBLE_EQ(*s[4].efficiency, 0.75);
}

TEST(Scale, AFailedBaselineLeavesNoSpeedup) {
  std::vector<ScaleCell> cells = {Cell(1, 1, 1000), Cell(1, 2, 1800)};
  cells[0].record.status = absl::AbortedError("worker:0 failed");
  EXPECT_FALSE(ComputeScaling(cells)[1].speedup.has_value());
  const std::string table = ScaleTable(cells, 2, ReportedTargets(0.97));
  EXPECT_THAT(table, HasSubstr("| 1 | 1 |  | failed |"));
  EXPECT_THAT(table, HasSubstr("| 1 | 2 | 0.02 | 1800 | - | - | - |"));  // no prediction, no speedup
}

TEST(Scale, ThePredictedColumnStandsBesideTheMeasuredOne) {
  std::vector<ScaleCell> cells = {Cell(1, 1, 1000), Cell(1, 2, 1800)};
  CheckRow p;
  p.predicted = 1750;
  p.measured = 1820;
  p.error = 1750.0 / 1820 - 1;
  p.bound = "host CPU";
  cells[1].prediction = p;
  EXPECT_THAT(ScaleTable(cells, 2, ReportedTargets(0.97)), HasSubstr("| 1 | 2 | 0.02 | 1800 | 1750 | 1.80x | 0.90 |"));
  EXPECT_THAT(PredictionTable(cells), HasSubstr("| 1 | 2 | 1820 | 1750 | -3.8% | host CPU |"));
  EXPECT_EQ(PredictionTable({Cell(1, 1, 1000)}), "");
}

TEST(Scale, SaysPlainlyWhenWorkersOutnumberTheCores) {
  EXPECT_EQ(CoreNote(1, 1, 2), "");
  EXPECT_EQ(CoreNote(1, 2, 2), "1 ps + 2 workers > 2 cores");
  EXPECT_EQ(CoreNote(1, 4, 2), "4 workers > 2 cores");
  const std::vector<ScaleCell> cells = {Cell(1, 1, 1000), Cell(1, 2, 1800), Cell(1, 4, 2000)};
  const std::vector<std::string> summary = ScaleSummary(cells, {"Xeon", 2});
  ASSERT_GE(summary.size(), 2u);
  EXPECT_THAT(summary[0], HasSubstr("In 1 ps/4 workers the workers outnumber the cores"));
  EXPECT_THAT(summary[1], HasSubstr("With 1 ps, 4 workers train 2000 images/s: 2.00x"));
  const std::vector<std::string> lines = absl::StrSplit(ScaleTable(cells, 2, ReportedTargets(0.97)), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_THAT(lines[0], HasSubstr("speedup over 1 worker"));
  EXPECT_EQ(lines[4], "| 1 | 4 | 0.04 | 2000 | - | 2.00x | 0.50 | not reached | not reached | not reached | not reached | "
            "0.9700 | 4 workers > 2 cores |");
}

// A cell far below the fewest workers' accuracy lost the model: its note
// and a finding say so, first; a small loss is no finding. --target_accuracy
// adds its column.
TEST(Scale, ALostModelIsAFindingAndTheTargetAColumn) {
  std::vector<ScaleCell> cells = {Cell(1, 1, 1000), Cell(1, 4, 2000), Cell(1, 8, 3000)};
  cells[0].record.summary.set_final_test_accuracy(0.9145);
  cells[1].record.summary.set_final_test_accuracy(0.8700);  // 0.0445: no finding
  cells[2].record.summary.set_final_test_accuracy(0.4380);
  cells[2].record.summary.set_mean_staleness(6.8);
  const std::vector<std::optional<double>> lost = AccuracyLost(cells);
  EXPECT_FALSE(lost[0].has_value());
  EXPECT_FALSE(lost[1].has_value());
  ASSERT_TRUE(lost[2].has_value());
  EXPECT_NEAR(*lost[2], 0.4765, 1e-12);
  const std::vector<std::string> summary = ScaleSummary(cells, {"Xeon", 16});
  ASSERT_EQ(summary.size(), 3u);
  EXPECT_THAT(summary[0], HasSubstr("**Finding: with 1 ps, 8 workers lost the model**: final test "
                                    "accuracy 0.4380, 0.48 below"));
  EXPECT_THAT(summary[0], HasSubstr("mean staleness 6.8"));
  const std::string table = ScaleTable(cells, 16, ReportedTargets(0.9));
  EXPECT_THAT(table, HasSubstr("| time to 90% | time to 95% |"));
  EXPECT_THAT(table, HasSubstr("| 0.4380 | **model lost: 0.48 below 1 worker** |"));
  EXPECT_THAT(table, HasSubstr("| 0.8700 |  |"));
  EXPECT_EQ(ReportedTargets(0.97).size(), 4u);  // already among 95-99%
  EXPECT_THAT(ReportedTargets(0.975), ElementsAre(0.95, 0.97, 0.975, 0.98, 0.99));
}

TEST(Scale, GeneratesLocalSpecsTheClusterParserAccepts) {
  auto spec = ClusterSpec::FromJson(LocalSpecJson(2, 4), "generated");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->num_ps(), 2);
  EXPECT_EQ(spec->num_workers(), 4);
  EXPECT_EQ(spec->ChiefTask().ToString(), "worker:0");
}

}  // namespace
}  // namespace pstrain

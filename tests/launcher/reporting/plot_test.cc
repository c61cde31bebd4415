// Charts: the gnuplot scripts and data we generate, and drawing them with
// the real gnuplot (a PNG appears) or without it (a clear NotFound and a
// note, the files still written).

#include "launcher/reporting/plot.h"

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

LineChart TwoLines() {
  LineChart c;
  c.name = "acc";
  c.title = "Test accuracy";
  c.x_label = "seconds";
  c.y_label = "accuracy";
  c.series = {{"sync", {{1, 0.5}, {2, 0.9}}, false, 0},
              {"empty", {}, false, 0},
              {"ssp:2", {{1.5, 0.7}}, true, 5}};
  c.y_max = 1.0;
  c.y_marks = {{0.97, "97%"}};
  return c;
}

TEST(Plot, LineChartDataHasOneIndexedBlockPerNonEmptySeries) {
  EXPECT_EQ(LineChartData(TwoLines()), "# sync\n1 0.5\n2 0.9\n\n\n# ssp:2\n1.5 0.7\n\n\n");
}

TEST(Plot, LineChartScriptWritesAPngAndPlotsEachSeries) {
  const std::string gp = LineChartScript(TwoLines());
  EXPECT_THAT(gp, HasSubstr("set terminal pngcairo"));
  EXPECT_THAT(gp, HasSubstr("set output 'acc.png'"));
  EXPECT_THAT(gp, HasSubstr("set yrange [*:1]"));
  EXPECT_THAT(gp, HasSubstr("'acc.dat' index 0 using 1:2 with linespoints"));
  EXPECT_THAT(gp, HasSubstr("'' index 1 using 1:2 with linespoints pt 7 ps 0.7 lw 2 lc 5 dt 2 title 'ssp:2'"));
  EXPECT_THAT(gp, HasSubstr("0.97 with lines dt 3 lw 1 lc rgb 'gray40' title '97%'"));
  EXPECT_THAT(gp, Not(HasSubstr("'empty'")));
}

TEST(Plot, BarChartLabelsEveryKthCategory) {
  BarChart c{"hist", "Staleness", "staleness", "fraction", {"0", "1", "2"}, {"sync", "async"},
             {{1, 0, 0}, {0.5, 0.25, 0.25}}, 2};
  EXPECT_EQ(BarChartData(c), "# category sync async\n\"0\" 1 0.5\n\"1\" 0 0.25\n\"2\" 0 0.25\n");
  const std::string gp = BarChartScript(c);
  EXPECT_THAT(gp, HasSubstr("set style histogram clustered"));
  EXPECT_THAT(gp, HasSubstr("using 2:xticlabels(int($0) % 2 == 0 ? stringcolumn(1) : '')"));
  EXPECT_THAT(gp, HasSubstr("'' using 3 lc 2 title 'async'"));
}

TEST(Plot, QuotesForGnuplot) { EXPECT_EQ(GnuplotQuote("it's\nx"), "'it''s x'"); }

TEST(Plot, DrawsARealPngWithGnuplot) {
  if (!FileExists("/usr/bin/gnuplot")) GTEST_SKIP() << "gnuplot is not installed";
  const std::string dir = testing::MakeTempDir("plot");
  FigureDrawer drawer(dir, "plots", "gnuplot");
  drawer.Add(TwoLines(), "accuracy");
  drawer.Add(BarChart{"hist", "t", "x", "y", {"0", "1"}, {"a"}, {{0.5, 0.5}}, 1}, "histogram");
  EXPECT_TRUE(drawer.notes().empty()) << drawer.notes().front();
  ASSERT_EQ(drawer.figures().size(), 2u);
  EXPECT_EQ(drawer.figures()[0].path, "plots/acc.png");
  auto png = ReadFileToString(dir + "/acc.png");
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(png->substr(0, 4), "\x89PNG");
}

TEST(Plot, WithoutGnuplotSaysSoOnceAndStillWritesTheFiles) {
  const std::string dir = testing::MakeTempDir("noplot");
  FigureDrawer drawer(dir, "plots", "/nonexistent/gnuplot");
  drawer.Add(TwoLines(), "accuracy");
  LineChart second = TwoLines();
  second.name = "second";
  drawer.Add(second, "second");
  EXPECT_TRUE(drawer.figures().empty());
  ASSERT_EQ(drawer.notes().size(), 1u);
  EXPECT_THAT(drawer.notes()[0], HasSubstr("cannot run /nonexistent/gnuplot"));
  EXPECT_THAT(drawer.notes()[0], HasSubstr("apt-get install gnuplot-nox"));
  EXPECT_TRUE(FileExists(dir + "/second.gp"));
  EXPECT_TRUE(FileExists(dir + "/second.dat"));
}

TEST(Plot, AGnuplotErrorNamesTheScriptAndItsLog) {
  if (!FileExists("/usr/bin/gnuplot")) GTEST_SKIP() << "gnuplot is not installed";
  const std::string dir = testing::MakeTempDir("badplot");
  ASSERT_TRUE(WriteFileAtomic(dir + "/bad.gp", "plot 'missing.dat'\n").ok());
  const absl::Status s = RunGnuplot("gnuplot", dir, "bad");
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad.gp"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad.log"));
}

TEST(Plot, AChartWithoutDataIsNotDrawn) {
  LineChart c = TwoLines();
  c.series.clear();
  EXPECT_FALSE(HasData(c));
  EXPECT_TRUE(absl::IsFailedPrecondition(WriteChart(testing::MakeTempDir("nodata"), c)));
}

}  // namespace
}  // namespace pstrain

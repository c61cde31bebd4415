// `pstrain compare` and `pstrain scale` end to end on real processes: short
// runs, then the report, its rows and its plots (or, without gnuplot, the
// tables and a note that says why there are no plots).

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr double kTimeoutS = 300;

struct Finished {
  int exit_code = -1;
  std::string output;
  std::string report;
};

Finished RunPstrain(const std::string& out, std::vector<std::string> args) {
  args.insert(args.end(), {"--out=" + out, "--data_dir=" + testing::SourcePath("data/mnist"), "--device=cpu",
                           "--peer_timeout_s=30"});
  auto p = testing::RunningProcess::Start(testing::BinaryPath("pstrain"), args);
  Finished f;
  if (p == nullptr) return f;
  auto code = p->Wait(kTimeoutS);
  f.exit_code = code.ok() ? *code : -1000;
  f.output = p->output();
  auto report = ReadFileToString(out + "/report.md");
  if (report.ok()) f.report = *report;
  return f;
}

TEST(CompareCommand, WritesOneRowPerModeAndThePlots) {
  const std::string dir = testing::MakeTempDir("compare");
  const Finished f = RunPstrain(dir + "/out", {"compare", "--cluster_spec=" + testing::WriteLocalSpec(dir, 1, 2),
                                               "--modes=sync,ssp:1", "--max_steps=20",
                                               "--straggler=worker:1:delay_ms=5"});
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_THAT(f.output, HasSubstr("[1/2] sync: done, test acc"));
  EXPECT_THAT(f.output, HasSubstr("[2/2] ssp:1: done, test acc"));
  EXPECT_THAT(f.report, HasSubstr("pstrain compare --cluster_spec="));  // the command
  EXPECT_THAT(f.report, HasSubstr("- Machine: "));
  EXPECT_THAT(f.report, HasSubstr("- Straggler: worker:1 slowed by 5 ms per step"));
  EXPECT_THAT(f.report, HasSubstr("| sync | 0."));
  EXPECT_THAT(f.report, HasSubstr("| ssp:1 | 0."));
  EXPECT_TRUE(FileExists(dir + "/out/sync/summary.json"));
  EXPECT_TRUE(FileExists(dir + "/out/ssp-1/evals.csv"));
  if (FileExists("/usr/bin/gnuplot")) {
    for (const char* png : {"accuracy_vs_time", "loss_vs_step", "staleness_histogram"}) {
      EXPECT_TRUE(FileExists(absl::StrCat(dir, "/out/plots/", png, ".png"))) << png;
      EXPECT_THAT(f.report, HasSubstr(absl::StrCat("(plots/", png, ".png)")));
    }
  }
}

TEST(CompareCommand, RefusesABadModeBeforeRunningAnything) {
  const std::string dir = testing::MakeTempDir("badmode");
  const Finished f = RunPstrain(dir + "/out", {"compare", "--cluster_spec=" + testing::WriteLocalSpec(dir, 1, 2),
                                               "--modes=sync,ssp"});
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_THAT(f.output, HasSubstr("ssp needs its bound"));
  EXPECT_FALSE(FileExists(dir + "/out/report.md"));
}

TEST(ScaleCommand, WritesTheMatrixAndSaysWhyThereAreNoPlotsWithoutGnuplot) {
  const std::string dir = testing::MakeTempDir("scale");
  const Finished f = RunPstrain(dir + "/out", {"scale", "--workers=1,2", "--ps=1", "--mode=async",
                                               "--max_steps=20", "--gnuplot=/nonexistent/gnuplot"});
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_THAT(f.output, HasSubstr("[2/2] 1 ps, 2 workers: done"));
  EXPECT_THAT(f.report, HasSubstr("| 1 | 1 | 0.01 |"));  // lr 0.01 x 1 worker
  EXPECT_THAT(f.report, HasSubstr("| 1 | 2 | 0.02 |"));
  EXPECT_THAT(f.report, HasSubstr("| 1.00x | 1.00 |"));
  EXPECT_THAT(f.report, HasSubstr("No plots: cannot run /nonexistent/gnuplot"));
  EXPECT_TRUE(FileExists(dir + "/out/specs/ps1_w2.json"));
  EXPECT_TRUE(FileExists(dir + "/out/plots/throughput.gp"));
}

}  // namespace
}  // namespace pstrain

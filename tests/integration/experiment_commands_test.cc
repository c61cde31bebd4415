// `pstrain compare` and `pstrain scale` end to end on real processes: short
// runs, then the report, its rows and its plots (or, without gnuplot, the
// tables and a note that says why there are no plots); `pstrain plan` on a
// real run's directory.

#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/csv.h"
#include "common/file_util.h"
#include "common/json.h"
#include "proto/plan.pb.h"
#include "proto/run_summary.pb.h"
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
  // async's default lr: one worker's (sync's) alone, 0.02 x min(2, 12 / 1)
  // without momentum with two.
  EXPECT_THAT(f.report, HasSubstr("| 1 | 1 | 0.01 |"));
  EXPECT_THAT(f.report, HasSubstr("| 1 | 2 | 0.04 |"));
  EXPECT_THAT(f.report, HasSubstr("momentum 0 (0.5 with one worker); learning rate 0.02 x (1 - momentum) x "
                                  "min(workers, 12 / (workers - 1)), async's default"));
  EXPECT_THAT(f.report, HasSubstr("| 1.00x | 1.00 |"));
  // Predicted beside measured, calibrated from the first cell.
  EXPECT_THAT(f.report, HasSubstr("## Predicted against measured"));
  EXPECT_THAT(f.report, HasSubstr("calibrated from the matrix's first cell (1 ps, 1 worker)"));
  EXPECT_THAT(f.report, HasSubstr("(calibration run) |"));
  EXPECT_THAT(f.report, HasSubstr("No plots: cannot run /nonexistent/gnuplot"));
  EXPECT_TRUE(FileExists(dir + "/out/specs/ps1_w2.json"));
  EXPECT_TRUE(FileExists(dir + "/out/plots/throughput.gp"));
}

// A short real run: 1 ps, 1 worker, sync, mnist_cnn.
std::string CalibrationRun(const std::string& dir) {
  const std::string run = dir + "/run";
  const Finished f = RunPstrain(dir + "/unused", {"launch", "--cluster_spec=" + testing::WriteLocalSpec(dir, 1, 1),
                                                  "--free_ports", "--mode=sync", "--max_steps=200",
                                                  "--eval_every_steps=0", "--echo=none", "--run_dir=" + run});
  EXPECT_EQ(f.exit_code, 0) << f.output;
  return run;
}

TEST(PlanCommand, PredictsEveryCellFromARealRun) {
  const std::string dir = testing::MakeTempDir("plan");
  const std::string run = CalibrationRun(dir);
  // What the launcher records for the planner: each task's CPU over time,
  // and at its end, and the host's cores.
  const CsvTable cpu = ReadCsv(run + "/task_cpu.csv").value_or(CsvTable{});
  std::set<std::string> tasks;
  for (const auto& row : cpu.rows) tasks.insert(row[1]);
  EXPECT_EQ(tasks, (std::set<std::string>{"ps:0", "worker:0"}));
  proto::RunSummary summary;
  ASSERT_TRUE(ParseJsonMessage(ReadFileToString(run + "/summary.json").value_or(""), "summary", &summary).ok());
  EXPECT_GT(summary.host_cores(), 0);
  ASSERT_EQ(summary.tasks_size(), 2);
  for (const proto::TaskExit& t : summary.tasks()) EXPECT_GT(t.cpu_seconds(), 0) << t.task();

  const Finished f = RunPstrain(dir + "/plan", {"plan", "--calibrate=" + run, "--workers=1,2,4", "--ps=1,2",
                                                "--link_rate=1gbit", "--placement=host_per_task",
                                                "--target_accuracy=0.5"});
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_THAT(f.output, HasSubstr("12 cells predicted"));
  proto::PlanRecord plan;
  ASSERT_TRUE(ParseJsonMessage(ReadFileToString(dir + "/plan/plan.json").value_or(""), "plan.json", &plan).ok());
  EXPECT_EQ(plan.model(), "mnist_cnn");
  EXPECT_EQ(plan.params(), 21840);
  EXPECT_EQ(plan.calibration().runs(0), run);
  ASSERT_EQ(plan.cells_size(), 2 * 2 * 3);  // modes x ps x workers
  std::set<std::tuple<std::string, int, int>> seen;
  for (const proto::PlanCellRecord& c : plan.cells()) {
    seen.insert({c.mode(), c.ps(), c.workers()});
    EXPECT_EQ(c.link_rate(), "1gbit");
    EXPECT_GT(c.images_per_second(), 0);
    const proto::PlanSplitRecord& s = c.split();
    EXPECT_NEAR(s.compute_ms() + s.barrier_ms() + s.sharing_ms() + s.transfer_ms() + s.ps_ms() + s.other_ms() +
                    s.bound_ms(),
                c.step_ms(), 1e-6 * c.step_ms());
    EXPECT_EQ(c.ps_core_utilisation_size(), c.ps());
    EXPECT_EQ(c.push_bytes_per_step(), 4 * 21840);
    // Time to 50%: the run's images to it over the cell's images/s, in
    // both modes (one worker is the same job in either).
    EXPECT_GT(c.seconds_to_target(), 0);
    EXPECT_EQ(c.target_curve(), run);
  }
  EXPECT_EQ(plan.target_accuracy(), 0.5);
  EXPECT_EQ(seen.size(), 12u);
  const std::string md = ReadFileToString(dir + "/plan/plan.md").value_or("");
  EXPECT_THAT(md, HasSubstr("## sync"));
  EXPECT_THAT(md, HasSubstr("## async"));
  EXPECT_THAT(md, HasSubstr("| workers | ps | images/s |"));
  EXPECT_THAT(md, HasSubstr("| time to 50% |"));
  EXPECT_THAT(md, HasSubstr("## First to 50%"));
  EXPECT_THAT(md, HasSubstr("- 4 workers: "));
  EXPECT_TRUE(FileExists(dir + "/plan/plots/plan_sync.gp"));

  // A target no run reached: no times, and a note that says why.
  const Finished high = RunPstrain(dir + "/high", {"plan", "--calibrate=" + run, "--workers=1,2", "--ps=1",
                                                   "--mode=async", "--target_accuracy=0.999"});
  ASSERT_EQ(high.exit_code, 0) << high.output;
  const std::string high_md = ReadFileToString(dir + "/high/plan.md").value_or("");
  EXPECT_THAT(high_md, HasSubstr("No time to 99.9% in async: no async calibration run reached it"));
  EXPECT_THAT(high_md, HasSubstr("No calibration run reached 99.9% test accuracy"));

  // The run's own cell, predicted against what it measured.
  const Finished check = RunPstrain(dir + "/check", {"plan", "--calibrate=" + run, "--check=" + run});
  ASSERT_EQ(check.exit_code, 0) << check.output;
  EXPECT_THAT(check.output, HasSubstr("| mnist_cnn sync, 1 ps, 1 worker, no link limit (calibration) |"));
  EXPECT_TRUE(FileExists(dir + "/check/check.md"));

  // The same run as an older launcher left it, without task_cpu.csv and
  // its host's cores: the costs come from its step log, on the host
  // --runs_host_cores names.
  ASSERT_EQ(std::rename((run + "/task_cpu.csv").c_str(), (run + "/task_cpu.csv.hidden").c_str()), 0);
  std::string json = ReadFileToString(run + "/summary.json").value_or("");
  const size_t cores = json.find("\"host_cores\"");
  ASSERT_NE(cores, std::string::npos);
  json.erase(cores, json.find(',', cores) + 1 - cores);
  ASSERT_TRUE(WriteFileAtomic(run + "/summary.json", json).ok());
  const Finished old = RunPstrain(dir + "/old", {"plan", "--calibrate=" + run, "--workers=1,8", "--ps=1",
                                                 "--runs_host_cores=16", "--ps_share=0.5"});
  ASSERT_EQ(old.exit_code, 0) << old.output;
  const std::string old_md = ReadFileToString(dir + "/old/plan.md").value_or("");
  EXPECT_THAT(old_md, HasSubstr("the costs come from the step logs of its 1 1-worker run(s)"));
  EXPECT_THAT(old_md, HasSubstr("every task on one host of 16 cores"));
  const Finished bad_share = RunPstrain(dir + "/bad", {"plan", "--calibrate=" + run, "--ps_share=1.5"});
  EXPECT_EQ(bad_share.exit_code, 2) << bad_share.output;
  EXPECT_THAT(bad_share.output, HasSubstr("--ps_share"));
}

TEST(PlanCommand, RefusesBadFlagsWithExitCode2) {
  const std::string dir = testing::MakeTempDir("badplan");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"plan"}, "plan needs --calibrate"},
      {{"plan", "--calibrate=" + dir + "/nothing"}, "no summary.json"},
      {{"plan", "--calibrate=" + dir, "--mode=ssp"}, "--mode"},
      {{"plan", "--calibrate=" + dir, "--link_kind=netns"}, "--link_kind=netns needs --link_rate"},
      {{"plan", "--calibrate=" + dir, "--params=0"}, "--params"},
      {{"plan", "--calibrate=" + dir, "--workers=0"}, "--workers"},
  };
  for (const Case& c : cases) {
    const Finished f = RunPstrain(dir + "/out", c.args);
    EXPECT_EQ(f.exit_code, 2) << f.output;
    EXPECT_THAT(f.output, HasSubstr(c.message));
  }
  EXPECT_FALSE(FileExists(dir + "/out/plan.json"));
}

}  // namespace
}  // namespace pstrain

// `pstrain chaos` end to end on real processes: a baseline and two short
// async runs whose worker:1 is SIGKILLed, then report.md and report.json;
// and a sync job whose faults hit any task (ps, chief, worker; killed or
// frozen), which survives every one.

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

struct Finished {
  int exit_code = -1;
  std::string output;
};

Finished RunChaos(const std::string& out, std::vector<std::string> args,
                  const char* spec = "cluster_specs/local_1ps_2w.json") {
  args.insert(args.begin(), {"chaos", "--cluster_spec=" + testing::SourcePath(spec),
                             "--out=" + out, "--data_dir=" + testing::SourcePath("data/mnist"), "--device=cpu",
                             "--peer_timeout_s=30"});
  auto p = testing::RunningProcess::Start(testing::BinaryPath("pstrain"), args);
  Finished f;
  if (p == nullptr) return f;
  auto code = p->Wait(300);
  f.exit_code = code.ok() ? *code : -1000;
  f.output = p->output();
  return f;
}

TEST(ChaosCommand, RestartsKilledWorkersAndReportsEveryRun) {
  const std::string out = testing::MakeTempDir("chaos") + "/out";
  // Seed 1 puts the two kills at 13% and 55% of the training steps:
  // while worker:1 trains.
  const Finished f = RunChaos(out, {"--mode=async", "--runs=2", "--faults=kill", "--fault_targets=worker:1",
                                    "--max_faults_per_run=1", "--seed=1", "--max_steps=200"});
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_THAT(f.output, HasSubstr("fault plan (seed 1):\n  run-001: kill worker:1 at "));
  EXPECT_THAT(f.output, HasSubstr("[2/2] run-002: faults: kill worker:1 at "));
  EXPECT_THAT(f.output, HasSubstr("chaos: 2 runs, 0 hangs, 0 failed runs, 2 restarts, 0 updates lost; "
                                  "accuracy vs baseline 0."));

  const std::string md = *ReadFileToString(out + "/report.md");
  EXPECT_THAT(md, HasSubstr("pstrain chaos --cluster_spec="));  // the command
  EXPECT_THAT(md, HasSubstr("- Machine: "));
  EXPECT_THAT(md, HasSubstr("- Training: async, at most 200 steps per worker, seed 1, checkpoints every 50 steps"));
  EXPECT_THAT(md, HasSubstr("| baseline | none | ok | 0 | 0 | 0 | 0."));
  EXPECT_THAT(md, HasSubstr("| run-001 | kill worker:1 at "));
  EXPECT_THAT(md, HasSubstr("| run-002 | kill worker:1 at "));
  EXPECT_THAT(md, HasSubstr("- Hangs (no end within the run timeout): 0\n"));
  EXPECT_THAT(md, HasSubstr("- Restarts: 2\n"));

  auto json = ParseJson(*ReadFileToString(out + "/report.json"), "report.json");
  ASSERT_TRUE(json.ok()) << json.status();
  const auto& runs = json->struct_value().fields().at("runs").list_value().values();
  ASSERT_EQ(runs.size(), 2);
  for (const auto& run : runs) {
    const auto& r = run.struct_value().fields();
    EXPECT_EQ(r.at("outcome").string_value(), "ok") << r.at("error").string_value();
    EXPECT_EQ(r.at("restarts").number_value(), 1);
    EXPECT_GT(r.at("final_test_accuracy").number_value(), 0.5);
    const auto& fault = r.at("faults").list_value().values(0).struct_value().fields();
    EXPECT_TRUE(fault.at("sent").bool_value());
  }
  EXPECT_EQ(json->struct_value().fields().at("totals").struct_value().fields().at("hangs").number_value(), 0);
  for (const char* file : {"/baseline/summary.json", "/run-001/summary.json", "/run-002/checkpoints"}) {
    EXPECT_TRUE(FileExists(out + file)) << file;
  }
  EXPECT_THAT(*ReadFileToString(out + "/run-001/logs/worker-1.log"),
              HasSubstr("----- restarted (1 of 3) after: killed by signal 9 -----"));
}

TEST(ChaosCommand, ASyncJobSurvivesKillsAndStopsOfAnyTask) {
  const std::string out = testing::MakeTempDir("chaossync") + "/out";
  // Seed 4: three runs whose faults hit a ps, the chief and a worker (the
  // plan is printed first and checked below). --peer_timeout_s given last
  // wins over RunChaos's 30 s: a frozen task is declared dead in 3 s.
  const Finished f = RunChaos(out, {"--mode=sync", "--runs=3", "--faults=kill,stop", "--seed=4",
                                    "--max_steps=200", "--peer_timeout_s=3"},
                              "cluster_specs/local_2ps_2w.json");
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_THAT(f.output, HasSubstr("chaos: 3 runs, 0 hangs, 0 failed runs"));
  const std::string plan = f.output.substr(0, f.output.find("[1/3]"));
  EXPECT_THAT(plan, HasSubstr("ps:"));
  auto json = ParseJson(*ReadFileToString(out + "/report.json"), "report.json");
  ASSERT_TRUE(json.ok()) << json.status();
  for (const auto& run : json->struct_value().fields().at("runs").list_value().values()) {
    const auto& r = run.struct_value().fields();
    EXPECT_EQ(r.at("outcome").string_value(), "ok") << r.at("error").string_value();
    // Sync recomputes what a rollback undid: the model ends where the
    // undisturbed run's did, give or take a frozen worker's skipped batches.
    EXPECT_GT(r.at("final_test_accuracy").number_value(), 0.8);
  }
}

TEST(ChaosCommand, RefusesBadFaultFlagsBeforeRunningAnything) {
  const std::string dir = testing::MakeTempDir("badchaos");
  Finished f = RunChaos(dir + "/a", {"--faults=kill,nap"});
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_THAT(f.output, HasSubstr("--faults: \"nap\""));
  f = RunChaos(dir + "/b", {"--fault_targets=ps:3"});
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_THAT(f.output, HasSubstr("--fault_targets: \"ps:3\" names no task"));
  EXPECT_FALSE(FileExists(dir + "/b/baseline"));
}

}  // namespace
}  // namespace pstrain

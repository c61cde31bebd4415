// `pstrain chaos` without processes: the fault plan (a function of the
// seed, within its stated bounds), the fault targets, and the report
// rendered from given run records.

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/cluster_spec.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/chaos/chaos.h"
#include "launcher/chaos/chaos_report.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

const TaskId kPs0{TaskType::kPs, 0};
const TaskId kWorker0{TaskType::kWorker, 0};
const TaskId kWorker1{TaskType::kWorker, 1};

FaultPlanOptions PlanOptions(uint64_t seed) {
  FaultPlanOptions o;
  o.seed = seed;
  o.runs = 400;
  o.tasks = {kPs0, kWorker0, kWorker1};
  o.baseline_s = 10;
  o.peer_timeout_s = 5;
  return o;
}

std::vector<std::string> Described(const std::vector<std::vector<Fault>>& plan) {
  std::vector<std::string> out;
  for (const auto& run : plan) {
    std::string line;
    for (const Fault& f : run) {
      line += DescribeFault(f) + absl::StrFormat(" [%.17g %.17g %.17g]; ", f.at_progress, f.at_s, f.stop_s);
    }
    out.push_back(line);
  }
  return out;
}

TEST(ChaosPlan, IsAFunctionOfTheSeed) {
  EXPECT_EQ(Described(PlanFaults(PlanOptions(7))), Described(PlanFaults(PlanOptions(7))));
  EXPECT_NE(Described(PlanFaults(PlanOptions(7))), Described(PlanFaults(PlanOptions(8))));
  // The first runs of a longer plan are the shorter plan.
  FaultPlanOptions shorter = PlanOptions(7);
  shorter.runs = 3;
  const std::vector<std::string> longer = Described(PlanFaults(PlanOptions(7)));
  EXPECT_EQ(Described(PlanFaults(shorter)), std::vector<std::string>(longer.begin(), longer.begin() + 3));
}

TEST(ChaosPlan, DrawsEveryFaultWithinItsBounds) {
  const auto plan = PlanFaults(PlanOptions(1));
  ASSERT_EQ(plan.size(), 400u);
  int two = 0;
  std::set<std::string> targets;
  std::set<FaultKind> kinds;
  for (const auto& run : plan) {
    ASSERT_GE(run.size(), 1u);
    ASSERT_LE(run.size(), 2u);
    EXPECT_EQ(run[0].at_s, 0);  // a first fault goes by progress alone
    if (run.size() == 2) {
      ++two;
      EXPECT_LE(run[0].at_progress, run[1].at_progress);
      EXPECT_EQ(run[1].at_s, run[1].at_progress * 10);  // or that share of the baseline's 10 s
    }
    for (const Fault& f : run) {
      // A share of the training steps, not a time: a run faster than the
      // baseline still gets its fault mid-training.
      EXPECT_GE(f.at_progress, 0.1);
      EXPECT_LE(f.at_progress, 0.8);
      if (f.kind == FaultKind::kStop) {
        EXPECT_GE(f.stop_s, 1.0);
        EXPECT_LE(f.stop_s, 10.0);  // 2 x peer timeout
      } else {
        EXPECT_EQ(f.stop_s, 0);
      }
      targets.insert(f.task.ToString());
      kinds.insert(f.kind);
    }
  }
  EXPECT_GT(two, 60);  // a quarter of 400 is 100
  EXPECT_LT(two, 140);
  EXPECT_EQ(targets, (std::set<std::string>{"ps:0", "worker:0", "worker:1"}));
  EXPECT_EQ(kinds.size(), 2u);

  FaultPlanOptions one = PlanOptions(1);
  one.max_faults_per_run = 1;
  one.kinds = {FaultKind::kKill};
  for (const auto& run : PlanFaults(one)) {
    ASSERT_EQ(run.size(), 1u);
    EXPECT_EQ(run[0].kind, FaultKind::kKill);
  }
}

TEST(ChaosPlan, TargetsAndKindsComeFromTheirFlags) {
  auto spec = ClusterSpec::FromJson(R"({"cluster": {"worker": ["localhost:1", "localhost:2"],
                                                    "ps": ["localhost:3"]}})", "spec");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto all = FaultTargets(*spec, {});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 3u);
  auto w1 = FaultTargets(*spec, {"worker:1"});
  ASSERT_TRUE(w1.ok());
  ASSERT_EQ(w1->size(), 1u);
  EXPECT_EQ((*w1)[0], kWorker1);
  auto chief_and_ps = FaultTargets(*spec, {"chief", "ps"});
  ASSERT_TRUE(chief_and_ps.ok());
  EXPECT_EQ(chief_and_ps->size(), 2u);  // worker:0 is the chief here
  auto bad = FaultTargets(*spec, {"worker:5"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"worker:5\" names no task"));

  auto kinds = ParseFaultKinds("kill,stop");
  ASSERT_TRUE(kinds.ok());
  EXPECT_EQ(kinds->size(), 2u);
  EXPECT_THAT(ParseFaultKinds("kill,nap").status().message(), HasSubstr("\"nap\""));
  EXPECT_FALSE(ParseFaultKinds("").ok());
}

ChaosRunRecord Run(const std::string& name, absl::Status status, double accuracy, int restarts) {
  ChaosRunRecord r;
  r.name = name;
  r.run_dir = "/out/" + name;
  r.status = std::move(status);
  r.accuracy = accuracy;
  r.restarts = restarts;
  r.wall_s = 12.34;
  return r;
}

ChaosResult Result() {
  ChaosResult result;
  result.baseline = Run("baseline", absl::OkStatus(), 0.95, 0);
  ChaosRunRecord killed = Run("run-001", absl::OkStatus(), 0.94, 1);
  killed.planned = {{3.0, kWorker1, FaultKind::kKill, 0}};
  killed.sent = {{killed.planned[0], 3.04, 123, -1}};
  killed.updates_lost = 17;
  killed.recoveries = 1;
  ChaosRunRecord hung = Run("run-002", absl::DeadlineExceededError("did not finish within 80 s: presumed hung"),
                            0, 0);
  hung.planned = {{2.0, kPs0, FaultKind::kStop, 9.5}, {4.0, kWorker0, FaultKind::kKill, 0}};
  hung.sent = {{hung.planned[0], 2.01, 124, 11.5}};
  ChaosRunRecord failed = Run("run-003", absl::AbortedError("worker:0 failed (exit code 1)"), 0, 3);
  ChaosRunRecord better = Run("run-004", absl::OkStatus(), 0.96, 2);
  Fault by_progress{0, kWorker0, FaultKind::kKill, 0};
  by_progress.at_progress = 0.55;
  better.planned = {by_progress};
  better.sent = {{by_progress, 5.52, 125, -1, 0.57}};
  result.runs = {killed, hung, failed, better};
  result.totals = SumUpChaos(result.baseline, result.runs);
  return result;
}

ChaosReportFacts Facts() {
  return {"pstrain chaos --runs=4", "2026-11-23T18:00:00+00:00", MachineInfo{"Test CPU", 2},
          {"Cluster: spec.json"}};
}

TEST(ChaosReport, SumsUpHangsFailuresRestartsAndTheAccuracyDifference) {
  const ChaosTotals t = Result().totals;
  EXPECT_EQ(t.runs, 4);
  EXPECT_EQ(t.hangs, 1);
  EXPECT_EQ(t.failed, 1);
  EXPECT_EQ(t.restarts, 6);
  EXPECT_EQ(t.updates_lost, 17);
  EXPECT_NEAR(*t.accuracy_diff_min, -0.01, 1e-12);
  EXPECT_NEAR(*t.accuracy_diff_median, 0.0, 1e-12);  // the mean of -0.01 and +0.01
  EXPECT_NEAR(*t.accuracy_diff_max, 0.01, 1e-12);
  EXPECT_EQ(t.baseline_accuracy, 0.95);
  EXPECT_EQ(ChaosTotalsLine(t),
            "chaos: 4 runs, 1 hangs, 1 failed runs, 6 restarts, 17 updates lost; accuracy vs baseline 0.9500: "
            "min -0.0100, median +0.0000, max +0.0100");
  EXPECT_FALSE(SumUpChaos(Result().baseline, {}).accuracy_diff_median.has_value());
}

TEST(ChaosReport, RendersOneRowPerRunAndTheTotals) {
  const std::string md = ChaosReportMarkdown(Facts(), Result());
  EXPECT_THAT(md, HasSubstr("# pstrain chaos\n"));
  EXPECT_THAT(md, HasSubstr("```\npstrain chaos --runs=4\n```"));
  EXPECT_THAT(md, HasSubstr("- Machine: 2 cores (Test CPU)\n- Date: 2026-11-23T18:00:00+00:00\n"
                            "- Cluster: spec.json\n"));
  EXPECT_THAT(md, HasSubstr("| baseline | none | ok | 0 | 0 | 0 | 0.9500 | +0.0000 | 12.3 s |\n"));
  EXPECT_THAT(md, HasSubstr("| run-001 | kill worker:1 at 3.0 s | ok | 1 | 17 | 1 | 0.9400 | -0.0100 | 12.3 s |\n"));
  EXPECT_THAT(md, HasSubstr("| run-002 | stop ps:0 at 2.0 s for 9.5 s; kill worker:0 at 4.0 s (not sent) | "
                            "hang: did not finish within 80 s: presumed hung | 0 | - | - | - | - | 12.3 s |\n"));
  EXPECT_THAT(md, HasSubstr("| run-003 | none | failed: worker:0 failed (exit code 1) | 3 | - | - | - | - |"));
  EXPECT_THAT(md, HasSubstr("| run-004 | kill worker:0 at 57% of training, sent at 5.5 s | ok | 2 |"));
  EXPECT_THAT(md, HasSubstr("- Hangs (no end within the run timeout): 1\n"));
  EXPECT_THAT(md, HasSubstr("- Failed runs (any other error): 1\n"));
  EXPECT_THAT(md, HasSubstr("- Restarts: 6\n"));
  EXPECT_THAT(md, HasSubstr("min -0.0100, median +0.0000, max +0.0100\n"));
  EXPECT_THAT(md, HasSubstr("- Baseline test accuracy: 0.9500\n"));
}

TEST(ChaosReport, WritesTheSameDataAsJson) {
  auto json = ParseJson(ChaosReportJson(Facts(), Result()), "report.json");
  ASSERT_TRUE(json.ok()) << json.status();
  const auto& top = json->struct_value().fields();
  EXPECT_EQ(top.at("command").string_value(), "pstrain chaos --runs=4");
  EXPECT_EQ(top.at("cores").number_value(), 2);
  const auto& runs = top.at("runs").list_value().values();
  ASSERT_EQ(runs.size(), 4);
  const auto& first = runs[0].struct_value().fields();
  EXPECT_EQ(first.at("name").string_value(), "run-001");
  EXPECT_EQ(first.at("outcome").string_value(), "ok");
  EXPECT_EQ(first.at("restarts").number_value(), 1);
  EXPECT_NEAR(first.at("accuracy_minus_baseline").number_value(), -0.01, 1e-12);
  const auto& fault = first.at("faults").list_value().values(0).struct_value().fields();
  EXPECT_EQ(fault.at("kind").string_value(), "kill");
  EXPECT_EQ(fault.at("task").string_value(), "worker:1");
  EXPECT_EQ(fault.at("sent_at_s").number_value(), 3.04);
  EXPECT_EQ(fault.at("planned_at_s").number_value(), 3.0);
  EXPECT_FALSE(fault.contains("planned_at_progress"));
  const auto& by_progress =
      runs[3].struct_value().fields().at("faults").list_value().values(0).struct_value().fields();
  EXPECT_EQ(by_progress.at("planned_at_progress").number_value(), 0.55);
  EXPECT_EQ(by_progress.at("sent_at_progress").number_value(), 0.57);
  EXPECT_EQ(by_progress.at("sent_at_s").number_value(), 5.52);
  EXPECT_FALSE(by_progress.contains("planned_at_s"));
  const auto& hung = runs[1].struct_value().fields();
  EXPECT_EQ(hung.at("outcome").string_value(), "hang");
  EXPECT_TRUE(hung.at("final_test_accuracy").has_null_value());
  EXPECT_FALSE(hung.at("faults").list_value().values(1).struct_value().fields().at("sent").bool_value());
  const auto& totals = top.at("totals").struct_value().fields();
  EXPECT_EQ(totals.at("hangs").number_value(), 1);
  EXPECT_EQ(totals.at("failed_runs").number_value(), 1);
  EXPECT_EQ(totals.at("baseline_accuracy").number_value(), 0.95);
}

}  // namespace
}  // namespace pstrain

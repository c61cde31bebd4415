// The update modes' promises, checked on real processes (`pstrain launch`
// starting ps_server and worker processes over loopback, real MNIST):
//
//  - ssp:S: no worker ever computes on parameters served while it was more
//    than S steps ahead of the slowest worker, even with a straggler;
//  - sync with backup workers never waits for the slowest worker;
//  - every push is applied or dropped, none lost, in every mode; a dropped
//    gradient never reaches the parameters (the unit level,
//    request_handler_test, shows the parameters unchanged; here the
//    counters show every dropped push was not applied).
//
// Runs are short (--max_steps) with bounded waits; the assertions are about
// semantics, never speed, so a slow busy machine passes them too.

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/csv.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gtest/gtest.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

constexpr double kTimeoutS = 300;

// One worker's steps CSV, the columns the checks need.
struct StepRow {
  int64_t step = 0;
  int64_t version = 0;
  int64_t min_clock = 0;
  bool dropped = false;
};

struct LaunchedRun {
  proto::RunSummary summary;
  std::vector<std::vector<StepRow>> steps;  // by rank
};

std::vector<StepRow> ReadSteps(const std::string& path) {
  auto table = ReadCsv(path);
  EXPECT_TRUE(table.ok()) << table.status();
  std::vector<StepRow> rows;
  if (!table.ok()) return rows;
  const int step = table->Column("step"), version = table->Column("version"),
            min_clock = table->Column("min_clock"), dropped = table->Column("dropped");
  for (const auto& cells : table->rows) {
    StepRow r;
    EXPECT_TRUE(absl::SimpleAtoi(cells[step], &r.step) && absl::SimpleAtoi(cells[version], &r.version) &&
                absl::SimpleAtoi(cells[min_clock], &r.min_clock));
    r.dropped = cells[dropped] == "1";
    rows.push_back(r);
  }
  return rows;
}

// `pstrain launch` of a local cluster with `ps` ps and `workers` workers for
// `steps` steps each; fails the test (and returns an empty run) if it fails.
LaunchedRun LaunchCluster(int ps, int workers, int steps, const std::vector<std::string>& flags) {
  const std::string dir = testing::MakeTempDir("consistency");
  const std::string run_dir = dir + "/run";
  std::vector<std::string> args = {
      "launch", "--cluster_spec=" + testing::WriteLocalSpec(dir, ps, workers), "--free_ports",
      "--run_dir=" + run_dir, "--data_dir=" + testing::SourcePath("data/mnist"), "--device=cpu",
      "--epochs=1", absl::StrCat("--max_steps=", steps), "--log_every_steps=0", "--echo=progress",
      "--peer_timeout_s=30"};
  args.insert(args.end(), flags.begin(), flags.end());
  auto pstrain = testing::RunningProcess::Start(testing::BinaryPath("pstrain"), args);
  LaunchedRun run;
  if (pstrain == nullptr) return run;
  auto code = pstrain->Wait(kTimeoutS);
  EXPECT_TRUE(code.ok() && *code == 0) << (code.ok() ? absl::StrCat("exit ", *code) : "timed out") << "\n"
                                       << pstrain->output();
  auto text = ReadFileToString(run_dir + "/summary.json");
  if (!text.ok() || !ParseJsonMessage(*text, "summary.json", &run.summary).ok()) {
    ADD_FAILURE() << "no summary.json in " << run_dir;
    return run;
  }
  for (int r = 0; r < workers; ++r) run.steps.push_back(ReadSteps(absl::StrCat(run_dir, "/steps_worker", r, ".csv")));
  return run;
}

int64_t TotalSteps(const LaunchedRun& run) {
  int64_t total = 0;
  for (const auto& rows : run.steps) total += static_cast<int64_t>(rows.size());
  return total;
}

// Every push is applied or dropped (none lost), on every shard, and every
// worker step pushed once to every shard.
void ExpectCountersAddUp(const LaunchedRun& run) {
  ASSERT_GT(run.summary.shards_size(), 0);
  for (const proto::ShardSummary& s : run.summary.shards()) {
    EXPECT_EQ(s.gradients_received(),
              s.gradients_applied() + s.stale_gradients_dropped() + s.late_gradients_dropped())
        << "shard " << s.shard();
    EXPECT_EQ(s.gradients_received(), TotalSteps(run)) << "shard " << s.shard();
    EXPECT_EQ(s.malformed_requests() + s.rejected_requests(), 0) << "shard " << s.shard();
  }
}

// ssp's bound, from what each worker recorded: row t's min_clock is the
// slowest worker's finished-step count when the parameters for step t+1
// were served, so step t+1 may be at most S ahead of it.
void ExpectSspBound(const LaunchedRun& run, int bound) {
  for (size_t rank = 0; rank < run.steps.size(); ++rank) {
    const std::vector<StepRow>& rows = run.steps[rank];
    for (size_t t = 1; t < rows.size(); ++t) {
      ASSERT_LE(rows[t].step - rows[t - 1].min_clock, bound)
          << "worker " << rank << " computed step " << rows[t].step << " on parameters served when "
          << "the slowest worker had finished " << rows[t - 1].min_clock << " steps";
    }
  }
}

int64_t SspWaits(const LaunchedRun& run) {
  int64_t waits = 0;
  for (const proto::ShardSummary& s : run.summary.shards()) waits += s.ssp_waits();
  return waits;
}

class SspBound : public ::testing::TestWithParam<int> {};

TEST_P(SspBound, NoWorkerRunsMoreThanSStepsAheadOfTheSlowestUnderAStraggler) {
  const int bound = GetParam(), workers = 3, steps = 40;
  const LaunchedRun run = LaunchCluster(2, workers, steps, {"--mode=ssp", absl::StrCat("--staleness=", bound),
                                                   "--straggler=worker:1:delay_ms=100"});
  ASSERT_EQ(run.steps.size(), static_cast<size_t>(workers));
  for (const auto& rows : run.steps) ASSERT_EQ(rows.size(), static_cast<size_t>(steps));
  ExpectSspBound(run, bound);
  // The bound bit: the fast workers were held back.
  EXPECT_GT(SspWaits(run), 0);
  // In versions: between a worker's pull and its push each other worker
  // pushes at most 2S+1 times (its steps from t-S to t+S).
  EXPECT_LE(run.summary.max_staleness(), (workers - 1) * (2 * bound + 1));
  EXPECT_EQ(run.summary.updates_applied(), workers * steps);
  ExpectCountersAddUp(run);
}

INSTANTIATE_TEST_SUITE_P(Bounds, SspBound, ::testing::Values(0, 2));

TEST(SyncWithBackupWorkers, NeverWaitsForTheSlowestWorker) {
  const int workers = 3, steps = 30;
  const LaunchedRun run = LaunchCluster(1, workers, steps, {"--mode=sync", "--backup_workers=1",
                                                   "--straggler=worker:2:delay_ms=1500"});
  ASSERT_EQ(run.steps.size(), static_cast<size_t>(workers));
  // Every version was applied, each from exactly N-B = 2 gradients...
  EXPECT_EQ(run.summary.updates_applied(), steps);
  ASSERT_EQ(run.summary.shards_size(), 1);
  EXPECT_EQ(run.summary.shards(0).gradients_applied(), 2 * steps);
  // ...while the straggler, 1.5 s a step, ran a few steps and stopped with
  // the job: nobody waited for its 30.
  const std::vector<StepRow>& straggler = run.steps[2];
  EXPECT_GE(straggler.size(), 1u);
  EXPECT_LE(straggler.size(), static_cast<size_t>(steps / 2));
  // Its gradients came too late for their version and were dropped.
  const int64_t dropped = std::count_if(straggler.begin(), straggler.end(), [](const StepRow& r) { return r.dropped; });
  EXPECT_GE(dropped, static_cast<int64_t>(straggler.size()) - 1);
  EXPECT_GT(run.summary.late_gradients_dropped(), 0);
  EXPECT_EQ(run.summary.stale_gradients_dropped(), 0);
  ExpectCountersAddUp(run);
}

class CountersAddUp : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(CountersAddUp, EveryPushIsAppliedOrDroppedNoneLost) {
  const int workers = 3, steps = 30;
  std::vector<std::string> flags = GetParam();
  flags.push_back("--straggler=worker:2:delay_ms=30");
  const LaunchedRun run = LaunchCluster(2, workers, steps, flags);
  ExpectCountersAddUp(run);
  const std::string mode = run.summary.mode();
  if (mode == "sync" && run.summary.backup_workers() == 0) {
    EXPECT_EQ(run.summary.updates_applied(), steps);
    EXPECT_EQ(run.summary.stale_gradients_dropped() + run.summary.late_gradients_dropped(), 0);
    EXPECT_EQ(run.summary.max_staleness(), 0);
  } else if (mode == "sync") {
    EXPECT_EQ(run.summary.updates_applied(), steps);
    for (const proto::ShardSummary& s : run.summary.shards()) EXPECT_EQ(s.gradients_applied(), 2 * steps);
  } else {
    EXPECT_EQ(run.summary.updates_applied(), workers * steps);
    EXPECT_EQ(run.summary.stale_gradients_dropped() + run.summary.late_gradients_dropped(), 0);
  }
}

std::string ModeName(const ::testing::TestParamInfo<std::vector<std::string>>& param) {
  constexpr const char* kNames[] = {"Sync", "SyncBackup", "Async", "Ssp"};
  return kNames[param.index];
}

INSTANTIATE_TEST_SUITE_P(Modes, CountersAddUp,
                         ::testing::Values(std::vector<std::string>{"--mode=sync"},
                                           std::vector<std::string>{"--mode=sync", "--backup_workers=1"},
                                           std::vector<std::string>{"--mode=async"},
                                           std::vector<std::string>{"--mode=ssp", "--staleness=1"}),
                         ModeName);

// The staleness-aware learning rate divides a stale gradient's step (unit
// level: request_handler_test); here it reaches the ps through the job
// config and training with it still learns.
TEST(StalenessAwareLearningRate, ReachesTheJobAndStillLearns) {
  const LaunchedRun run = LaunchCluster(1, 3, 60, {"--mode=async", "--staleness_lr=on"});
  EXPECT_TRUE(run.summary.staleness_lr());
  EXPECT_GT(run.summary.mean_staleness(), 0.0);
  // Chance is 10%; 60 steps of 3 workers reach far more (about 85%).
  EXPECT_GT(run.summary.final_test_accuracy(), 0.5);
  ExpectCountersAddUp(run);
}

}  // namespace
}  // namespace pstrain

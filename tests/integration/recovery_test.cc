// Recovery while the job runs, with real processes started by
// hand as Kubernetes would start them: one task of a 2 ps + 2 worker sync
// job is killed with SIGKILL in the middle of the run and started again
// with exactly the same command line, as a restart policy would. Every task
// exits 0 and the final parameters are bitwise those of the uninterrupted
// run: a restarted ps makes the chief roll every shard back to the last
// checkpoint (the steps after it are computed again, identically: sync is
// deterministic for a seed); a restarted worker or chief rejoins at the
// version the shards wait for, and its gradient for it counts once. With
// --ps_replicas=1 a restarted ps is restored from its standby instead: no
// update is lost and nothing is rolled back. Without any checkpoint, every
// shard goes back to the initial parameters, and the run still ends where
// the uninterrupted one does. The same holds with Adam (its moments come
// back from the standby) and Adagrad (its sum's initial value from the
// chief's initial state). With lossy pushes (--wire, error feedback), a
// failover still ends bitwise where the uninterrupted run with the same
// --wire does: the step the lost ps had not applied is sent to its standby
// again byte for byte.

#include <signal.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/run_outputs.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunningProcess;

constexpr int64_t kSteps = 100;

struct Task {
  std::string binary;
  std::vector<std::string> args;
  std::string tf_config;
  std::unique_ptr<RunningProcess> process;

  void Start() { process = RunningProcess::Start(binary, args, tf_config); }
};

// The optimizer flags of a job: SGD's defaults, or another optimizer's.
std::vector<std::string> OptimizerFlags(const std::string& optimizer) {
  if (optimizer == "adam") return {"--optimizer=adam", "--lr=0.001"};
  // A sum that does not start at 0: the chief's initial state must say so.
  if (optimizer == "adagrad") return {"--optimizer=adagrad", "--adagrad_initial_accumulator=0.1"};
  return {};
}

// The four tasks of the job in `dir` (ps:0, ps:1, worker:0 the chief, worker:1).
// `extra`: more flags for every task; `worker_extra`: for the workers.
std::vector<Task> MakeJob(const std::string& dir, bool replicas = false, bool checkpoints = true,
                          const std::vector<std::string>& extra = {},
                          const std::vector<std::string>& worker_extra = {}) {
  const std::string spec = testing::WriteLocalSpec(dir, 2, 2);
  const std::string ckpt = "--checkpoint_dir=" + dir + "/checkpoints";
  std::vector<Task> tasks;
  for (int k = 0; k < 2; ++k) {
    tasks.push_back({testing::BinaryPath("ps_server"), {testing::SecretFlag(), ckpt},
                     testing::TfConfigFor(spec, "ps", k), nullptr});
  }
  // worker:1 is slowed so that the run is still going when a task dies.
  for (int w = 0; w < 2; ++w) {
    std::vector<std::string> args = {
        testing::SecretFlag(), checkpoints ? ckpt : "--checkpoint_dir=", "--mode=sync", "--device=cpu", "--seed=1",
        "--log_every_steps=10", absl::StrCat("--max_steps=", kSteps),
        checkpoints ? "--checkpoint_every_steps=20" : "--checkpoint_every_steps=0",
        "--run_dir=" + dir + "/run", "--data_dir=" + testing::SourcePath("data/mnist"),
        w == 1 ? "--straggler_delay_ms=30" : "--straggler_delay_ms=0",
        replicas ? "--ps_replicas=1" : "--ps_replicas=0"};
    args.insert(args.end(), worker_extra.begin(), worker_extra.end());
    tasks.push_back({testing::BinaryPath("worker"), args, testing::TfConfigFor(spec, "worker", w),
                     nullptr});
  }
  for (Task& t : tasks) t.args.insert(t.args.end(), extra.begin(), extra.end());
  return tasks;
}

void WaitAll(std::vector<Task>& tasks, const Task* except = nullptr) {
  for (Task& t : tasks) {
    if (&t == except) continue;
    auto code = t.process->Wait(300);
    ASSERT_TRUE(code.ok()) << t.process->output();
    EXPECT_EQ(*code, 0) << t.process->output();
  }
}

// The uninterrupted run's final parameters, with `worker_extra` flags for
// the workers: run once per build, and shared by this binary's test
// processes (testing::SharedFloats).
const std::vector<float>& Reference(const std::vector<std::string>& worker_extra = {}) {
  static auto* const references = new std::map<std::vector<std::string>, std::vector<float>>();
  auto it = references->find(worker_extra);
  if (it != references->end()) return it->second;
  const std::vector<float> params = testing::SharedFloats(
      absl::StrCat("recovery_test uninterrupted ", absl::StrJoin(worker_extra, " ")),
      {"worker", "ps_server"}, [&] {
        const std::string dir = testing::MakeTempDir("uninterrupted");
        std::vector<Task> tasks = MakeJob(dir, false, true, {}, worker_extra);
        for (Task& t : tasks) t.Start();
        WaitAll(tasks);
        return testing::ReadFinalParams(dir + "/run");
      });
  return (*references)[worker_extra] = params;
}

struct Victim {
  const char* name;
  int task;  // index into MakeJob's tasks
  bool replicas = false;
  bool checkpoints = true;
  const char* optimizer = "sgd";
};

class KilledAndRestarted : public ::testing::TestWithParam<Victim> {};

TEST_P(KilledAndRestarted, TheJobFinishesWithTheUninterruptedParameters) {
  const std::vector<float>& reference = Reference(OptimizerFlags(GetParam().optimizer));
  ASSERT_FALSE(reference.empty());
  const std::string dir = testing::MakeTempDir("recovery");
  std::vector<Task> tasks =
      MakeJob(dir, GetParam().replicas, GetParam().checkpoints, {},
              OptimizerFlags(GetParam().optimizer));
  for (Task& t : tasks) t.Start();
  // Past a checkpoint (or step 40), then the victim dies and comes back.
  ASSERT_TRUE(tasks[2].process->WaitForOutput(
      GetParam().checkpoints ? "checkpoint ckpt-40 written" : "step 40/", 240))
      << tasks[2].process->output();
  Task& victim = tasks[GetParam().task];
  victim.process->Signal(SIGKILL);
  ASSERT_TRUE(victim.process->Wait(30).ok());
  victim.Start();
  WaitAll(tasks);
  const std::vector<float> params = testing::ReadFinalParams(dir + "/run");
  EXPECT_EQ(params, reference) << "the recovered run's final parameters differ";
  const proto::RunSummary summary = testing::ReadRunSummary(dir + "/run");
  std::printf("RESULT recovery victim=%s bitwise_equal=%d updates_lost=%d recoveries=%d "
              "accuracy=%.4f\n", GetParam().name, params == reference ? 1 : 0,
              summary.updates_lost(), summary.recoveries_size(), summary.final_test_accuracy());
  const bool ps = std::string(GetParam().name).rfind("ps", 0) == 0;
  EXPECT_EQ(summary.recoveries_size(), ps ? 1 : 0);
  if (ps && GetParam().replicas) {
    EXPECT_EQ(summary.recoveries(0).source(), "standby");
    EXPECT_EQ(summary.updates_lost(), 0);
    EXPECT_GE(summary.recoveries(0).to_version(), 40);
  } else if (ps && !GetParam().checkpoints) {
    EXPECT_EQ(summary.recoveries(0).source(), "initial parameters");
    EXPECT_EQ(summary.recoveries(0).to_version(), 0);
  } else if (ps) {
    EXPECT_EQ(summary.recoveries(0).source(), "checkpoint");
    EXPECT_THAT(summary.recoveries(0).what(), HasSubstr("rolled back"));
    EXPECT_GE(summary.recoveries(0).to_version(), 40);
  } else {
    EXPECT_EQ(summary.updates_lost(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Tasks, KilledAndRestarted,
                         ::testing::Values(Victim{"ps1", 1}, Victim{"worker1", 3},
                                           Victim{"chief", 2},
                                           Victim{"ps1_with_standby", 1, true},
                                           Victim{"ps0_with_standby", 0, true},
                                           Victim{"ps1_without_checkpoints", 1, false, false},
                                           // The optimizer's slots travel with the
                                           // parameters: Adam's moments through the
                                           // standby, Adagrad's initial sum through the
                                           // chief's initial state.
                                           Victim{"ps0_with_standby_adam", 0, true, true, "adam"},
                                           Victim{"ps1_without_checkpoints_adagrad", 1, false,
                                                  false, "adagrad"}),
                         [](const ::testing::TestParamInfo<Victim>& p) {
                           return std::string(p.param.name);
                         });

// A restarted chief hears from the ps tasks through its heartbeat only
// once its connections are up (a CURVE handshake each): with
// --failover_after_s as short as that takes, a shard can look unserved at
// first although its ps is live and its standby holds a replica it could
// adopt. The chief asks a ps directly before failing its shard over
// (saying the ps "answers"): nothing moves, and the job ends as the
// uninterrupted one (a shard adopted from under its live ps would be
// served by two ps, and the workers routed to either would wait on each
// other). Whether the first look finds a shard unserved depends on how
// fast the handshakes are; the outcome must not.
TEST(RestartedChief, FailsNoLivePsOverBeforeItsHeartbeatHearsFromIt) {
  const std::vector<float>& reference = Reference();
  ASSERT_FALSE(reference.empty());
  const std::string dir = testing::MakeTempDir("no_false_failover");
  std::vector<Task> tasks = MakeJob(dir, /*replicas=*/true, /*checkpoints=*/true, {},
                                    {"--failover_after_s=0.05", "--heartbeat_interval_s=1"});
  for (Task& t : tasks) t.Start();
  Task& chief = tasks[2];
  ASSERT_TRUE(chief.process->WaitForOutput("checkpoint ckpt-40 written", 240))
      << chief.process->output();
  chief.process->Signal(SIGKILL);
  ASSERT_TRUE(chief.process->Wait(30).ok());
  chief.Start();
  WaitAll(tasks);
  EXPECT_EQ(testing::ReadFinalParams(dir + "/run"), reference)
      << "the run's final parameters differ";
  const proto::RunSummary summary = testing::ReadRunSummary(dir + "/run");
  for (const proto::Recovery& r : summary.recoveries()) {
    EXPECT_NE(r.source(), "failover") << r.what();
  }
  EXPECT_THAT(chief.process->output(), Not(HasSubstr("cannot fail shard")));
}

// Failover (--ps_replicas=1): the victim ps stays away past the chief's
// --failover_after_s, so its standby serves its shard meanwhile and the
// job goes on; when the ps comes back (restarted empty, or a frozen ps that
// wakes still holding its old copy) the chief gives the shard back to it.
// Sync stays bitwise the uninterrupted run, and nothing is lost.
enum class Away { kForGood, kRestartedLater, kFrozen };

struct FailoverCase {
  const char* name;
  Away away;
};

class FailedOver : public ::testing::TestWithParam<FailoverCase> {};

TEST_P(FailedOver, TheStandbyServesTheShardAndNothingIsLost) {
  const std::vector<float>& reference = Reference();
  ASSERT_FALSE(reference.empty());
  const std::string dir = testing::MakeTempDir("failover");
  // A short peer timeout, so that a frozen ps is noticed in seconds.
  std::vector<Task> tasks =
      MakeJob(dir, /*replicas=*/true, /*checkpoints=*/true, {"--peer_timeout_s=3"});
  for (Task& t : tasks) t.Start();
  Task& chief = tasks[2];
  Task& victim = tasks[1];
  ASSERT_TRUE(chief.process->WaitForOutput("checkpoint ckpt-20 written", 240))
      << chief.process->output();
  victim.process->Signal(GetParam().away == Away::kFrozen ? SIGSTOP : SIGKILL);
  ASSERT_TRUE(chief.process->WaitForOutput("served by its standby ps:0", 120))
      << chief.process->output();
  // Woken at its shard's adoption: a worker whose view of the adopter is a
  // beat behind may register at the woken ps, still listing the shard at
  // the old term, and learns of the move from its next view of the
  // adopter (worker/shard_routes.h: FirstOutrankedRoute).
  if (GetParam().away == Away::kFrozen) victim.process->Signal(SIGCONT);
  if (GetParam().away == Away::kRestartedLater) {
    ASSERT_TRUE(victim.process->Wait(30).ok());
    victim.Start();
  }
  WaitAll(tasks, GetParam().away == Away::kForGood ? &victim : nullptr);
  const std::vector<float> params = testing::ReadFinalParams(dir + "/run");
  EXPECT_EQ(params, reference) << "the failed-over run's final parameters differ";
  const proto::RunSummary summary = testing::ReadRunSummary(dir + "/run");
  int outranked = 0;  // workers that routed to the woken ps and moved on
  for (const Task& t : tasks) {
    if (t.process->output().find("it moved while that ps was away") != std::string::npos)
      ++outranked;
  }
  std::printf(
      "RESULT failover case=%s bitwise_equal=%d updates_lost=%d recoveries=%d "
      "accuracy=%.4f outranked_route_rejoins=%d\n",
      GetParam().name, params == reference ? 1 : 0, summary.updates_lost(),
      summary.recoveries_size(), summary.final_test_accuracy(), outranked);
  EXPECT_EQ(summary.updates_lost(), 0);
  ASSERT_GE(summary.recoveries_size(), 1);
  EXPECT_EQ(summary.recoveries(0).source(), "failover");
  EXPECT_THAT(summary.recoveries(0).what(), HasSubstr("shard 1 served by its standby ps:0"));
  if (GetParam().away == Away::kForGood) {
    EXPECT_EQ(summary.recoveries_size(), 1);
    return;
  }
  ASSERT_EQ(summary.recoveries_size(), 2) << chief.process->output();
  EXPECT_EQ(summary.recoveries(1).source(), "failback");
  EXPECT_THAT(summary.recoveries(1).what(),
              HasSubstr(GetParam().away == Away::kFrozen ? "ps:1 is back (it had frozen): shard 1"
                                                         : "ps:1 is back: shard 1"));
  EXPECT_THAT(victim.process->output(), HasSubstr(GetParam().away == Away::kFrozen
                                                      ? "replaced by the chief with its standby's"
                                                      : "restored by the chief from its standby"));
}

// Async: the step a worker has in flight when ps:1 freezes can be in on
// shard 0 and lost on shard 1 (the standby never had it). The worker
// rejoins, computes it again and pushes it to both: shard 0 counts it as a
// duplicate of the rank's step (its clock is past it), the adopted shard 1
// applies it. Every shard applies each worker's 100 steps once (before,
// shard 0 applied 202 updates to shard 1's 200 in 6 of 6 runs).
TEST(FailedOverAsync, EveryShardAppliesEachStepOnce) {
  const std::string dir = testing::MakeTempDir("failover_async");
  std::vector<Task> tasks = MakeJob(dir, /*replicas=*/true, /*checkpoints=*/true,
                                    {"--peer_timeout_s=3"}, {"--mode=async"});
  for (Task& t : tasks) t.Start();
  Task& chief = tasks[2];
  Task& victim = tasks[1];
  ASSERT_TRUE(chief.process->WaitForOutput("checkpoint ckpt-20 written", 240))
      << chief.process->output();
  victim.process->Signal(SIGSTOP);
  ASSERT_TRUE(chief.process->WaitForOutput("served by its standby ps:0", 120))
      << chief.process->output();
  victim.process->Signal(SIGCONT);
  WaitAll(tasks);
  const proto::RunSummary summary = testing::ReadRunSummary(dir + "/run");
  ASSERT_EQ(summary.shards_size(), 2);
  // Whether the woken ps learnt from its standby that its shard had moved
  // (Replicator: deposed), which happens when it froze with a state the
  // standby had not acknowledged.
  const bool deposed =
      victim.process->output().find("the shard moved while this ps was away") != std::string::npos;
  std::printf(
      "RESULT failover_async shard0_updates=%d shard1_updates=%d received=%d,%d deposed=%d\n",
      summary.shards(0).updates_applied(), summary.shards(1).updates_applied(),
      summary.shards(0).gradients_received(), summary.shards(1).gradients_received(),
      deposed ? 1 : 0);
  for (const proto::ShardSummary& shard : summary.shards()) {
    EXPECT_EQ(shard.updates_applied(), 2 * kSteps) << "shard " << shard.shard();
  }
}

INSTANTIATE_TEST_SUITE_P(Ps1, FailedOver,
                         ::testing::Values(FailoverCase{"lost_for_good", Away::kForGood},
                                           FailoverCase{"restarted_later", Away::kRestartedLater},
                                           FailoverCase{"frozen", Away::kFrozen}),
                         [](const ::testing::TestParamInfo<FailoverCase>& p) {
                           return std::string(p.param.name);
                         });

// Lossy pushes (--wire) through a failover: ps:1 is lost for good while a
// step is in flight, so ps:0 applies that step's gradients and the standby's
// copy of shard 1 has not got them. Each worker then sends the step's
// payloads again to shard 1 (PsClient::FinishStep) exactly as they went out
// the first time: its error-feedback residual already counts them as sent
// once, so encoding them again would count it twice. The run ends bitwise
// as the uninterrupted one with the same --wire, which differs from f32's.
TEST(FailedOverWithEncodedPushes, TheLostStepIsSentAgainByteForByte) {
  const std::vector<std::string> wire = {"--wire=topk:0.1"};
  const std::vector<float>& reference = Reference(wire);
  ASSERT_FALSE(reference.empty());
  const std::string dir = testing::MakeTempDir("failover_wire");
  std::vector<Task> tasks = MakeJob(dir, /*replicas=*/true, /*checkpoints=*/true,
                                    {"--peer_timeout_s=3"}, wire);
  for (Task& t : tasks) t.Start();
  Task& chief = tasks[2];
  Task& victim = tasks[1];
  ASSERT_TRUE(chief.process->WaitForOutput("checkpoint ckpt-20 written", 240))
      << chief.process->output();
  victim.process->Signal(SIGKILL);
  WaitAll(tasks, &victim);
  const std::vector<float> params = testing::ReadFinalParams(dir + "/run");
  const std::string again = "gradient again to the shards that lost it";
  const bool resent = chief.process->output().find(again) != std::string::npos &&
                      tasks[3].process->output().find(again) != std::string::npos;
  std::printf("RESULT failover_wire wire=topk:0.1 bitwise_equal=%d resent_by_both=%d\n",
              params == reference ? 1 : 0, resent ? 1 : 0);
  EXPECT_TRUE(resent) << chief.process->output();
  EXPECT_EQ(params, reference) << "the failed-over run's final parameters differ";
  EXPECT_NE(reference, Reference()) << "top-k pushes changed nothing?";
  EXPECT_EQ(testing::ReadRunSummary(dir + "/run").updates_lost(), 0);
}

}  // namespace
}  // namespace pstrain

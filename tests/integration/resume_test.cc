// Checkpoints and resume end to end, through `pstrain launch` and real
// processes: a sync run whose launcher is killed with SIGKILL after a
// checkpoint, then resumed with `--resume=RUN_DIR` and nothing else, ends
// with exactly the parameters of an uninterrupted run (sync is
// deterministic for a seed: the data order and the dropout masks are keyed
// by seed, epoch and example). So does a run given --max_steps and resumed
// to train longer, even when its newest checkpoint is damaged (the one
// before is used, the damaged file named). A flag that disagrees with the
// run being resumed is refused naming it. A resumed Adam run continues with
// Adam's moments and step count, exactly.

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/run_outputs.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ExpectAllGone;
using testing::RunningProcess;
using testing::TaskPids;

std::unique_ptr<RunningProcess> StartLaunch(std::vector<std::string> args) {
  return RunningProcess::Start(testing::BinaryPath("pstrain"), std::move(args));
}

// `pstrain launch` of 2 ps and 2 sync workers into `run_dir`.
std::unique_ptr<RunningProcess> StartRun(const std::string& run_dir, std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "launch", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_2ps_2w.json"),
      "--free_ports", "--run_dir=" + run_dir, "--data_dir=" + testing::SourcePath("data/mnist"),
      "--device=cpu", "--mode=sync", "--seed=1", "--log_every_steps=0", "--echo=all"};
  args.insert(args.end(), extra.begin(), extra.end());
  return StartLaunch(std::move(args));
}

// Runs to the end; the exit code.
int Finish(RunningProcess& p) {
  auto code = p.Wait(300);
  EXPECT_TRUE(code.ok()) << p.output();
  return code.ok() ? *code : -1;
}

std::vector<float> UninterruptedParams(int64_t steps, std::vector<std::string> extra = {}) {
  const std::string dir = testing::MakeTempDir("reference");
  extra.push_back(absl::StrCat("--max_steps=", steps));
  auto p = StartRun(dir, extra);
  EXPECT_EQ(Finish(*p), 0) << p->output();
  return testing::ReadFinalParams(dir);
}

// max_i |a_i - b_i|, printed as the test's figure.
double MaxAbsDifference(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  EXPECT_EQ(a.size(), b.size());
  double max_abs = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  std::printf("RESULT resume %s params=%zu max_abs_diff=%.3g bitwise_equal=%d\n", what, a.size(),
              max_abs, a == b ? 1 : 0);
  return max_abs;
}

std::string ResumedFrom(const std::string& run_dir) {
  auto text = ReadFileToString(run_dir + "/summary.json");
  proto::RunSummary s;
  if (!text.ok() || !ParseJsonMessage(*text, "summary.json", &s).ok()) return "?";
  return s.resumed_from();
}

// A sync run with `extra` flags, its launcher killed after ckpt-40, then
// resumed with --resume alone, against the same run uninterrupted.
void ExpectAKilledRunResumesToTheUninterruptedParameters(const std::vector<std::string>& extra,
                                                         const char* what) {
  constexpr int64_t kSteps = 120;
  const std::vector<float> reference = UninterruptedParams(kSteps, extra);
  const std::string dir = testing::MakeTempDir("killed");
  // worker:1 is slowed so that the run is still going when the launcher dies.
  std::vector<std::string> flags = {absl::StrCat("--max_steps=", kSteps),
                                    "--checkpoint_every_steps=20",
                                    "--straggler=worker:1:delay_ms=20"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  auto p = StartRun(dir, flags);
  ASSERT_TRUE(p->WaitForOutput("checkpoint ckpt-40 written", 240)) << p->output();
  p->Signal(SIGKILL);
  ASSERT_TRUE(p->Wait(30).ok());
  ExpectAllGone(TaskPids(p->output()), 10);  // the tasks die with their launcher
  EXPECT_FALSE(FileExists(dir + "/summary.json")) << "the run finished before it was killed";

  auto resumed = StartLaunch({"launch", "--resume=" + dir});
  ASSERT_EQ(Finish(*resumed), 0) << resumed->output();
  EXPECT_THAT(resumed->output(), HasSubstr("resuming the run in " + dir));
  EXPECT_THAT(resumed->output(), HasSubstr("resumed from checkpoint ckpt-"));
  EXPECT_NE(ResumedFrom(dir), "");
  const std::vector<float> params = testing::ReadFinalParams(dir);
  EXPECT_EQ(MaxAbsDifference(params, reference, what), 0.0);
  EXPECT_EQ(params, reference);  // bitwise: the same sums in the same order
}

TEST(Resume, ASyncRunWhoseLauncherWasKilledFinishesWithTheUninterruptedParameters) {
  ExpectAKilledRunResumesToTheUninterruptedParameters({}, "after_sigkill");
}

// The same with Adam: the resumed shards must get back exp_avg, exp_avg_sq
// and the step count of the bias corrections, or the parameters differ.
// launch.json carries --optimizer, so --resume alone continues with Adam.
TEST(Resume, AnAdamSyncRunWhoseLauncherWasKilledFinishesWithTheUninterruptedParameters) {
  ExpectAKilledRunResumesToTheUninterruptedParameters({"--optimizer=adam", "--lr=0.001"},
                                                      "adam_after_sigkill");
}

TEST(Resume, ARunResumedToTrainLongerSkipsADamagedCheckpointAndRefusesOtherFlags) {
  const std::vector<float> reference = UninterruptedParams(40);
  const std::string dir = testing::MakeTempDir("longer");
  auto first = StartRun(dir, {"--max_steps=20", "--checkpoint_every_steps=10"});
  ASSERT_EQ(Finish(*first), 0) << first->output();
  // ckpt-0 is written right after INIT, so that a ps lost before the first
  // periodic checkpoint can be restored.
  ASSERT_THAT(*ListCheckpointSteps(dir + "/checkpoints"), ElementsAre(0, 10, 20));

  auto other = StartLaunch({"launch", "--resume=" + dir, "--max_steps=40", "--lr=0.5"});
  EXPECT_EQ(Finish(*other), 2);
  EXPECT_THAT(other->output(), HasSubstr("--lr=0.5 disagrees with the run being resumed"));
  auto missing = StartLaunch({"launch", "--resume=" + dir + "/nothing"});
  EXPECT_NE(Finish(*missing), 0);
  EXPECT_THAT(missing->output(), HasSubstr("launch.json"));

  // Damage the payload of the newest checkpoint's second shard.
  const std::string shard = dir + "/checkpoints/" + ShardFileName(20, 1, 2);
  std::string bytes = *ReadFileToString(shard);
  bytes[bytes.size() - 5] ^= 0x10;
  ASSERT_TRUE(WriteFileAtomic(shard, bytes).ok());

  auto resumed = StartLaunch({"launch", "--resume=" + dir, "--max_steps=40"});
  ASSERT_EQ(Finish(*resumed), 0) << resumed->output();
  EXPECT_THAT(resumed->output(), HasSubstr("checkpoint ckpt-20 not used"));
  EXPECT_THAT(resumed->output(), HasSubstr(shard + ": damaged checkpoint"));
  EXPECT_THAT(resumed->output(), HasSubstr("resumed from checkpoint ckpt-10"));
  EXPECT_EQ(ResumedFrom(dir), "ckpt-10");
  EXPECT_EQ(MaxAbsDifference(testing::ReadFinalParams(dir), reference, "longer_after_damage"), 0.0);
  // The newest 3 are kept (ckpt-20 written again, whole).
  EXPECT_THAT(*ListCheckpointSteps(dir + "/checkpoints"), ElementsAre(20, 30, 40));
}

// Tasks started by hand, as on several hosts: each ps with its own
// --checkpoint_dir, the chief with another; worker 1 gets no checkpoint flag.
// Returns every task's exit code (ps tasks first), each expected 0 unless
// `expect_success` is false.
std::vector<int> RunByHand(const std::string& dir, const std::string& spec,
                           const std::vector<std::string>& chief_flags, int64_t steps,
                           bool expect_success = true) {
  std::vector<std::unique_ptr<RunningProcess>> tasks;
  for (int k = 0; k < 2; ++k) {
    tasks.push_back(RunningProcess::Start(
        testing::BinaryPath("ps_server"),
        {testing::SecretFlag(), absl::StrCat("--checkpoint_dir=", dir, "/ps", k)},
        testing::TfConfigFor(spec, "ps", k)));
  }
  const std::vector<std::string> common = {
      testing::SecretFlag(), "--mode=sync", "--device=cpu", "--log_every_steps=0",
      absl::StrCat("--max_steps=", steps), "--data_dir=" + testing::SourcePath("data/mnist")};
  std::vector<std::string> chief = common;
  chief.insert(chief.end(), chief_flags.begin(), chief_flags.end());
  tasks.push_back(RunningProcess::Start(testing::BinaryPath("worker"), chief,
                                        testing::TfConfigFor(spec, "worker", 0)));
  tasks.push_back(RunningProcess::Start(testing::BinaryPath("worker"), common,
                                        testing::TfConfigFor(spec, "worker", 1)));
  std::vector<int> codes;
  for (auto& t : tasks) {
    auto code = t->Wait(240);
    codes.push_back(code.ok() ? *code : -1000);
    if (expect_success) {
      EXPECT_TRUE(code.ok() && *code == 0) << t->output();
    }
  }
  return codes;
}

TEST(Resume, TasksStartedByHandContinueWithCheckpointDirAndRestore) {
  const std::vector<float> reference = UninterruptedParams(40);
  const std::string dir = testing::MakeTempDir("byhand");
  const std::string spec = testing::WriteLocalSpec(dir, 2, 2);
  const std::vector<std::string> chief = {"--run_dir=" + dir + "/run",
                                          "--checkpoint_dir=" + dir + "/chief"};
  std::vector<std::string> first = chief;
  first.push_back("--checkpoint_every_steps=10");
  EXPECT_THAT(RunByHand(dir, spec, first, 20), ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(*ListCheckpointSteps(dir + "/ps1"), ElementsAre(0, 10, 20));
  EXPECT_TRUE(FileExists(dir + "/chief/" + ManifestFileName(20)));

  std::vector<std::string> again = chief;
  again.push_back("--restore");
  EXPECT_THAT(RunByHand(dir, spec, again, 40), ElementsAre(0, 0, 0, 0));
  EXPECT_EQ(ResumedFrom(dir + "/run"), "ckpt-20");
  EXPECT_EQ(MaxAbsDifference(testing::ReadFinalParams(dir + "/run"), reference, "by_hand"), 0.0);
}

// ps:0 cannot write checkpoints 30, 35 and 40 (a full disk, here a file
// where their directory would go), ps:1 can: the checkpoints the job keeps
// (2) are the newest complete ones, 20 and 25, whole on both ps (ps:1's
// own files of 30-40 do not push them out), and the job resumes from 25
// to the uninterrupted run's parameters.
TEST(Resume, SavesThatFailOnOnePsLeaveTheNewestCompleteCheckpointsWhole) {
  const std::vector<float> reference = UninterruptedParams(40);
  const std::string dir = testing::MakeTempDir("fullps");
  const std::string spec = testing::WriteLocalSpec(dir, 2, 2);
  ASSERT_TRUE(MakeDirs(dir + "/ps0").ok());
  for (int64_t step : {30, 35, 40}) {
    ASSERT_TRUE(WriteFileAtomic(CheckpointPath(dir + "/ps0", step), "in the way").ok());
  }
  const std::vector<std::string> chief = {
      "--run_dir=" + dir + "/run", "--checkpoint_dir=" + dir + "/chief", "--keep_checkpoints=2"};
  std::vector<std::string> first = chief;
  first.push_back("--checkpoint_every_steps=5");
  const std::vector<int> codes = RunByHand(dir, spec, first, 40, /*expect_success=*/false);
  EXPECT_THAT(codes, ElementsAre(0, 0, 0, 0)) << "a checkpoint not written fails nothing";
  EXPECT_THAT(*ListCheckpointSteps(dir + "/chief"), ElementsAre(20, 25));
  for (int k = 0; k < 2; ++k) {
    for (int64_t step : {20, 25}) {
      EXPECT_TRUE(FileExists(absl::StrCat(dir, "/ps", k, "/", ShardFileName(step, k, 2))))
          << "ps" << k << " " << step;
    }
  }
  // Older ones went: ps:1's 15 at its save of 30, ps:0's 10 at its last
  // save, 25 (it kept 15 and on then).
  EXPECT_FALSE(FileExists(absl::StrCat(dir, "/ps1/", ShardFileName(15, 1, 2))));
  EXPECT_FALSE(FileExists(absl::StrCat(dir, "/ps0/", ShardFileName(10, 0, 2))));
  EXPECT_TRUE(FileExists(absl::StrCat(dir, "/ps1/", ShardFileName(40, 1, 2))));

  for (int64_t step : {30, 35, 40}) {
    ASSERT_EQ(unlink(CheckpointPath(dir + "/ps0", step).c_str()), 0);
  }
  std::vector<std::string> again = chief;
  again.push_back("--restore");
  EXPECT_THAT(RunByHand(dir, spec, again, 40), ElementsAre(0, 0, 0, 0));
  EXPECT_EQ(ResumedFrom(dir + "/run"), "ckpt-25");
  EXPECT_EQ(MaxAbsDifference(testing::ReadFinalParams(dir + "/run"), reference, "one_ps_full"),
            0.0);
}

}  // namespace
}  // namespace pstrain

// `pstrain launch` as a user runs it: a real cluster of child processes,
// their prefixed logs, the run directory (an earlier run's outputs removed),
// and how it ends — success, a bad spec, a task that dies, a ps that exits 0
// before training is done, SIGTERM, and the launcher itself killed. No case
// may leave a process behind.

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/cluster_spec.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/protocol_client.h"
#include "transport/job_secret.h"
#include "transport/transport.h"

namespace pstrain {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using testing::BinaryPath;
using testing::ExpectAllGone;
using testing::TaskPids;
using testing::RunningProcess;

std::unique_ptr<RunningProcess> StartLaunch(const std::string& run_dir,
                                            std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "launch", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_1ps_2w.json"),
      "--free_ports", "--run_dir=" + run_dir, "--data_dir=" + testing::SourcePath("data/mnist"),
      "--device=cpu", "--log_every_steps=5"};
  args.insert(args.end(), extra.begin(), extra.end());
  return RunningProcess::Start(BinaryPath("pstrain"), args);
}

TEST(Launch, TrainsAndWritesTheRunDirectory) {
  const std::string dir = testing::MakeTempDir("launch");
  auto p = StartLaunch(dir, {"--mode=sync", "--max_steps=30", "--echo=all"});
  ASSERT_NE(p, nullptr);
  auto code = p->Wait(240);
  ASSERT_TRUE(code.ok()) << p->output();
  EXPECT_EQ(*code, 0) << p->output();
  EXPECT_THAT(p->output(), HasSubstr("[ps:0] "));
  EXPECT_THAT(p->output(), HasSubstr("[worker:1] "));
  EXPECT_THAT(p->output(), HasSubstr("epoch 1/1 done: test accuracy"));
  EXPECT_THAT(p->output(), HasSubstr("== pstrain summary"));

  auto text = ReadFileToString(dir + "/summary.json");
  ASSERT_TRUE(text.ok()) << text.status();
  proto::RunSummary s;
  ASSERT_TRUE(ParseJsonMessage(*text, "summary.json", &s).ok());
  EXPECT_EQ(s.mode(), "sync");
  EXPECT_EQ(s.num_ps(), 1);
  EXPECT_EQ(s.num_workers(), 2);
  EXPECT_EQ(s.epochs(), 1);
  EXPECT_EQ(s.global_batch(), 256);
  EXPECT_GT(s.final_test_accuracy(), 0.1);
  EXPECT_LE(s.final_test_accuracy(), 1.0);
  EXPECT_GT(s.wall_seconds(), s.train_seconds());
  EXPECT_GT(s.train_images_per_sec(), 0);
  EXPECT_EQ(s.updates_applied(), 30);
  EXPECT_EQ(s.stale_gradients_dropped(), 0);
  EXPECT_EQ(s.mean_staleness(), 0);
  EXPECT_EQ(s.tasks_size(), 3);
  EXPECT_THAT(s.command(), HasSubstr("launch"));
  for (const char* f : {"/cluster_spec.json", "/logs/ps-0.log", "/logs/worker-0.log",
                        "/logs/worker-1.log", "/steps_worker0.csv", "/steps_worker1.csv",
                        "/epochs.csv", "/evals.csv", "/final_params.f32"}) {
    EXPECT_TRUE(FileExists(dir + f)) << f;
  }
  ExpectAllGone(TaskPids(p->output()), 5);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Launch, RemovesAnEarlierRunsOutputsOnceAndSaysSo) {
  const std::string dir = testing::MakeTempDir("rerun");
  for (const char* f : {"/summary.json", "/final_params.f32", "/epochs.csv", "/evals.csv",
                        "/steps_worker1.csv", "/steps_worker5.csv", "/notes.txt"}) {
    ASSERT_TRUE(WriteFileAtomic(dir + f, "stale").ok());
  }
  auto p = StartLaunch(dir, {"--mode=sync", "--max_steps=3", "--echo=all"});
  ASSERT_NE(p, nullptr);
  auto code = p->Wait(240);
  ASSERT_TRUE(code.ok()) << p->output();
  EXPECT_EQ(*code, 0) << p->output();
  EXPECT_THAT(p->output(), HasSubstr(absl::StrCat(
      "pstrain: removed the outputs of an earlier run from ", dir,
      ": epochs.csv, evals.csv, final_params.f32, steps_worker1.csv, steps_worker5.csv, summary.json")));
  EXPECT_EQ(Count(p->output(), "removed the outputs of an earlier run"), 1) << p->output();
  EXPECT_FALSE(FileExists(dir + "/steps_worker5.csv"));
  EXPECT_EQ(*ReadFileToString(dir + "/notes.txt"), "stale");
  proto::RunSummary s;
  ASSERT_TRUE(ParseJsonMessage(*ReadFileToString(dir + "/summary.json"), "summary.json", &s).ok());
  EXPECT_EQ(s.steps_per_worker(), 3);
}

TEST(Launch, BadSpecExitsTwoAndStartsNothing) {
  const std::string dir = testing::MakeTempDir("badspec");
  ASSERT_TRUE(WriteFileAtomic(dir + "/spec.json", R"({"cluster": {"worker": ["localhost:1"]}})").ok());
  auto p = RunningProcess::Start(BinaryPath("pstrain"),
                                 {"launch", "--cluster_spec=" + dir + "/spec.json", "--run_dir=" + dir});
  ASSERT_NE(p, nullptr);
  auto code = p->Wait(30);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2);
  EXPECT_THAT(p->output(), HasSubstr("cluster.ps"));
  EXPECT_TRUE(TaskPids(p->output()).empty());
}

TEST(Launch, LaunchesStartedTogetherTakeADefaultRunDirectoryEach) {
  // No --run_dir: runs/<time>-<mode> in the current directory, made by the
  // launch that takes it (then -2, ...). Two started in one second used to
  // share one, each overwriting the other's files. Data that is not there
  // ends them once each has written its launch.json there; a spec that
  // cannot be read ends one before it makes a directory.
  const std::string dir = testing::MakeTempDir("default_run_dirs");
  ASSERT_TRUE(WriteFileAtomic(dir + "/spec.json",
                              R"({"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]}})")
                  .ok());
  ASSERT_TRUE(
      WriteFileAtomic(dir + "/bad.json", R"({"cluster": {"worker": ["localhost:1"]}})").ok());
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  std::vector<std::unique_ptr<RunningProcess>> launches;
  for (int i = 0; i < 3; ++i) {
    launches.push_back(RunningProcess::Start(
        BinaryPath("pstrain"), {"launch", "--cluster_spec=" + dir + "/spec.json", "--free_ports",
                                "--max_restarts=0", "--data_dir=" + dir + "/no_data"}));
  }
  launches.push_back(RunningProcess::Start(BinaryPath("pstrain"),
                                           {"launch", "--cluster_spec=" + dir + "/bad.json"}));
  std::filesystem::current_path(before);
  for (auto& p : launches) {
    ASSERT_NE(p, nullptr);
    auto code = p->Wait(60);
    ASSERT_TRUE(code.ok());
    EXPECT_EQ(*code, 2) << p->output();
  }
  int run_dirs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/runs")) {
    EXPECT_TRUE(FileExists(entry.path().string() + "/launch.json")) << entry.path();
    ++run_dirs;
  }
  EXPECT_EQ(run_dirs, 3);
}

TEST(Launch, UnknownCommandAndBadFlagsExitTwo) {
  auto p = RunningProcess::Start(BinaryPath("pstrain"), {"lunch"});
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p->Wait(30), 2);
  EXPECT_THAT(p->output(), HasSubstr("unknown command \"lunch\""));
  p = RunningProcess::Start(BinaryPath("pstrain"),
                            {"launch", "--cluster_spec=x.json", "--mode=fast"});
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p->Wait(30), 2);
  EXPECT_THAT(p->output(), HasSubstr("--mode: \"fast\""));
  // What the command line's parser refuses: the user's configuration too.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"launch", "--bogus_flag"},
                                             {"launch", "--epochs=many"},
                                             {"plan", "--workers"},
                                             {"launch", "--nomode"}}) {
    p = RunningProcess::Start(BinaryPath("pstrain"), args);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(*p->Wait(30), 2) << args[1] << ": " << p->output();
    EXPECT_THAT(p->output(), HasSubstr("ERROR: ")) << args[1];
  }
  for (const char* binary : {"worker", "ps_server"}) {
    p = RunningProcess::Start(BinaryPath(binary), {"--bogus_flag=1"});
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(*p->Wait(30), 2) << binary << ": " << p->output();
    EXPECT_THAT(p->output(), HasSubstr("Unknown command line flag 'bogus_flag'")) << binary;
  }
  // keygen onto a file already there: the user's to move, not overwritten.
  const std::string secret = testing::MakeTempDir("keygen") + "/job.secret";
  for (int expected : {0, 2}) {
    p = RunningProcess::Start(BinaryPath("pstrain"), {"keygen", "--out=" + secret});
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(*p->Wait(30), expected) << p->output();
  }
  EXPECT_THAT(p->output(), HasSubstr("exists"));
}

// The restart policy as a user sees it: worker:1 SIGKILLed in an async job
// is restarted (async workers rejoin by themselves), the launch says so and
// succeeds, and the summary counts the restart.
TEST(Launch, RestartsAKilledWorkerAndSaysSo) {
  const std::string dir = testing::MakeTempDir("restart");
  auto p = StartLaunch(dir, {"--mode=async", "--epochs=2", "--echo=all", "--log_every_steps=10"});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForOutput("[worker:1] I", 120)) << p->output();
  ASSERT_TRUE(p->WaitForOutput("epoch 1/2 step 20/", 120)) << p->output();
  std::map<std::string, pid_t> pids = TaskPids(p->output());
  ASSERT_EQ(kill(pids["worker:1"], SIGKILL), 0);
  auto code = p->Wait(240);
  ASSERT_TRUE(code.ok()) << p->output();
  EXPECT_EQ(*code, 0) << p->output();
  EXPECT_THAT(p->output(), HasSubstr("pstrain: worker:1 died (killed by signal 9); restarting it (1 of 3) in 1.0 s"));
  std::smatch restarted;
  const std::string output = p->output();
  ASSERT_TRUE(std::regex_search(output, restarted, std::regex(R"(pstrain: restarted worker:1 \(pid (\d+)\))")))
      << output;
  EXPECT_THAT(output, HasSubstr("restarts 1: worker:1 after "));  // the printed summary
  proto::RunSummary s;
  ASSERT_TRUE(ParseJsonMessage(*ReadFileToString(dir + "/summary.json"), "summary.json", &s).ok());
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_THAT(*ReadFileToString(dir + "/launch.json"), HasSubstr("--max_restarts=3"));
  pids["worker:1 again"] = std::stoi(restarted[1]);
  ExpectAllGone(pids, 5);
}

// A cluster that trains for long enough to be interfered with.
class LongLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("longlaunch");
    launcher_ = StartLaunch(dir_, {"--mode=sync", "--epochs=20", "--echo=all", "--max_restarts=0",
                                   "--busy_poll_us=300", "--update_threads=2"});
    ASSERT_NE(launcher_, nullptr);
    ASSERT_TRUE(launcher_->WaitForOutput("step 10/", 120)) << launcher_->output();
    pids_ = TaskPids(launcher_->output());
    ASSERT_EQ(pids_.size(), 3u) << launcher_->output();
  }

  std::string dir_;
  std::unique_ptr<RunningProcess> launcher_;
  std::map<std::string, pid_t> pids_;
};

// The argv of a running process, from /proc.
std::vector<std::string> CommandLine(pid_t pid) {
  auto text = ReadFileToString(absl::StrCat("/proc/", pid, "/cmdline"));
  std::vector<std::string> args;
  if (!text.ok()) return args;
  for (size_t start = 0, end; start < text->size(); start = end + 1) {
    end = text->find('\0', start);
    if (end == std::string::npos) end = text->size();
    args.push_back(text->substr(start, end - start));
  }
  return args;
}

TEST_F(LongLaunch, StartsEachTaskWithItsOptionsAsFlags) {
  const std::vector<std::string> chief = CommandLine(pids_["worker:0"]);
  EXPECT_THAT(chief, Contains("--mode=sync"));
  EXPECT_THAT(chief, Contains("--epochs=20"));
  EXPECT_THAT(chief, Contains("--run_dir=" + dir_));
  EXPECT_THAT(chief, Contains("--clean_run_dir=false"));  // the launcher cleaned RUN_DIR
  EXPECT_THAT(chief, Contains("--straggler_delay_ms=0"));
  const std::vector<std::string> ps = CommandLine(pids_["ps:0"]);
  EXPECT_THAT(ps, Contains("--peer_timeout_s=10"));
  EXPECT_THAT(ps, Contains("--max_message_mb=1024"));
  // A training flag both sides take.
  EXPECT_THAT(chief, Contains("--busy_poll_us=300"));
  EXPECT_THAT(ps, Contains("--busy_poll_us=300"));
  // The ps's own, which the chief does not take.
  EXPECT_THAT(ps, Contains("--update_threads=2"));
  EXPECT_THAT(chief, ::testing::Not(Contains(HasSubstr("--update_threads"))));
}

// LongLaunch runs with --max_restarts=0: a dead task is not restarted.
TEST_F(LongLaunch, ADeadTaskStopsTheRestAndIsNamed) {
  ASSERT_EQ(kill(pids_["worker:1"], SIGKILL), 0);
  auto code = launcher_->Wait(30);
  ASSERT_TRUE(code.ok()) << launcher_->output();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(launcher_->output(), HasSubstr("worker:1 failed (killed by signal 9"));
  ExpectAllGone(pids_, 10);
}

// Tells ps:0 to shut down as its chief would (with the run's job secret,
// which the launcher made): it exits 0 while the chief is still training.
void ShutDownPs0(const std::string& run_dir) {
  auto text = ReadFileToString(run_dir + "/cluster_spec.json");
  ASSERT_TRUE(text.ok()) << text.status();
  auto spec = ClusterSpec::FromJson(*text, "cluster_spec.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto secret = JobSecret::Load(run_dir + "/job.secret");
  ASSERT_TRUE(secret.ok()) << secret.status();
  const int port = ParseHostPort(spec->Address({TaskType::kPs, 0}))->port;
  testing::ProtocolClient chief(testing::AuthenticatedAs(*secret, "worker:0", port, spec->JobId()));
  auto reply = chief.Call(chief.Header(proto::SHUTDOWN));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->header.error().code(), 0) << reply->header.error().message();
}

TEST_F(LongLaunch, APsExitingZeroBeforeTrainingIsDoneFailsTheLaunchNamingIt) {
  ShutDownPs0(dir_);
  auto code = launcher_->Wait(60);
  ASSERT_TRUE(code.ok()) << launcher_->output();
  EXPECT_EQ(*code, 1) << launcher_->output();
  EXPECT_THAT(launcher_->output(), HasSubstr("ps:0 exited (code 0) before training finished"));
  EXPECT_FALSE(FileExists(dir_ + "/summary.json"));
  ExpectAllGone(pids_, 10);
}

TEST_F(LongLaunch, SigtermStopsEverythingWithinFiveSeconds) {
  const int64_t start = MonotonicMicros();
  launcher_->Signal(SIGTERM);
  auto code = launcher_->Wait(30);
  ASSERT_TRUE(code.ok()) << launcher_->output();
  EXPECT_EQ(*code, 130);
  EXPECT_LT(SecondsSince(start), 5.0);
  EXPECT_THAT(launcher_->output(), HasSubstr("interrupted by signal 15"));
  ExpectAllGone(pids_, 1);
}

TEST_F(LongLaunch, AKilledLauncherLeavesNoOrphans) {
  launcher_->Signal(SIGKILL);
  ASSERT_TRUE(launcher_->Wait(30).ok());
  ExpectAllGone(pids_, 10);
}

}  // namespace
}  // namespace pstrain

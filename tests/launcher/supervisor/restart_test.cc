// Restarts, faults and the deadline of Launch (launcher/supervisor/launch.h), on
// real processes: shell scripts standing in for ps_server and worker, since
// the launcher only starts processes and watches how they end; then once
// with the real binaries (an async job whose worker:1 is SIGKILLed).

#include <signal.h>
#include <sys/stat.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/supervisor/launch.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using testing::ExpectAllGone;

// Every life of a fake task (<binary><index>: worker1, ps_server0): counts
// itself in DIR/<task>.lives ($n), appends its arguments and TF_CONFIG to
// DIR/<task>.commands and its pid to DIR/pids and DIR/<task>.pid, says
// which life it is, then runs the body (with $rank, its index). finish() is
// what a chief does at the end: summary.json, then DIR/done (which the
// fake ps waits for).
constexpr char kScript[] = R"(#!/bin/sh
dir='$DIR'
rank=${TF_CONFIG##*\"index\": }
rank=${rank%%\}*}
task=$NAME$rank
n=$(( $(cat "$dir/$task.lives" 2>/dev/null || echo 0) + 1 ))
echo $n > "$dir/$task.lives"
echo "$* $TF_CONFIG" >> "$dir/$task.commands"
echo $$ >> "$dir/pids"
echo $$ > "$dir/$task.pid.new" && mv "$dir/$task.pid.new" "$dir/$task.pid"
echo "$task life $n"
finish() { echo '{}' > "$dir/run/summary.json"; touch "$dir/done"; exit 0; }
$BODY
)";

constexpr char kPsUntilDone[] = R"(while [ ! -e "$dir/done" ]; do sleep 0.05; done; exit 0)";
constexpr char kForever[] = "while :; do sleep 0.05; done";

// A spec of one ps and `workers` workers (worker:0 is the chief) run by
// fake binaries: every worker runs `worker_body`.
class FakeCluster {
 public:
  explicit FakeCluster(const std::string& worker_body, const std::string& ps_body = kPsUntilDone,
                       int workers = 1)
      : dir_(testing::MakeTempDir("fake")) {
    WriteScript("worker", worker_body);
    WriteScript("ps_server", ps_body);
    const std::string spec = workers == 1
        ? R"({"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]}})"
        : R"({"cluster": {"worker": ["localhost:1", "localhost:3"], "ps": ["localhost:2"]}})";
    EXPECT_TRUE(WriteFileAtomic(dir_ + "/spec.json", spec).ok());
  }

  LaunchOptions Options() const {
    LaunchOptions o;
    o.cluster_spec_path = dir_ + "/spec.json";
    o.run_dir = dir_ + "/run";
    o.bin_dir = dir_;
    o.insecure = true;
    o.echo = EchoMode::kNone;
    o.restart_backoff_s = 0.05;
    o.stop_grace_s = 2;
    o.deadline_s = 120;  // a broken launcher fails the test instead of hanging it
    return o;
  }

  std::string File(const std::string& name) const {
    auto text = ReadFileToString(dir_ + "/" + name);
    return text.ok() ? *text : std::string();
  }
  int Lives(const std::string& name) const {
    int n = 0;
    return absl::SimpleAtoi(absl::StripAsciiWhitespace(File(name + ".lives")), &n) ? n : 0;
  }
  std::map<std::string, pid_t> Pids() const {
    std::map<std::string, pid_t> pids;
    for (absl::string_view line : absl::StrSplit(File("pids"), '\n', absl::SkipEmpty())) {
      int pid = 0;
      if (absl::SimpleAtoi(line, &pid)) pids[absl::StrCat("life ", pids.size())] = pid;
    }
    return pids;
  }
  const std::string& dir() const { return dir_; }

 private:
  void WriteScript(const std::string& name, const std::string& body) {
    std::string text = kScript;
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"$DIR", dir_}, {"$NAME", name}, {"$BODY", body}}) {
      for (size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
    }
    const std::string path = dir_ + "/" + name;
    ASSERT_TRUE(WriteFileAtomic(path, text).ok());
    ASSERT_EQ(chmod(path.c_str(), 0755), 0);
  }

  std::string dir_;
};

TEST(RestartBackoff, DoublesPerRestartOfATaskUpToEightSeconds) {
  LaunchOptions o;
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.restart_backoff_s, 1.0);
  std::vector<double> waits;
  for (int r = 1; r <= 6; ++r) waits.push_back(RestartBackoffSeconds(o, r));
  EXPECT_EQ(waits, (std::vector<double>{1, 2, 4, 8, 8, 8}));
  o.restart_backoff_s = 3;
  EXPECT_EQ(RestartBackoffSeconds(o, 1), 3);
  EXPECT_EQ(RestartBackoffSeconds(o, 2), 6);
  EXPECT_EQ(RestartBackoffSeconds(o, 3), 8);
  o.restart_backoff_s = 0;
  EXPECT_EQ(RestartBackoffSeconds(o, 3), 0);
  // A first wait longer than the cap (a pod that takes long to come back)
  // is kept, not doubled.
  o.restart_backoff_s = 20;
  EXPECT_EQ(RestartBackoffSeconds(o, 1), 20);
  EXPECT_EQ(RestartBackoffSeconds(o, 3), 20);
}

TEST(LaunchRestarts, RestartsAFailedTaskWithTheSameCommandAfterItsBackoff) {
  // The chief fails with exit 1, then is killed by SIGKILL, then finishes.
  const FakeCluster cluster(R"(case $n in 1) exit 1;; 2) kill -9 $$;; esac; finish)");
  LaunchOptions o = cluster.Options();
  o.restart_backoff_s = 0.2;
  LaunchEvents events;
  auto result = Launch(o, &events);
  ASSERT_TRUE(result.ok()) << result.status();

  ASSERT_THAT(events.restarts, SizeIs(2));
  const proto::TaskRestart& first = events.restarts[0];
  const proto::TaskRestart& second = events.restarts[1];
  EXPECT_EQ(first.task(), "worker:0");
  EXPECT_EQ(first.exit_code(), 1);
  EXPECT_EQ(first.reason(), "exit code 1");
  EXPECT_EQ(second.exit_code(), -9);
  EXPECT_EQ(second.reason(), "killed by signal 9");
  EXPECT_GE(first.after_s(), 0.2);                      // the first backoff
  EXPECT_GE(second.after_s() - first.after_s(), 0.4);   // doubled
  EXPECT_THAT(first.at(), ::testing::EndsWith("+00:00"));  // RFC 3339, UTC

  const proto::RunSummary& s = result->summary;
  EXPECT_EQ(s.restarts(), 2);
  ASSERT_EQ(s.task_restarts_size(), 2);
  EXPECT_EQ(s.task_restarts(1).reason(), "killed by signal 9");
  ASSERT_EQ(s.tasks_size(), 2);
  for (const proto::TaskExit& t : s.tasks()) EXPECT_EQ(t.restarts(), t.task() == "worker:0" ? 2 : 0) << t.task();
  proto::RunSummary on_disk;  // what summary.json says
  ASSERT_TRUE(ParseJsonMessage(cluster.File("run/summary.json"), "summary.json", &on_disk).ok());
  EXPECT_EQ(on_disk.restarts(), 2);

  EXPECT_EQ(cluster.Lives("worker0"), 3);
  EXPECT_EQ(cluster.Lives("ps_server0"), 1);
  const std::vector<std::string> commands = absl::StrSplit(cluster.File("worker0.commands"), '\n', absl::SkipEmpty());
  ASSERT_THAT(commands, SizeIs(3));
  EXPECT_EQ(commands[1], commands[0]);  // the same arguments and TF_CONFIG
  EXPECT_EQ(commands[2], commands[0]);
  const std::string log = cluster.File("run/logs/worker-0.log");
  const size_t life2 = log.find("----- restarted (1 of 3) after: exit code 1 -----\nworker0 life 2");
  const size_t life3 = log.find("----- restarted (2 of 3) after: killed by signal 9 -----\nworker0 life 3");
  EXPECT_NE(life2, std::string::npos) << log;
  EXPECT_NE(life3, std::string::npos) << log;
  EXPECT_LT(log.find("worker0 life 1"), life2) << log;
  EXPECT_LT(life2, life3) << log;
}

TEST(LaunchRestarts, ATaskFailingWithTheUsageExitCodeIsNotRestarted) {
  const FakeCluster cluster("exit 2");
  LaunchEvents events;
  auto result = Launch(cluster.Options(), &events);
  // The launch fails as the task did: exit 2, bad configuration or input.
  ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("worker:0 failed (exit code 2), a bad configuration or input: "
                                                   "not restarted"));
  EXPECT_TRUE(events.restarts.empty());
  EXPECT_EQ(cluster.Lives("worker0"), 1);
  ExpectAllGone(cluster.Pids(), 5);
}

// The failed task's own last error line is in the launcher's message (the
// error it exited with, not the lines after it), before where its log is;
// glog's prefix goes, and a long line is cut.
TEST(LaunchRestarts, TheFailureSaysWhatTheTaskLastSaid) {
  const FakeCluster cluster(
      "echo 'I1126 12:00:00.000000 7 main.cc:1] starting'; "
      "echo 'E1126 12:00:01.000000 7 main.cc:2] TF_CONFIG: cluster.ps: missing or empty'; "
      "echo 'I1126 12:00:02.000000 7 main.cc:3] bye'; exit 2");
  auto result = Launch(cluster.Options());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("worker:0 failed (exit code 2), a bad configuration or input: not restarted; "
                        "it said: \"TF_CONFIG: cluster.ps: missing or empty\"; see "))
      << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("logs/worker-0.log")) << result.status();
  // ExitWith's line is an error line too; a long one is cut.
  const FakeCluster loud("echo \"worker: error: $(printf 'x%.0s' $(seq 1 2000))\"; echo done; exit 2");
  result = Launch(loud.Options());
  ASSERT_FALSE(result.ok());
  const std::string message(result.status().message());
  EXPECT_THAT(message, HasSubstr("it said: \"worker: error: xxx")) << message;
  EXPECT_THAT(message, HasSubstr("xxx...\"; see ")) << message;
  EXPECT_LT(message.size(), 1000u) << message;
  // A task with no error line: its last line.
  const FakeCluster quiet("echo 'nothing is wrong here'; exit 2");
  result = Launch(quiet.Options());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("it said: \"nothing is wrong here\"")) << result.status();
  // Killed by a signal: an error line of its own (a CHECK's), never just
  // its last line (NoneWithMaxRestartsZero).
  const FakeCluster crashed("echo 'F1126 12:00:00.000000 7 x.cc:9] Check failed: n > 0'; kill -9 $$");
  LaunchOptions o = crashed.Options();
  o.max_restarts = 0;
  result = Launch(o);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("worker:0 failed (killed by signal 9 (Killed)); it said: \"Check failed: n > 0\"; see "))
      << result.status();
}

TEST(LaunchRestarts, ATaskOutOfRestartsFailsTheLaunchNamingItAndTheCount) {
  const FakeCluster cluster("exit 1");
  LaunchOptions o = cluster.Options();
  o.max_restarts = 2;
  LaunchEvents events;
  auto result = Launch(o, &events);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kAborted) << result.status();
  EXPECT_THAT(result.status().message(),
              HasSubstr("worker:0 failed (exit code 1) after it was restarted 2 times (--max_restarts=2)"));
  EXPECT_THAT(events.restarts, SizeIs(2));
  EXPECT_EQ(cluster.Lives("worker0"), 3);
  ExpectAllGone(cluster.Pids(), 5);
}

// A task that fails the same way twice (its exit code and last words: a
// python3 without torch, a port taken) is not restarted a third time; one
// whose failures differ is, up to --max_restarts.
TEST(LaunchRestarts, ATaskThatFailsTheSameWayTwiceIsNotRestartedAgain) {
  const FakeCluster same("echo \"ModuleNotFoundError: No module named 'torch'\"; exit 1");
  LaunchOptions o = same.Options();
  o.max_restarts = 3;
  LaunchEvents events;
  auto result = Launch(o, &events);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("worker:0 failed (exit code 1) the same way as before its restart: not "
                        "restarted again"));
  EXPECT_THAT(result.status().message(), HasSubstr("No module named 'torch'"));
  EXPECT_EQ(same.Lives("worker0"), 2);
  // Each life says something else: every restart is taken.
  const FakeCluster differing("echo \"error in process $$\"; exit 1");
  o = differing.Options();
  o.max_restarts = 2;
  result = Launch(o);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("after it was restarted 2 times"));
  EXPECT_EQ(differing.Lives("worker0"), 3);
}

TEST(LaunchRestarts, NoneWithMaxRestartsZero) {
  const FakeCluster cluster("kill -9 $$");
  LaunchOptions o = cluster.Options();
  o.max_restarts = 0;
  auto result = Launch(o);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kAborted) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("worker:0 failed (killed by signal 9 (Killed)); see "));
  EXPECT_EQ(cluster.Lives("worker0"), 1);
}

// worker:1 fails at once and its restart is due only after the chief (which
// waits for that failure) has finished training: the restart is dropped,
// and the launch succeeds saying how worker:1 ended.
TEST(LaunchRestarts, TrainingDoneDropsARestartStillWaiting) {
  const FakeCluster cluster(R"sh([ $rank -eq 1 ] && exit 1
while [ ! -e "$dir/worker1.pid" ] || kill -0 $(cat "$dir/worker1.pid") 2>/dev/null; do sleep 0.05; done
finish)sh", kPsUntilDone, /*workers=*/2);
  LaunchOptions o = cluster.Options();
  o.restart_backoff_s = 30;
  LaunchEvents events;
  const int64_t start = MonotonicMicros();
  auto result = Launch(o, &events);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(SecondsSince(start), 20);  // not the backoff
  EXPECT_TRUE(events.restarts.empty());
  EXPECT_EQ(cluster.Lives("worker1"), 1);
  ASSERT_EQ(result->summary.tasks_size(), 3);
  for (const proto::TaskExit& t : result->summary.tasks()) {
    EXPECT_EQ(t.exit_code(), t.task() == "worker:1" ? 1 : 0) << t.task();
    EXPECT_EQ(t.restarts(), 0) << t.task();
  }
}

// worker:1's replacement comes up as the chief finishes and would wait for
// its peers: it is stopped chief_exit_grace_s after training is done, which
// is not a failure.
TEST(LaunchRestarts, TrainingDoneStopsALateReplacement) {
  const FakeCluster cluster(R"sh(if [ $rank -eq 1 ]; then [ $n -eq 1 ] && exit 1; while :; do sleep 0.05; done; fi
while [ "$(cat "$dir/worker1.lives" 2>/dev/null)" != 2 ]; do sleep 0.05; done
finish)sh", kPsUntilDone, /*workers=*/2);
  LaunchOptions o = cluster.Options();
  o.chief_exit_grace_s = 0.5;
  LaunchEvents events;
  auto result = Launch(o, &events);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(events.restarts, SizeIs(1));
  EXPECT_EQ(cluster.Lives("worker1"), 2);
  for (const proto::TaskExit& t : result->summary.tasks()) {
    EXPECT_EQ(t.exit_code(), t.task() == "worker:1" ? -SIGTERM : 0) << t.task();
    EXPECT_EQ(t.restarts(), t.task() == "worker:1" ? 1 : 0) << t.task();
  }
  ExpectAllGone(cluster.Pids(), 5);
}

// worker:1 never died but missed the end (frozen, or rejoining just as the
// job finished) and waits for ps tasks that have exited: once they all
// have, it is stopped chief_exit_grace_s after training is done, which is
// not a failure (as a TFJob succeeds with its chief).
TEST(LaunchRestarts, TrainingDoneStopsAWorkerThatMissedTheEndOnceEveryPsExited) {
  const FakeCluster cluster(R"sh(if [ $rank -eq 1 ]; then while :; do sleep 0.05; done; fi
finish)sh", kPsUntilDone, /*workers=*/2);
  LaunchOptions o = cluster.Options();
  o.chief_exit_grace_s = 0.5;
  o.deadline_s = 60;  // before the fix: worker:1 kept the launch waiting
  auto result = Launch(o);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const proto::TaskExit& t : result->summary.tasks()) {
    EXPECT_EQ(t.exit_code(), t.task() == "worker:1" ? -SIGTERM : 0) << t.task();
    EXPECT_EQ(t.restarts(), 0) << t.task();
  }
  ExpectAllGone(cluster.Pids(), 5);
}

TEST(LaunchDeadline, ReturnsDeadlineExceededAndLeavesNoProcessBehind) {
  const FakeCluster cluster(kForever, kForever);
  LaunchOptions o = cluster.Options();
  o.deadline_s = 1;
  const int64_t start = MonotonicMicros();
  auto result = Launch(o);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("did not finish within 1 s: presumed hung"));
  EXPECT_LT(SecondsSince(start), 1 + o.stop_grace_s + 10);
  EXPECT_THAT(cluster.Pids(), SizeIs(2));
  ExpectAllGone(cluster.Pids(), 5);
}

TEST(LaunchFaults, AStoppedTaskIsContinuedAfterItsStop) {
  // The chief is busy for a while (40 x 50 ms), long enough to be stopped.
  const FakeCluster cluster("i=0; while [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; finish");
  LaunchOptions o = cluster.Options();
  o.faults = {{0.2, {TaskType::kWorker, 0}, FaultKind::kStop, 0.5}};
  LaunchEvents events;
  auto result = Launch(o, &events);  // a chief never continued would hang until the deadline
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_THAT(events.faults, SizeIs(1));
  const FaultRecord& f = events.faults[0];
  EXPECT_EQ(f.fault.kind, FaultKind::kStop);
  EXPECT_GE(f.sent_s, 0.2);
  EXPECT_GE(f.resumed_s - f.sent_s, 0.5 - 0.01);
  EXPECT_GT(f.pid, 0);
  ASSERT_THAT(result->faults, SizeIs(1));
  EXPECT_EQ(result->faults[0].resumed_s, f.resumed_s);
  EXPECT_EQ(result->summary.restarts(), 0);
}

TEST(LaunchFaults, AStoppedTaskIsContinuedSoThatStoppingTheLaunchEndsIt) {
  const FakeCluster cluster(kForever, kForever);
  LaunchOptions o = cluster.Options();
  o.faults = {{0.1, {TaskType::kWorker, 0}, FaultKind::kStop, 600}};
  o.deadline_s = 1.5;
  o.stop_grace_s = 30;  // SIGKILL would come too late: SIGTERM must end it
  LaunchEvents events;
  const int64_t start = MonotonicMicros();
  auto result = Launch(o, &events);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_LT(SecondsSince(start), 20);
  ASSERT_THAT(events.faults, SizeIs(1));
  EXPECT_GE(events.faults[0].resumed_s, 1.0);  // by StopAll, not by plan
  ExpectAllGone(cluster.Pids(), 5);
}

TEST(LaunchFaults, AKilledTaskIsRestartedAndAFaultForATaskNotInTheSpecIsRefused) {
  const FakeCluster cluster(R"([ $n -eq 1 ] && while :; do sleep 0.05; done; finish)");
  LaunchOptions o = cluster.Options();
  o.faults = {{0.2, {TaskType::kWorker, 0}, FaultKind::kKill, 0}};
  LaunchEvents events;
  auto result = Launch(o, &events);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_THAT(events.faults, SizeIs(1));
  EXPECT_EQ(events.faults[0].resumed_s, -1);
  ASSERT_EQ(result->summary.task_restarts_size(), 1);
  EXPECT_EQ(result->summary.task_restarts(0).reason(), "killed by signal 9");

  o.faults = {{0.2, {TaskType::kWorker, 3}, FaultKind::kKill, 0}};
  result = Launch(o);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("worker:3 is not in"));
}

// A fault timed by training progress is sent when the chief's progress
// lines reach its share of the steps (of max_steps here, 8 of the 10 an
// epoch has), however long that takes, and not before.
TEST(LaunchFaults, AFaultTimedByProgressIsSentWhenTheChiefsStepsReachIt) {
  // The chief prints a line that does not add up (step 99 of 10: ignored),
  // steps 1-3, waits 1 s, prints step 4 (half of 8), waits for worker:1's
  // second life, then prints the rest and finishes.
  const FakeCluster cluster(R"sh(
if [ $rank -eq 1 ]; then
  [ $n -eq 1 ] && while :; do sleep 0.05; done
  while [ ! -e "$dir/done" ]; do sleep 0.05; done; exit 0
fi
step() { echo "I1126 10:00:00.000000 1 metrics_recorder.cc:177] epoch 1/1 step $1/10 loss 0.5  100 img/s (this worker)"; }
step 99; step 1; step 2; step 3; sleep 1; step 4
while [ "$(cat "$dir/worker1.lives" 2>/dev/null)" != 2 ]; do sleep 0.05; done
step 5; step 6; step 7; step 8; finish)sh",
                            kPsUntilDone, /*workers=*/2);
  LaunchOptions o = cluster.Options();
  o.train.max_steps = 8;
  Fault kill{0, {TaskType::kWorker, 1}, FaultKind::kKill, 0};
  kill.at_progress = 0.5;
  o.faults = {kill};
  LaunchEvents events;
  auto result = Launch(o, &events);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_THAT(events.faults, SizeIs(1));
  EXPECT_EQ(events.faults[0].sent_progress, 0.5);
  // Not at step 3, before the chief's 1 s wait. sent_s counts from the
  // last task's start, which comes after the chief's (under ASan by tens
  // of ms): the wait shows as a little less than 1 s, step 3 as ~0.
  EXPECT_GE(events.faults[0].sent_s, 0.5);
  EXPECT_EQ(cluster.Lives("worker1"), 2);
  ASSERT_EQ(result->summary.task_restarts_size(), 1);
  EXPECT_EQ(result->summary.task_restarts(0).reason(), "killed by signal 9");
  EXPECT_EQ(DescribeFault(kill), "kill worker:1 at 50% of training");

  // With a time too: a first fault goes by progress only (its time, 100 s,
  // never comes), and a later one by its time once the first has gone out,
  // if that comes first: here the chief holds step 4 until worker:1 has
  // restarted, so only the time (0.5 s) can send the kill.
  const FakeCluster timed(R"sh(
if [ $rank -eq 1 ]; then
  [ $n -eq 1 ] && while :; do sleep 0.05; done
  while [ ! -e "$dir/done" ]; do sleep 0.05; done; exit 0
fi
step() { echo "I1126 10:00:00.000000 1 metrics_recorder.cc:177] epoch 1/1 step $1/10 loss 0.5  100 img/s (this worker)"; }
step 1; step 2; step 3
while [ "$(cat "$dir/worker1.lives" 2>/dev/null)" != 2 ]; do sleep 0.05; done
step 4; step 5; step 6; step 7; step 8; finish)sh",
                          kPsUntilDone, /*workers=*/2);
  LaunchOptions t = timed.Options();
  t.train.max_steps = 8;
  Fault stop{100, {TaskType::kWorker, 1}, FaultKind::kStop, 0.2};
  stop.at_progress = 0.25;
  kill.at_progress = 0.9;
  kill.at_s = 0.5;
  t.faults = {stop, kill};
  LaunchEvents timed_events;
  result = Launch(t, &timed_events);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_THAT(timed_events.faults, SizeIs(2));
  EXPECT_EQ(timed_events.faults[0].fault.kind, FaultKind::kStop);
  EXPECT_GE(timed_events.faults[0].sent_progress, 0.25);
  EXPECT_LT(timed_events.faults[0].sent_s, 100);
  EXPECT_EQ(timed_events.faults[1].fault.kind, FaultKind::kKill);
  EXPECT_GE(timed_events.faults[1].sent_s, 0.5);
  EXPECT_LE(timed_events.faults[1].sent_progress, 3.0 / 8);  // not by progress
  EXPECT_EQ(DescribeFault(kill), "kill worker:1 at 90% of training or 0.5 s");

  // Progress lines are what times it: none, none of that.
  kill.at_s = 0;
  kill.at_progress = 0.5;
  o.faults = {kill};
  o.train.log_every_steps = 0;
  EXPECT_EQ(Launch(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.train.log_every_steps = 100;
  kill.at_progress = 1.0;
  o.faults = {kill};
  EXPECT_EQ(Launch(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LaunchFaults, ALostTaskIsRestartedNoSoonerThanItsAwayTime) {
  const FakeCluster cluster(R"([ $n -eq 1 ] && while :; do sleep 0.05; done; finish)");
  LaunchOptions o = cluster.Options();  // a backoff of 0.05 s
  o.faults = {{0.2, {TaskType::kWorker, 0}, FaultKind::kLose, 1.5}};
  LaunchEvents events;
  auto result = Launch(o, &events);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_THAT(events.faults, SizeIs(1));
  EXPECT_EQ(events.faults[0].fault.kind, FaultKind::kLose);
  ASSERT_EQ(result->summary.task_restarts_size(), 1);
  EXPECT_EQ(result->summary.task_restarts(0).reason(), "killed by signal 9");
  EXPECT_GE(result->summary.task_restarts(0).after_s() - events.faults[0].sent_s, 1.5 - 0.05);
  EXPECT_EQ(DescribeFault(o.faults[0]), "lose worker:0 at 0.2 s for 1.5 s");
}

// The real binaries: in async mode a restarted worker registers again and
// continues from its clock on the ps, so killing worker:1 costs the job a
// restart, not the run.
TEST(LaunchRestarts, AnAsyncJobSurvivesAKilledWorker) {
  const std::string dir = testing::MakeTempDir("asynckill");
  LaunchOptions o;
  o.cluster_spec_path = testing::SourcePath("cluster_specs/local_1ps_2w.json");
  o.free_ports = true;
  o.run_dir = dir;
  o.bin_dir = testing::BinaryPath("");
  o.train.mode = proto::ASYNC;
  // 1175 steps per worker: training from about 2.5 s to 8.5 s on a quiet
  // 2-core host (50,000 images/s), to about 18 s on a slower or busier
  // one, so the fault at 4 s finds worker:1 training on either.
  o.train.epochs = 5;
  o.train.data_dir = testing::SourcePath("data/mnist");
  o.train.device = "cpu";
  o.train.log_every_steps = 10;
  o.train.peer_timeout_s = 30;
  o.ps.peer_timeout_s = 30;
  o.echo = EchoMode::kNone;
  o.deadline_s = 240;
  o.faults = {{4.0, {TaskType::kWorker, 1}, FaultKind::kKill, 0}};
  LaunchEvents events;
  auto result = Launch(o, &events);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_THAT(events.faults, SizeIs(1));
  const proto::RunSummary& s = result->summary;
  EXPECT_EQ(s.restarts(), 1);
  ASSERT_EQ(s.task_restarts_size(), 1);
  EXPECT_EQ(s.task_restarts(0).task(), "worker:1");
  EXPECT_EQ(s.task_restarts(0).exit_code(), -9);
  EXPECT_GT(s.final_test_accuracy(), 0.5);
  EXPECT_EQ(s.steps_per_worker(), 1175);
  const std::string log = *ReadFileToString(dir + "/logs/worker-1.log");
  const size_t restarted = log.find("----- restarted (1 of 3) after: killed by signal 9 -----");
  ASSERT_NE(restarted, std::string::npos) << log;
  EXPECT_LT(log.find("epoch 1/5 step "), restarted) << "killed before it trained: " << log;
  EXPECT_NE(log.find("continuing from step ", restarted), std::string::npos) << log;
}

}  // namespace
}  // namespace pstrain

#include "launcher/supervisor/launch.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/child_process.h"
#include "common/clock.h"
#include "common/exit_codes.h"
#include "common/file_util.h"
#include "common/free_ports.h"
#include "common/json.h"
#include "common/run_dir.h"
#include "common/status_macros.h"
#include "common/trace_writer.h"
#include "glog/logging.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "launcher/supervisor/command_frontend.h"
#include "launcher/supervisor/netns_harness.h"
#include "launcher/supervisor/progress.h"
#include "launcher/supervisor/task_cpu.h"
#include "transport/job_secret.h"

namespace pstrain {
namespace {

constexpr int kPollMs = 100;

struct Task {
  Task(TaskId task, SpawnOptions how, ChildProcess child, std::unique_ptr<std::ofstream> log_file)
      : id(task), spawn(std::move(how)), process(std::move(child)), log(std::move(log_file)),
        is_ps(task.type == TaskType::kPs) {}

  TaskId id;
  SpawnOptions spawn;  // what it is started, and restarted, with
  ChildProcess process;
  std::string pending;  // output not yet ended by a newline
  std::unique_ptr<std::ofstream> log;
  bool is_ps = false;
  int restarts = 0;            // times started again
  int64_t restart_at_us = 0;   // > 0: dead, to be started again then (monotonic)
  int dead_exit_code = 0;      // how the process to be replaced ended
  double cpu_seconds = 0;      // used by its processes that have exited
  int64_t resume_at_us = 0;    // > 0: stopped by a fault, SIGCONT due then
  int64_t away_until_us = 0;   // > 0: lost by a fault, not restarted before then
  size_t stop_record = 0;      // that fault's index in LaunchEvents::faults
  int64_t leftover_term_us = 0;  // when it got SIGTERM as a leftover (StopLeftovers)
  // Of its current life: its last line that reports an error (glog's E
  // and F lines, a binary's "NAME: error: ..."), and its last line.
  std::string last_error;
  std::string last_line;
  // How its previous life failed (its exit code and last words; "" for
  // none, or a signal): the same failure twice in a row is not restarted
  // again, it would fail the same way (a python3 without torch).
  std::string previous_failure;
  bool failed_the_same_way = false;
};

// The longest part of a task's line a failure message quotes.
constexpr size_t kMaxQuotedChars = 400;

// glog's "E1126 12:00:00.000000 42 f.cc:1] ..." and "F..." lines.
bool IsGlogError(absl::string_view line) {
  return line.size() > 5 && (line[0] == 'E' || line[0] == 'F') && absl::ascii_isdigit(line[1]) &&
         absl::ascii_isdigit(line[4]);
}

// Whether `line` reports an error: a glog error line, or ExitWith's
// "worker: error: ..." (common/exit_codes.h).
bool IsErrorLine(absl::string_view line) {
  return IsGlogError(line) || absl::StrContains(line, ": error: ");
}

// What a failed task last said, for the launcher's message: its last error
// line (else, when `or_last_line`, its last line), without glog's prefix,
// at most kMaxQuotedChars; "" when it said nothing.
std::string LastWords(const Task& t, bool or_last_line) {
  absl::string_view line = t.last_error;
  if (line.empty() && or_last_line) line = t.last_line;
  if (IsGlogError(line)) {
    if (const size_t end = line.find("] "); end != absl::string_view::npos) line.remove_prefix(end + 2);
  }
  line = absl::StripAsciiWhitespace(line);
  if (line.size() <= kMaxQuotedChars) return std::string(line);
  return absl::StrCat(line.substr(0, kMaxQuotedChars), "...");
}

// RUN_DIR/logs/<task>.log, "ps:1" as "ps-1".
std::string LogPath(const LaunchOptions& options, const TaskId& id) {
  return absl::StrCat(options.run_dir, "/logs/", absl::StrReplaceAll(id.ToString(), {{":", "-"}}),
                      ".log");
}

// What the worker `id` is started with.
TrainOptions WorkerOptions(const LaunchOptions& options, const TaskId& id) {
  TrainOptions t = options.train;
  t.run_dir = options.run_dir;
  t.clean_run_dir = false;  // Launch did it (if asked), before any task started
  if (t.checkpoint_dir.empty()) t.checkpoint_dir = options.run_dir + "/checkpoints";
  t.restore = options.resume;
  auto it = options.straggler_delay_ms.find(id.ToString());
  t.straggler_delay_ms = it == options.straggler_delay_ms.end() ? 0.0 : it->second;
  return t;
}

// The user's command as a chief or worker task (LaunchOptions::command):
// what the worker binary would be told goes into its environment.
SpawnOptions CommandSpawn(const LaunchOptions& options, const TrainOptions& train,
                          const std::string& security_arg) {
  SpawnOptions s;
  s.binary = options.command.front();
  s.args.assign(options.command.begin() + 1, options.command.end());
  s.working_dir = options.command_dir;
  google::protobuf::Value flags;
  for (const std::string& arg : train.ToArgs()) {
    flags.mutable_list_value()->add_values()->set_string_value(arg);
  }
  std::string flags_json;
  (void)google::protobuf::util::MessageToJsonString(flags, &flags_json);
  const std::string secret_prefix = "--secret_file=";
  const CommandFrontend frontend = CommandFrontendFor(options.bin_dir);
  s.extra_env = {
      absl::StrCat("PSTRAIN_FLAGS=", flags_json),
      absl::StrCat("PSTRAIN_RUN_DIR=", options.run_dir),
      absl::StrCat("PSTRAIN_LIBRARY=", frontend.library),
      absl::StrCat("PYTHONPATH=", frontend.python_path,
                   options.python_path.empty() ? "" : ":", options.python_path),
      // The script's lines reach the log as it writes them, in order with
      // the library's (and its traceback's).
      "PYTHONUNBUFFERED=1",
  };
  if (absl::StartsWith(security_arg, secret_prefix)) {
    s.extra_env.push_back(
        absl::StrCat("PSTRAIN_SECRET_FILE=", security_arg.substr(secret_prefix.size())));
  } else {
    s.extra_env.push_back("PSTRAIN_INSECURE=1");
  }
  return s;
}

// Whether a task's line belongs in the progress view.
bool IsProgressLine(const Task& task, absl::string_view line) {
  if (!line.empty() && (line[0] == 'W' || line[0] == 'E' || line[0] == 'F')) return true;
  if (!absl::StartsWith(line, "I ")) return true;  // not a log line: a crash message
  return absl::StrContains(line, "] epoch ") && absl::StrContains(line, " done:");
}

// "exit code 1", "killed by signal 9": how a restarted task's process ended.
std::string ExitReason(int exit_code) {
  return exit_code < 0 ? absl::StrCat("killed by signal ", -exit_code) : absl::StrCat("exit code ", exit_code);
}

std::string Seconds(double s) { return absl::StrFormat("%.1f s", s); }

// The tasks the launcher starts (not an evaluator), in the order it starts
// them: ps tasks first, so that workers find them listening.
std::vector<TaskId> StartedTasks(const ClusterSpec& spec) {
  std::vector<TaskId> tasks;
  for (const TaskId& id : spec.AllTasks()) {
    if (id.type == TaskType::kPs) tasks.push_back(id);
  }
  for (const TaskId& id : spec.AllTasks()) {
    if (id.type == TaskType::kChief || id.type == TaskType::kWorker) tasks.push_back(id);
  }
  return tasks;
}

class Supervisor {
 public:
  // `security_arg` (--secret_file=... or --insecure) goes to every task;
  // `events` (not null) gets the faults and restarts.
  // `metrics_ports` (by task, "ps:0"): each task's --metrics_port; empty:
  // none.
  // `net` (null: none): each task runs in its host's namespace.
  Supervisor(const LaunchOptions& options, const ClusterSpec& spec, std::string security_arg,
             std::map<std::string, int> metrics_ports, const NetnsHarness* net,
             LaunchEvents* events);

  absl::Status StartAll();
  absl::Status Wait();
  // nullptr for a task of the spec that the launcher does not start (an evaluator).
  const Task* FindTask(const TaskId& id) const;

 private:
  SpawnOptions SpawnFor(const TaskId& id) const;
  void Print(const std::string& text) const;
  void Pump(Task& task);
  void EmitLine(Task& task, absl::string_view line);
  void ReapAll();
  void OnExit(Task& task);
  void OnTrainingDone();
  void StopLeftovers();
  bool MayRestart(const Task& task, int exit_code) const;
  void HandleExit(Task& task);
  // Tells options_.on_task_state.
  void State(const TaskId& id, const std::string& state);
  void ScheduleRestart(Task& task, int exit_code);
  std::string FailureOf(const Task& task, int exit_code) const;
  // Stops everything for `task`'s failure, the launch's if it is the first.
  void FailOn(Task& task, int exit_code);
  void RestartDue();
  void Restart(Task& task);
  void InjectDueFaults();
  // Follows the chief's progress lines (progress_).
  void TrackProgress(const Task& task, absl::string_view line);
  void Inject(const Fault& fault);
  void Resume(Task& task);
  void ResumeDue();
  void StopAll(const std::string& reason);
  bool AllExited() const;
  void CheckEarlyPsExit();
  void CheckPsAfterWorkers();
  void CheckDeadline();
  // RUN_DIR/task_cpu.csv: every live task's CPU time, when due.
  void SampleCpu();
  void RecordCpu(const Task& task, double cpu_seconds);

  const LaunchOptions& options_;
  const Cancellation* const cancel_;  // options_.cancel, or NeverCancelled()
  const ClusterSpec& spec_;
  const std::string security_arg_;
  const std::map<std::string, int> metrics_ports_;
  const NetnsHarness* const net_;
  LaunchEvents* const events_;
  std::vector<Fault> faults_;  // options_.faults
  std::vector<bool> fault_due_done_;  // [fault] sent, or passed over (its task was down)
  // The share of the training steps done, from the chief's progress lines
  // (the highest yet: a restarted chief resumes behind it).
  double progress_ = 0;
  std::vector<Task> tasks_;
  int64_t launch_us_ = 0;     // when StartAll began (monotonic)
  int64_t started_us_ = 0;    // when every task had been started; 0 before
  std::string failure_;       // first failure, named
  int failed_task_ = -1;      // the task whose failure failure_ is (index), -1: none
  int failed_code_ = 0;       // and its exit code
  int64_t stop_us_ = 0;       // when StopAll sent SIGTERM (monotonic), 0 before
  bool killed_ = false;
  bool deadline_exceeded_ = false;
  int64_t workers_done_us_ = 0;
  bool chief_done_ = false;    // the chief exited 0: training is done
  int64_t chief_done_us_ = 0;
  std::string early_ps_exit_;  // the first ps that exited 0 before that, named
  int64_t early_ps_exit_us_ = 0;
  std::unique_ptr<TaskCpuLog> cpu_log_;  // null: none (it could not be written)
  int64_t cpu_sampled_us_ = 0;           // the last sample (monotonic)
};

// How often RUN_DIR/task_cpu.csv samples the tasks' CPU time.
constexpr int64_t kCpuSampleUs = 200'000;

Supervisor::Supervisor(const LaunchOptions& options, const ClusterSpec& spec, std::string security_arg,
                       std::map<std::string, int> metrics_ports, const NetnsHarness* net,
                       LaunchEvents* events)
    : options_(options),
      cancel_(options.cancel != nullptr ? options.cancel : NeverCancelled()),
      spec_(spec),
      security_arg_(std::move(security_arg)),
      metrics_ports_(std::move(metrics_ports)), net_(net), events_(events),
      faults_(options.faults),
      fault_due_done_(faults_.size(), false) {}

SpawnOptions Supervisor::SpawnFor(const TaskId& id) const {
  SpawnOptions s;
  auto port = metrics_ports_.find(id.ToString());
  const int metrics_port = port == metrics_ports_.end() ? 0 : port->second;
  if (id.type == TaskType::kPs) {
    s.binary = options_.bin_dir + "/ps_server";
    PsServerOptions ps = options_.ps;
    if (ps.checkpoint_dir.empty()) ps.checkpoint_dir = WorkerOptions(options_, id).checkpoint_dir;
    if (options_.train.timeline && ps.timeline_dir.empty()) ps.timeline_dir = options_.run_dir + "/timeline";
    if (metrics_port != 0) {
      ps.metrics_port = metrics_port;
      ps.metrics_host = "127.0.0.1";
    }
    s.args = ps.ToArgs();
    s.args.push_back(security_arg_);
  } else {
    TrainOptions train = WorkerOptions(options_, id);
    if (metrics_port != 0) {
      train.metrics_port = metrics_port;
      train.metrics_host = "127.0.0.1";
    }
    if (!options_.command.empty()) {
      s = CommandSpawn(options_, train, security_arg_);
    } else {
      s.binary = options_.bin_dir + "/worker";
      s.args = train.ToArgs();
      s.args.push_back(security_arg_);
    }
  }
  s.extra_env.push_back(absl::StrCat("TF_CONFIG=", spec_.ToTfConfig(id)));
  if (net_ != nullptr) {
    // `ip netns exec NETNS binary args...` becomes the task (same pid).
    const std::string host = ParseHostPort(spec_.Address(id))->host;
    for (const NetnsHost& h : net_->hosts()) {
      if (h.name != host) continue;
      std::vector<std::string> prefix = net_->ExecPrefix(h);
      s.args.insert(s.args.begin(), s.binary);
      s.args.insert(s.args.begin(), prefix.begin() + 1, prefix.end());
      s.binary = prefix.front();
    }
  }
  return s;
}

void Supervisor::Print(const std::string& text) const {
  if (options_.echo == EchoMode::kNone) return;
  std::printf("pstrain: %s\n", text.c_str());
  std::fflush(stdout);
}

absl::Status Supervisor::StartAll() {
  launch_us_ = MonotonicMicros();
  RETURN_IF_ERROR(MakeDirs(options_.run_dir + "/logs"));
  // A metrics file of the launcher's own: the run goes on without it.
  auto cpu_log = TaskCpuLog::Open(options_.run_dir, options_.resume);
  if (cpu_log.ok()) {
    cpu_log_ = *std::move(cpu_log);
  } else {
    LOG(WARNING) << "no CPU log: " << cpu_log.status().message();
  }
  for (const TaskId& id : StartedTasks(spec_)) {
    const std::string log_path = LogPath(options_, id);
    auto log = std::make_unique<std::ofstream>(log_path);
    if (!*log) return absl::InternalError(absl::StrCat(log_path, ": cannot create"));
    SpawnOptions spawn = SpawnFor(id);
    auto process = ChildProcess::Spawn(spawn);
    if (!process.ok()) {
      StopAll(absl::StrCat("cannot start ", id.ToString(), ": ", process.status().message()));
      return absl::InternalError(failure_);
    }
    Print(absl::StrCat("started ", id.ToString(), " (pid ", process->pid(), ")"));
    State(id, "running");
    tasks_.push_back(Task(id, std::move(spawn), *std::move(process), std::move(log)));
  }
  started_us_ = MonotonicMicros();
  return absl::OkStatus();
}

const Task* Supervisor::FindTask(const TaskId& id) const {
  for (const Task& t : tasks_) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

void Supervisor::EmitLine(Task& task, absl::string_view line) {
  *task.log << line << '\n';
  task.log->flush();
  if (!absl::StripAsciiWhitespace(line).empty()) {
    task.last_line = std::string(line);
    if (IsErrorLine(line)) task.last_error = std::string(line);
  }
  const bool echo = options_.echo == EchoMode::kAll ||
                    (options_.echo == EchoMode::kProgress && IsProgressLine(task, line));
  if (echo) std::printf("[%s] %.*s\n", task.id.ToString().c_str(), static_cast<int>(line.size()), line.data());
  if (options_.on_line) options_.on_line(task.id, line);
  TrackProgress(task, line);
}

void Supervisor::Pump(Task& task) {
  char buf[8192];
  const ssize_t n = read(task.process.output_fd(), buf, sizeof(buf));
  if (n <= 0) {
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (!task.pending.empty()) EmitLine(task, task.pending);
    task.pending.clear();
    task.process.CloseOutput();
    return;
  }
  task.pending.append(buf, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t nl; (nl = task.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    EmitLine(task, absl::string_view(task.pending).substr(start, nl - start));
  }
  task.pending.erase(0, start);
  std::fflush(stdout);
}

void Supervisor::StopAll(const std::string& reason) {
  if (failure_.empty()) failure_ = reason;
  for (Task& t : tasks_) t.restart_at_us = 0;  // no restarts once stopping
  if (stop_us_ != 0) return;
  stop_us_ = MonotonicMicros();
  for (Task& t : tasks_) {
    Resume(t);  // a stopped task could not act on SIGTERM
    t.process.Signal(SIGTERM);
  }
}

void Supervisor::ReapAll() {
  for (Task& t : tasks_) {
    if (!t.process.exited() && t.process.Reap()) OnExit(t);
  }
}

void Supervisor::RecordCpu(const Task& t, double cpu_seconds) {
  if (cpu_log_ == nullptr) return;
  if (absl::Status s = cpu_log_->Record(t.id.ToString(), cpu_seconds); !s.ok()) {
    LOG(WARNING) << "CPU log stopped: " << s.message();
    cpu_log_.reset();
  }
}

void Supervisor::SampleCpu() {
  if (cpu_log_ == nullptr || MonotonicMicros() - cpu_sampled_us_ < kCpuSampleUs) return;
  cpu_sampled_us_ = MonotonicMicros();
  for (const Task& t : tasks_) {
    if (t.process.exited()) continue;
    const absl::StatusOr<double> live = LiveProcessCpuSeconds(t.process.pid());
    if (live.ok()) RecordCpu(t, t.cpu_seconds + *live);
  }
}

void Supervisor::OnExit(Task& t) {
  t.cpu_seconds += t.process.cpu_seconds();
  RecordCpu(t, t.cpu_seconds);
  HandleExit(t);
  const int code = t.process.exit_code();
  State(t.id, code == 0 ? "done" : t.restart_at_us != 0 ? "restarting" : "ended");
}

void Supervisor::HandleExit(Task& t) {
  t.resume_at_us = 0;  // a stopped process that died needs no SIGCONT
  const int code = t.process.exit_code();
  if (code != 0) {
    if (stop_us_ != 0) return;
    if (chief_done_ && (t.restarts > 0 || t.leftover_term_us != 0)) {
      return Print(absl::StrCat(t.id.ToString(), t.restarts > 0 ? " (restarted)" : "", " ended (",
                                ExitReason(code), ") after training was done; not a failure"));
    }
    if (MayRestart(t, code)) return ScheduleRestart(t, code);
    FailOn(t, code);
  } else if (spec_.IsChief(t.id)) {
    OnTrainingDone();
  } else if (t.is_ps && !chief_done_ && early_ps_exit_.empty()) {
    early_ps_exit_ = absl::StrCat(t.id.ToString(), " exited (code 0) before training finished; see ",
                                  LogPath(options_, t.id));
    early_ps_exit_us_ = MonotonicMicros();
  }
}

// A task waiting for its restart is not needed any more.
void Supervisor::OnTrainingDone() {
  chief_done_ = true;
  chief_done_us_ = MonotonicMicros();
  for (Task& t : tasks_) {
    if (t.restart_at_us == 0) continue;
    t.restart_at_us = 0;
    Print(absl::StrCat(t.id.ToString(), " not restarted: training is done"));
  }
}

// A task restarted late may come up when training is done and wait for its
// peers (shut down) until its own timeout; so may a worker that was frozen
// (or declared dead) and rejoined just as the job ended, once every ps has
// exited. After chief_exit_grace_s it is stopped, SIGTERM then SIGKILL, and
// its end is not a failure (OnExit): as a TFJob succeeds with its chief.
void Supervisor::StopLeftovers() {
  if (!chief_done_ || stop_us_ != 0 || SecondsSince(chief_done_us_) <= options_.chief_exit_grace_s) return;
  bool every_ps_exited = true;
  for (const Task& t : tasks_) every_ps_exited = every_ps_exited && (!t.is_ps || t.process.exited());
  for (Task& t : tasks_) {
    if (t.process.exited() || t.is_ps) continue;
    if (t.restarts == 0 && !every_ps_exited) continue;
    if (t.leftover_term_us == 0) {
      Print(absl::StrCat(t.id.ToString(), t.restarts > 0 ? " (restarted)" : "",
                         " is still running when training is done: stopping it"));
      Resume(t);
      t.process.Signal(SIGTERM);
      t.leftover_term_us = MonotonicMicros();
    } else if (SecondsSince(t.leftover_term_us) > options_.stop_grace_s) {
      t.process.Signal(SIGKILL);
    }
  }
}

// Not once training is done or a ps was shut down (nothing left to rejoin),
// nor for a bad configuration (it would fail the same way again).
bool Supervisor::MayRestart(const Task& t, int exit_code) const {
  return exit_code != kExitBadConfig && !chief_done_ && early_ps_exit_.empty() &&
         t.restarts < options_.max_restarts;
}

void Supervisor::ScheduleRestart(Task& t, int exit_code) {
  double backoff = RestartBackoffSeconds(options_, t.restarts + 1);
  // A lost task comes back no sooner than its fault says.
  if (t.away_until_us != 0) backoff = std::max(backoff, (t.away_until_us - MonotonicMicros()) * 1e-6);
  t.away_until_us = 0;
  t.dead_exit_code = exit_code;
  t.restart_at_us = MonotonicMicros() + static_cast<int64_t>(backoff * 1e6);
  Print(absl::StrCat(t.id.ToString(), " died (", ExitReason(exit_code), "); restarting it (", t.restarts + 1,
                     " of ", options_.max_restarts, ") in ", Seconds(backoff)));
}

std::string Supervisor::FailureOf(const Task& t, int exit_code) const {
  std::string what = absl::StrCat(t.id.ToString(), " failed (", DescribeExit(exit_code), ")");
  if (exit_code == kExitBadConfig) {
    absl::StrAppend(&what, ", a bad configuration or input: not restarted");
  } else if (t.failed_the_same_way) {
    absl::StrAppend(&what, " the same way as before its restart: not restarted again, it would "
                           "fail so again");
  } else if (chief_done_) {
    absl::StrAppend(&what, " after training was done: not restarted");
  } else if (!early_ps_exit_.empty()) {
    absl::StrAppend(&what, " after a ps exited: not restarted");
  } else if (options_.max_restarts > 0) {
    absl::StrAppend(&what, " after it was restarted ", t.restarts, t.restarts == 1 ? " time" : " times",
                    " (--max_restarts=", options_.max_restarts, ")");
  }
  return absl::StrCat(what, "; see ", LogPath(options_, t.id));
}

void Supervisor::FailOn(Task& t, int exit_code) {
  if (failure_.empty()) {
    failed_task_ = static_cast<int>(&t - tasks_.data());
    failed_code_ = exit_code;
  }
  StopAll(FailureOf(t, exit_code));
}

void Supervisor::RestartDue() {
  const int64_t now = MonotonicMicros();
  for (Task& t : tasks_) {
    // The dead process's last output is read to its end first.
    if (t.restart_at_us == 0 || now < t.restart_at_us || t.process.output_fd() >= 0) continue;
    // An exit with an error (not a signal: kills and faults are not the
    // task's doing) the same as its previous life's is the task's own.
    const std::string words = LastWords(t, true);
    const std::string failure =
        t.dead_exit_code > 0 && !words.empty() ? absl::StrCat(t.dead_exit_code, ": ", words) : "";
    if (!failure.empty() && failure == t.previous_failure) {
      t.restart_at_us = 0;
      t.failed_the_same_way = true;
      FailOn(t, t.dead_exit_code);
      continue;
    }
    t.previous_failure = failure;
    Restart(t);
  }
}

void Supervisor::Restart(Task& t) {
  t.restart_at_us = 0;
  ++t.restarts;
  t.last_error.clear();
  t.last_line.clear();
  const std::string reason = ExitReason(t.dead_exit_code);
  *t.log << "----- restarted (" << t.restarts << " of " << options_.max_restarts << ") after: " << reason
         << " -----\n";
  t.log->flush();
  auto process = ChildProcess::Spawn(t.spawn);
  if (!process.ok()) {
    return StopAll(absl::StrCat("cannot restart ", t.id.ToString(), ": ", process.status().message()));
  }
  t.process = *std::move(process);
  proto::TaskRestart r;
  r.set_task(t.id.ToString());
  r.set_at(absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  r.set_after_s(SecondsSince(launch_us_));
  r.set_exit_code(t.dead_exit_code);
  r.set_reason(reason);
  events_->restarts.push_back(std::move(r));
  Print(absl::StrCat("restarted ", t.id.ToString(), " (pid ", t.process.pid(), ")"));
  State(t.id, "running");
}

void Supervisor::State(const TaskId& id, const std::string& state) {
  if (options_.on_task_state) options_.on_task_state(id, state);
}

void Supervisor::InjectDueFaults() {
  if (started_us_ == 0) return;
  const double now = SecondsSince(started_us_);
  // In the order given (PlanFaults orders a run's faults by their time),
  // one per pass of the loop: two due at once (one progress line can pass
  // both) go at least a pass apart, so that the second usually finds the
  // first's effect (a killed task reaped, hence not stopped as well).
  const bool one_gone = std::find(fault_due_done_.begin(), fault_due_done_.end(), true) !=
                        fault_due_done_.end();
  for (size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = faults_[i];
    const bool by_time = f.at_progress < 0 || (f.at_s > 0 && one_gone);
    const bool due = (by_time && f.at_s <= now) || (f.at_progress >= 0 && progress_ >= f.at_progress);
    if (fault_due_done_[i] || !due) continue;
    fault_due_done_[i] = true;
    Inject(f);
    return;
  }
}

void Supervisor::TrackProgress(const Task& task, absl::string_view line) {
  if (!spec_.IsChief(task.id)) return;
  const ProgressEvent e = ParseProgressLine(line);
  // A line that does not add up (a task's output is not trusted) moves
  // nothing.
  if (e.kind != ProgressEvent::Kind::kStep || e.epoch < 1 || e.epoch > e.epochs || e.step < 1 ||
      e.step > e.steps) {
    return;
  }
  double total = static_cast<double>(e.epochs) * static_cast<double>(e.steps);
  if (options_.train.max_steps > 0) total = std::min(total, static_cast<double>(options_.train.max_steps));
  const double done = static_cast<double>(e.epoch - 1) * static_cast<double>(e.steps) + static_cast<double>(e.step);
  progress_ = std::max(progress_, std::min(1.0, done / total));
}

void Supervisor::Inject(const Fault& f) {
  const double now = SecondsSince(started_us_);
  std::string what = absl::StrCat("fault: ", FaultSignalName(f.kind), " to ", f.task.ToString(), " at ",
                                  Seconds(now));
  if (f.at_progress >= 0) absl::StrAppendFormat(&what, " (%.0f%% of training)", 100 * progress_);
  Task* task = nullptr;
  for (Task& t : tasks_) {
    if (t.id == f.task) task = &t;
  }
  if (stop_us_ != 0 || task == nullptr || task->process.exited() || task->restart_at_us != 0 ||
      (f.kind == FaultKind::kStop && task->resume_at_us != 0)) {
    return Print(absl::StrCat(what, " not sent: ", stop_us_ != 0 ? "the launch is stopping" : "it is not running"));
  }
  task->process.Signal(f.kind == FaultKind::kStop ? SIGSTOP : SIGKILL);
  events_->faults.push_back({f, now, task->process.pid(), -1, progress_});
  if (f.kind == FaultKind::kLose) {
    task->away_until_us = MonotonicMicros() + static_cast<int64_t>(f.stop_s * 1e6);
  }
  if (f.kind == FaultKind::kStop) {
    task->resume_at_us = MonotonicMicros() + static_cast<int64_t>(f.stop_s * 1e6);
    task->stop_record = events_->faults.size() - 1;
  }
  if (f.kind == FaultKind::kStop) return Print(absl::StrCat(what, " (SIGCONT in ", Seconds(f.stop_s), ")"));
  if (f.kind == FaultKind::kLose) return Print(absl::StrCat(what, " (lost: away ", Seconds(f.stop_s), ")"));
  Print(what);
}

void Supervisor::Resume(Task& t) {
  if (t.resume_at_us == 0) return;
  t.resume_at_us = 0;
  t.process.Signal(SIGCONT);
  const double now = SecondsSince(started_us_);
  events_->faults[t.stop_record].resumed_s = now;
  Print(absl::StrCat("fault: SIGCONT to ", t.id.ToString(), " at ", Seconds(now)));
}

void Supervisor::ResumeDue() {
  const int64_t now = MonotonicMicros();
  for (Task& t : tasks_) {
    if (t.resume_at_us != 0 && now >= t.resume_at_us) Resume(t);
  }
}

void Supervisor::CheckEarlyPsExit() {
  if (stop_us_ == 0 && !chief_done_ && !early_ps_exit_.empty() &&
      SecondsSince(early_ps_exit_us_) > options_.chief_exit_grace_s) {
    StopAll(early_ps_exit_);
  }
}

// A task waiting for its restart has not exited: it is coming back.
bool Supervisor::AllExited() const {
  for (const Task& t : tasks_) {
    if (t.restart_at_us != 0 || !t.process.exited() || t.process.output_fd() >= 0) return false;
  }
  return true;
}

void Supervisor::CheckPsAfterWorkers() {
  if (stop_us_ != 0) return;
  for (const Task& t : tasks_) {
    if (!t.is_ps && (!t.process.exited() || t.restart_at_us != 0)) return;
  }
  if (workers_done_us_ == 0) workers_done_us_ = MonotonicMicros();
  if (SecondsSince(workers_done_us_) > options_.ps_exit_grace_s) {
    StopAll(absl::StrCat("the workers finished but a ps did not exit within ",
                         options_.ps_exit_grace_s, " s (the chief never shut it down?)"));
  }
}

void Supervisor::CheckDeadline() {
  if (options_.deadline_s <= 0 || stop_us_ != 0 || SecondsSince(launch_us_) <= options_.deadline_s) return;
  deadline_exceeded_ = true;
  StopAll(absl::StrCat("did not finish within ", options_.deadline_s, " s: presumed hung"));
}

absl::Status Supervisor::Wait() {
  while (!AllExited()) {
    std::vector<pollfd> fds;
    std::vector<Task*> owners;
    for (Task& t : tasks_) {
      if (t.process.output_fd() < 0) continue;
      fds.push_back({t.process.output_fd(), POLLIN, 0});
      owners.push_back(&t);
    }
    const int r = poll(fds.data(), fds.size(), kPollMs);
    for (size_t i = 0; r > 0 && i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) Pump(*owners[i]);
    }
    ReapAll();
    SampleCpu();
    if (cancel_->cancelled() && stop_us_ == 0) {
      StopAll(absl::StrCat("interrupted by ", cancel_->reason()));
    }
    CheckDeadline();
    InjectDueFaults();
    ResumeDue();
    RestartDue();
    CheckEarlyPsExit();
    StopLeftovers();
    CheckPsAfterWorkers();
    if (stop_us_ != 0 && !killed_ && SecondsSince(stop_us_) > options_.stop_grace_s) {
      for (Task& t : tasks_) t.process.Signal(SIGKILL);
      killed_ = true;
    }
  }
  // What the failed task said last, read to its end only now (a process
  // is reaped before its last output is), before where its log is.
  if (failed_task_ >= 0) {
    const Task& t = tasks_[static_cast<size_t>(failed_task_)];
    const std::string see = absl::StrCat("; see ", LogPath(options_, t.id));
    // Killed by a signal: only an error line of its own (a CHECK's) says why.
    const std::string said = LastWords(t, /*or_last_line=*/failed_code_ > 0);
    if (!said.empty() && absl::EndsWith(failure_, see)) {
      failure_.insert(failure_.size() - see.size(), absl::StrCat("; it said: \"", said, "\""));
    }
  }
  // A task that failed first may have been the victim of a ps that left
  // (its requests refused as the ps shut down): name both.
  if (!chief_done_ && !early_ps_exit_.empty() && !failure_.empty() && failure_ != early_ps_exit_) {
    absl::StrAppend(&failure_, "; ", early_ps_exit_);
  }
  if (cancel_->cancelled()) return absl::CancelledError(failure_);
  if (deadline_exceeded_) return absl::DeadlineExceededError(failure_);
  if (!failure_.empty()) return absl::AbortedError(failure_);
  return absl::OkStatus();
}

// A resumed run keeps its metrics but not the results of the part it
// continues: until it finishes, the directory must not look finished.
absl::Status RemoveRunResults(const std::string& run_dir) {
  for (const char* name : {"/summary.json", "/final_params.f32"}) {
    const std::string path = run_dir + name;
    if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat(path, ": cannot remove: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// RUN_DIR/timeline/*.json (one per worker and ps process) into RUN_DIR/timeline.json.
absl::Status MergeRunTimelines(const std::string& run_dir) {
  const std::string dir = run_dir + "/timeline";
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (absl::EndsWith(e.path().filename().string(), ".json")) files.push_back(e.path().string());
  }
  if (files.empty()) return absl::OkStatus();  // no task got as far as training
  std::sort(files.begin(), files.end());
  RETURN_IF_ERROR(MergeTimelines(files, run_dir + "/timeline.json"));
  std::printf("pstrain: timeline of %zu task file(s) in %s/timeline.json (Perfetto, chrome://tracing)\n",
              files.size(), run_dir.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status WriteLauncherFields(const LaunchOptions& options, const ClusterSpec& spec,
                                 const Supervisor& supervisor, const LaunchEvents& events,
                                 double wall_seconds, LaunchResult* result) {
  const std::string path = options.run_dir + "/summary.json";
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::DataLossError(absl::StrCat("every task exited 0 but the chief wrote no ", path));
  }
  if (absl::Status s = ParseJsonMessage(*text, path, &result->summary); !s.ok()) {
    return absl::DataLossError(s.message());  // the chief's output, not the user's input
  }
  result->summary.set_wall_seconds(wall_seconds);
  result->summary.set_command(options.command_line);
  for (const TaskId& id : spec.AllTasks()) {
    proto::TaskExit* e = result->summary.add_tasks();
    e->set_task(id.ToString());
    const Task* task = supervisor.FindTask(id);
    // 0, or how a restarted task ended after training was done
    e->set_exit_code(task == nullptr ? 0 : task->process.exit_code());
    e->set_restarts(task == nullptr ? 0 : task->restarts);
    e->set_cpu_seconds(task == nullptr ? 0 : task->cpu_seconds);
  }
  result->summary.set_host_cores(static_cast<int>(std::thread::hardware_concurrency()));
  result->summary.set_isolate(options.isolate);
  result->summary.set_link_rate(options.link_rate);
  result->summary.set_insecure(options.insecure);
  result->summary.set_restarts(static_cast<int>(events.restarts.size()));
  for (const proto::TaskRestart& r : events.restarts) *result->summary.add_task_restarts() = r;
  result->wall_seconds = wall_seconds;
  result->faults = events.faults;
  return WriteFileAtomic(path, ToJson(result->summary));
}

}  // namespace

const char* EchoModeName(EchoMode mode) {
  switch (mode) {
    case EchoMode::kAll:
      return "all";
    case EchoMode::kProgress:
      return "progress";
    case EchoMode::kNone:
      return "none";
  }
  return "?";
}

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKill:
      return "kill";
    case FaultKind::kStop:
      return "stop";
    case FaultKind::kLose:
      return "lose";
  }
  return "?";
}

const char* FaultSignalName(FaultKind kind) { return kind == FaultKind::kStop ? "SIGSTOP" : "SIGKILL"; }

std::string DescribeFault(const Fault& f) {
  std::string out = absl::StrFormat("%s %s at ", FaultKindName(f.kind), f.task.ToString());
  if (f.at_progress >= 0) absl::StrAppendFormat(&out, "%.0f%% of training", 100 * f.at_progress);
  if (f.at_progress >= 0 && f.at_s > 0) absl::StrAppend(&out, " or ");
  if (f.at_progress < 0 || f.at_s > 0) absl::StrAppendFormat(&out, "%.1f s", f.at_s);
  if (f.kind != FaultKind::kKill) absl::StrAppendFormat(&out, " for %.1f s", f.stop_s);
  return out;
}

absl::StatusOr<std::string> ResolveProgram(const std::string& program, const std::string& path) {
  if (program.empty()) return absl::InvalidArgumentError("the command after -- is empty");
  if (program.find('/') != std::string::npos) return program;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(program, ": no such program in PATH"));
}

double RestartBackoffSeconds(const LaunchOptions& options, int restart) {
  double s = options.restart_backoff_s;
  for (int i = 1; i < restart && s < kMaxRestartBackoffS; ++i) s *= 2;
  // The cap holds the doubling back, not a longer first wait asked for.
  return std::max(options.restart_backoff_s, std::min(s, kMaxRestartBackoffS));
}

absl::StatusOr<std::string> TaskSecurityArg(const LaunchOptions& options) {
  if (options.insecure) {
    if (!options.secret_file.empty()) {
      return absl::InvalidArgumentError("give --secret_file or --insecure, not both");
    }
    return std::string("--insecure");
  }
  std::string path = options.secret_file;
  if (path.empty()) {
    path = options.run_dir + "/job.secret";
    if (!FileExists(path)) {
      RETURN_IF_ERROR(MakeDirs(options.run_dir));
      RETURN_IF_ERROR(JobSecret::Generate().WriteNewFile(path));
      LOG(INFO) << "made a job secret for this run: " << path;
    }
  }
  // Every task must read the same file, whatever its working directory.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (!ec) path = absolute.string();
  RETURN_IF_ERROR(JobSecret::Load(path).status());
  return absl::StrCat("--secret_file=", path);
}

namespace {

absl::Status CheckFaults(const LaunchOptions& options, const ClusterSpec& spec) {
  for (const Fault& f : options.faults) {
    if (!spec.Contains(f.task)) {
      return absl::InvalidArgumentError(absl::StrCat("fault \"", DescribeFault(f), "\": ", f.task.ToString(),
                                                     " is not in ", options.cluster_spec_path));
    }
    if (!(f.at_s >= 0) || (f.kind != FaultKind::kKill && !(f.stop_s > 0))) {
      return absl::InvalidArgumentError(absl::StrCat("fault \"", DescribeFault(f),
                                                     "\": its time must be >= 0 and a stop's length > 0"));
    }
    if (!(f.at_progress < 0) && !(f.at_progress > 0 && f.at_progress < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault \"", DescribeFault(f), "\": its share of training must be in (0, 1)"));
    }
    if (f.at_progress >= 0 && options.train.log_every_steps < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fault \"", DescribeFault(f), "\" is timed by the chief's progress lines, but log_every_steps is 0"));
    }
  }
  if (options.max_restarts < 0 || !(options.restart_backoff_s >= 0) || !(options.deadline_s >= 0)) {
    return absl::InvalidArgumentError("max_restarts, restart_backoff_s and deadline_s must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace

std::string PrometheusScrapeConfig(const std::string& run_dir,
                                   const std::map<std::string, int>& metrics_ports) {
  std::string yaml = absl::StrCat(
      "# Prometheus's scrape config for the run in ", run_dir, ", written by `pstrain launch --metrics`:\n",
      "#   prometheus --config.file=", run_dir, "/prometheus.yml\n",
      "# Every target serves /metrics; the tasks label their samples with job_id, task_type and\n",
      "# task_index; `task` labels the target itself, so that `up` says which task it is.\n",
      "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n",
      "scrape_configs:\n  - job_name: pstrain\n    static_configs:\n");
  for (const auto& [task, port] : metrics_ports) {
    absl::StrAppend(&yaml, "      - targets: ['127.0.0.1:", port, "']\n        labels: {task: '", task,
                    "'}\n");
  }
  return yaml;
}

namespace {

// --metrics: a free port for every task the launcher starts, printed and
// written into RUN_DIR/prometheus.yml.
absl::StatusOr<std::map<std::string, int>> ServeMetrics(const std::string& run_dir,
                                                       const ClusterSpec& spec) {
  const std::vector<TaskId> tasks = StartedTasks(spec);
  std::set<int> taken;
  for (const TaskId& id : spec.AllTasks()) {
    if (auto hp = ParseHostPort(spec.Address(id)); hp.ok()) taken.insert(hp->port);
  }
  ASSIGN_OR_RETURN(const std::vector<int> ports,
                   FreeLoopbackPorts(static_cast<int>(tasks.size()), taken));
  std::map<std::string, int> by_task;
  std::vector<std::string> shown;
  for (size_t i = 0; i < tasks.size(); ++i) {
    by_task[tasks[i].ToString()] = ports[i];
    shown.push_back(absl::StrCat(tasks[i].ToString(), " http://127.0.0.1:", ports[i], "/metrics"));
  }
  const std::string config = run_dir + "/prometheus.yml";
  RETURN_IF_ERROR(WriteFileAtomic(config, PrometheusScrapeConfig(run_dir, by_task)));
  std::printf("pstrain: metrics: %s\npstrain: scrape them all: prometheus --config.file=%s\n",
              absl::StrJoin(shown, ", ").c_str(), config.c_str());
  std::fflush(stdout);
  return by_task;
}

// --isolate=netns: one namespace per task the launcher starts, named
// "<type>-<index>.pstrain.svc", listening on kIsolatedPort in its own
// namespace; `spec` gets those addresses.
constexpr int kIsolatedPort = 2222;

absl::StatusOr<std::unique_ptr<NetnsHarness>> IsolateTasks(const LaunchOptions& options,
                                                          ClusterSpec* spec) {
  if (options.isolate != "netns") {
    return absl::InvalidArgumentError(
        absl::StrCat("--isolate=", options.isolate, ": \"netns\" or nothing"));
  }
  if (options.metrics) {
    return absl::InvalidArgumentError(
        "--metrics with --isolate=netns: the tasks' endpoints would be inside their namespaces, "
        "out of reach; leave one out");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<NetnsHarness> net, NetnsHarness::Create({options.link_rate}));
  std::vector<std::string> shown;
  for (const TaskId& id : StartedTasks(*spec)) {
    const std::string name =
        absl::StrCat(TaskTypeName(id.type), "-", id.index, ".pstrain.svc");
    ASSIGN_OR_RETURN(const NetnsHost host, net->AddHost(name));
    spec->set_address(id, absl::StrCat(name, ":", kIsolatedPort));
    shown.push_back(absl::StrCat(id.ToString(), " ", name, " ", host.address, " (", host.netns, ")"));
  }
  RETURN_IF_ERROR(net->WriteHosts());
  ASSIGN_OR_RETURN(*spec, ClusterSpec::FromJson(spec->ToJson(), "isolated spec"));
  if (options.echo != EchoMode::kNone) {
    std::printf("pstrain: network: every task in its own namespace on the bridge of %s "
                "(10.77.0.0/24%s): %s\n",
                net->bridge_netns().c_str(),
                options.link_rate.empty() ? "" : absl::StrCat(", links ", options.link_rate).c_str(),
                absl::StrJoin(shown, ", ").c_str());
    std::fflush(stdout);
  }
  return net;
}

}  // namespace

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options, LaunchEvents* events) {
  if (options.train.metrics_port != 0 || options.ps.metrics_port != 0) {
    return absl::InvalidArgumentError(
        "--metrics_port is one task's port: give pstrain launch --metrics, which picks one for "
        "every task");
  }
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(options.cluster_spec_path));
  ASSIGN_OR_RETURN(ClusterSpec spec, ClusterSpec::FromJson(text, options.cluster_spec_path));
  if (spec.sparse()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.cluster_spec_path, " is sparse (tasks given as {\"index\": address}): the "
        "launcher starts every task of a cluster and needs them all listed"));
  }
  if (options.free_ports) {
    ASSIGN_OR_RETURN(spec, WithFreePorts(spec));
  }
  for (const auto& [task, delay] : options.straggler_delay_ms) {
    const auto colon = task.find(':');
    const TaskId id{*ParseTaskType(task.substr(0, colon)), std::stoi(task.substr(colon + 1))};
    if (!spec.Contains(id)) {
      return absl::InvalidArgumentError(absl::StrCat("--straggler: ", task, " is not in ",
                                                     options.cluster_spec_path));
    }
  }
  RETURN_IF_ERROR(CheckFaults(options, spec));
  for (const char* binary : {"/ps_server", "/worker"}) {
    const std::string path = options.bin_dir + binary;
    if (access(path.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(path, ": not found or not executable (build first)"));
    }
  }
  if (!options.command.empty()) {
    const std::string library = CommandFrontendFor(options.bin_dir).library;
    if (access(library.c_str(), R_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(
          library, ": not found (build it: cmake --build build --target pstrain_c)"));
    }
    if (!options.command_dir.empty() && access(options.command_dir.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(
          options.command_dir, ": the command's directory: ", std::strerror(errno),
          " (give the command again after --, to run it here)"));
    }
    if (access(options.command.front().c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat(options.command.front(), ": not found or not executable",
                       options.command_dir.empty() ? "" : " (give the command again after --)"));
    }
  }
  RETURN_IF_ERROR(MakeDirs(options.run_dir));
  if (options.resume) {
    RETURN_IF_ERROR(RemoveRunResults(options.run_dir));
  } else if (options.train.clean_run_dir) {
    ASSIGN_OR_RETURN(const std::vector<std::string> removed,
                     RemoveStaleRunOutputs(options.run_dir, /*live_ranks=*/{}));
    if (!removed.empty()) std::printf("pstrain: %s\n", DescribeRemoved(options.run_dir, removed).c_str());
  }
  RETURN_IF_ERROR(WriteFileAtomic(options.run_dir + "/cluster_spec.json", spec.ToJson()));
  ASSIGN_OR_RETURN(const std::string security_arg, TaskSecurityArg(options));
  const int64_t start = MonotonicMicros();
  LaunchEvents own_events;
  if (events == nullptr) events = &own_events;
  // --isolate=netns: a namespace per task on a private bridge, and the
  // spec's addresses their names there. Before the supervisor: the
  // namespaces outlive the tasks.
  std::unique_ptr<NetnsHarness> net;
  if (!options.isolate.empty()) {
    ASSIGN_OR_RETURN(net, IsolateTasks(options, &spec));
  }
  std::map<std::string, int> metrics_ports;
  if (options.metrics) {
    ASSIGN_OR_RETURN(metrics_ports, ServeMetrics(options.run_dir, spec));
  }
  LaunchOptions supervised = options;
  if (!options.command.empty()) {
    supervised.chief_exit_grace_s = std::max(options.chief_exit_grace_s, kCommandExitGraceS);
  }
  Supervisor supervisor(supervised, spec, security_arg, std::move(metrics_ports), net.get(), events);
  const absl::Status started = supervisor.StartAll();
  // Wait even when a start failed: the tasks already running are stopped
  // and reaped there.
  const absl::Status waited = supervisor.Wait();
  // The tasks' timelines, whatever became of the run (a failed run's is
  // the one most worth reading).
  if (options.train.timeline) {
    if (absl::Status s = MergeRunTimelines(options.run_dir); !s.ok()) LOG(ERROR) << s.message();
  }
  RETURN_IF_ERROR(started);
  RETURN_IF_ERROR(waited);
  LaunchResult result;
  RETURN_IF_ERROR(WriteLauncherFields(options, spec, supervisor, *events, SecondsSince(start), &result));
  return result;
}

}  // namespace pstrain

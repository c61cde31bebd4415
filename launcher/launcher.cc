#include "launcher/launcher.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/child_process.h"
#include "common/clock.h"
#include "glog/logging.h"
#include "common/file_util.h"
#include "common/free_ports.h"
#include "common/job_secret.h"
#include "common/json.h"
#include "common/run_dir.h"
#include "common/signals.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr int kPollMs = 100;

struct Task {
  TaskId id;
  ChildProcess process;
  std::string pending;  // output not yet ended by a newline
  std::unique_ptr<std::ofstream> log;
  bool is_ps = false;
};

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

// Whether a task's line belongs in the progress view.
bool IsProgressLine(const Task& task, absl::string_view line) {
  if (!line.empty() && (line[0] == 'W' || line[0] == 'E' || line[0] == 'F')) return true;
  if (!absl::StartsWith(line, "I ")) return true;  // not a log line: a crash message
  return absl::StrContains(line, "] epoch ") && absl::StrContains(line, " done:");
}

class Supervisor {
 public:
  // `security_arg` (--secret_file=... or --insecure) goes to every task.
  Supervisor(const LaunchOptions& options, const ClusterSpec& spec, std::string security_arg)
      : options_(options), spec_(spec), security_arg_(std::move(security_arg)) {}

  absl::Status StartAll();
  absl::Status Wait();

 private:
  SpawnOptions SpawnFor(const TaskId& id) const;
  void Pump(Task& task);
  void EmitLine(Task& task, absl::string_view line);
  void ReapAll();
  void OnExit(const Task& task);
  void StopAll(const std::string& reason);
  bool AllExited() const;
  void CheckEarlyPsExit();
  void CheckPsAfterWorkers();

  const LaunchOptions& options_;
  const ClusterSpec& spec_;
  const std::string security_arg_;
  std::vector<Task> tasks_;
  std::string failure_;       // first failure, named
  int64_t stop_us_ = 0;       // when StopAll sent SIGTERM (monotonic), 0 before
  bool killed_ = false;
  int64_t workers_done_us_ = 0;
  bool chief_done_ = false;    // the chief exited 0: training is done
  std::string early_ps_exit_;  // the first ps that exited 0 before that, named
  int64_t early_ps_exit_us_ = 0;
};

SpawnOptions Supervisor::SpawnFor(const TaskId& id) const {
  SpawnOptions s;
  if (id.type == TaskType::kPs) {
    s.binary = options_.bin_dir + "/ps_server";
    PsServerOptions ps = options_.ps;
    if (ps.checkpoint_dir.empty()) ps.checkpoint_dir = WorkerOptions(options_, id).checkpoint_dir;
    s.args = ps.ToArgs();
  } else {
    s.binary = options_.bin_dir + "/worker";
    s.args = WorkerOptions(options_, id).ToArgs();
  }
  s.args.push_back(security_arg_);
  s.extra_env.push_back(absl::StrCat("TF_CONFIG=", spec_.ToTfConfig(id)));
  return s;
}

absl::Status Supervisor::StartAll() {
  RETURN_IF_ERROR(MakeDirs(options_.run_dir + "/logs"));
  // ps tasks first, so that workers find them listening.
  std::vector<TaskId> order;
  for (const TaskId& id : spec_.AllTasks()) {
    if (id.type == TaskType::kPs) order.push_back(id);
  }
  for (const TaskId& id : spec_.AllTasks()) {
    if (id.type == TaskType::kChief || id.type == TaskType::kWorker) order.push_back(id);
  }
  for (const TaskId& id : order) {
    const std::string log_path = LogPath(options_, id);
    auto log = std::make_unique<std::ofstream>(log_path);
    if (!*log) return absl::InternalError(absl::StrCat(log_path, ": cannot create"));
    auto process = ChildProcess::Spawn(SpawnFor(id));
    if (!process.ok()) {
      StopAll(absl::StrCat("cannot start ", id.ToString(), ": ", process.status().message()));
      return absl::InternalError(failure_);
    }
    if (options_.echo != EchoMode::kNone) {
      std::printf("pstrain: started %s (pid %d)\n", id.ToString().c_str(), process->pid());
    }
    tasks_.push_back({id, *std::move(process), "", std::move(log), id.type == TaskType::kPs});
  }
  return absl::OkStatus();
}

void Supervisor::EmitLine(Task& task, absl::string_view line) {
  *task.log << line << '\n';
  task.log->flush();
  const bool echo = options_.echo == EchoMode::kAll ||
                    (options_.echo == EchoMode::kProgress && IsProgressLine(task, line));
  if (echo) std::printf("[%s] %.*s\n", task.id.ToString().c_str(), static_cast<int>(line.size()), line.data());
  if (options_.on_line) options_.on_line(task.id, line);
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
  if (stop_us_ != 0) return;
  stop_us_ = MonotonicMicros();
  for (Task& t : tasks_) t.process.Signal(SIGTERM);
}

void Supervisor::ReapAll() {
  for (Task& t : tasks_) {
    if (!t.process.exited() && t.process.Reap()) OnExit(t);
  }
}

void Supervisor::OnExit(const Task& t) {
  const int code = t.process.exit_code();
  if (code != 0) {
    if (stop_us_ == 0) {
      StopAll(absl::StrCat(t.id.ToString(), " failed (", DescribeExit(code), "); see ",
                           LogPath(options_, t.id)));
    }
  } else if (spec_.IsChief(t.id)) {
    chief_done_ = true;
  } else if (t.is_ps && !chief_done_ && early_ps_exit_.empty()) {
    early_ps_exit_ = absl::StrCat(t.id.ToString(), " exited (code 0) before training finished; see ",
                                  LogPath(options_, t.id));
    early_ps_exit_us_ = MonotonicMicros();
  }
}

void Supervisor::CheckEarlyPsExit() {
  if (stop_us_ == 0 && !chief_done_ && !early_ps_exit_.empty() &&
      SecondsSince(early_ps_exit_us_) > options_.chief_exit_grace_s) {
    StopAll(early_ps_exit_);
  }
}

bool Supervisor::AllExited() const {
  for (const Task& t : tasks_) {
    if (!t.process.exited() || t.process.output_fd() >= 0) return false;
  }
  return true;
}

void Supervisor::CheckPsAfterWorkers() {
  if (stop_us_ != 0) return;
  for (const Task& t : tasks_) {
    if (!t.is_ps && !t.process.exited()) return;
  }
  if (workers_done_us_ == 0) workers_done_us_ = MonotonicMicros();
  if (SecondsSince(workers_done_us_) > options_.ps_exit_grace_s) {
    StopAll(absl::StrCat("the workers finished but a ps did not exit within ",
                         options_.ps_exit_grace_s, " s (the chief never shut it down?)"));
  }
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
    if (const int sig = ShutdownSignal(); sig != 0 && stop_us_ == 0) {
      StopAll(absl::StrCat("interrupted by signal ", sig));
    }
    CheckEarlyPsExit();
    CheckPsAfterWorkers();
    if (stop_us_ != 0 && !killed_ && SecondsSince(stop_us_) > options_.stop_grace_s) {
      for (Task& t : tasks_) t.process.Signal(SIGKILL);
      killed_ = true;
    }
  }
  // A task that failed first may have been the victim of a ps that left
  // (its requests refused as the ps shut down): name both.
  if (!chief_done_ && !early_ps_exit_.empty() && !failure_.empty() && failure_ != early_ps_exit_) {
    absl::StrAppend(&failure_, "; ", early_ps_exit_);
  }
  if (ShutdownSignal() != 0) return absl::CancelledError(failure_);
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

absl::Status WriteLauncherFields(const LaunchOptions& options, const ClusterSpec& spec,
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
    e->set_exit_code(0);
  }
  result->wall_seconds = wall_seconds;
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

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(options.cluster_spec_path));
  ASSIGN_OR_RETURN(ClusterSpec spec, ClusterSpec::FromJson(text, options.cluster_spec_path));
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
  for (const char* binary : {"/ps_server", "/worker"}) {
    const std::string path = options.bin_dir + binary;
    if (access(path.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(path, ": not found or not executable (build first)"));
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
  Supervisor supervisor(options, spec, security_arg);
  const absl::Status started = supervisor.StartAll();
  // Wait even when a start failed: the tasks already running are stopped
  // and reaped there.
  const absl::Status waited = supervisor.Wait();
  RETURN_IF_ERROR(started);
  RETURN_IF_ERROR(waited);
  LaunchResult result;
  RETURN_IF_ERROR(WriteLauncherFields(options, spec, SecondsSince(start), &result));
  return result;
}

}  // namespace pstrain

#include "launcher/supervisor/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/exit_codes.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "launcher/supervisor/command_frontend.h"
#include "launcher/supervisor/progress.h"

namespace pstrain {
namespace {

constexpr int kPollMs = 100;

// How often RUN_DIR/task_cpu.csv samples the tasks' CPU time.
constexpr int64_t kCpuSampleUs = 200'000;

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

}  // namespace

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
    tasks_.push_back(SupervisedTask(id, std::move(spawn), *std::move(process), std::move(log)));
  }
  started_us_ = MonotonicMicros();
  return absl::OkStatus();
}

const SupervisedTask* Supervisor::FindTask(const TaskId& id) const {
  for (const SupervisedTask& t : tasks_) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

void Supervisor::EmitLine(SupervisedTask& task, absl::string_view line) {
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

void Supervisor::Pump(SupervisedTask& task) {
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

void Supervisor::ReapAll() {
  for (SupervisedTask& t : tasks_) {
    // A task is its process group: what it leaves running goes with it.
    if (!t.process.exited() && t.process.Reap(/*kill_group=*/true)) OnExit(t);
  }
}

void Supervisor::RecordCpu(const SupervisedTask& t, double cpu_seconds) {
  if (cpu_log_ == nullptr) return;
  if (absl::Status s = cpu_log_->Record(t.id.ToString(), cpu_seconds); !s.ok()) {
    LOG(WARNING) << "CPU log stopped: " << s.message();
    cpu_log_.reset();
  }
}

void Supervisor::SampleCpu() {
  if (cpu_log_ == nullptr || MonotonicMicros() - cpu_sampled_us_ < kCpuSampleUs) return;
  cpu_sampled_us_ = MonotonicMicros();
  for (const SupervisedTask& t : tasks_) {
    if (t.process.exited()) continue;
    const absl::StatusOr<double> live = LiveProcessCpuSeconds(t.process.pid());
    if (live.ok()) RecordCpu(t, t.cpu_seconds + *live);
  }
}

void Supervisor::State(const TaskId& id, const std::string& state) {
  if (options_.on_task_state) options_.on_task_state(id, state);
}

void Supervisor::TrackProgress(const SupervisedTask& task, absl::string_view line) {
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

absl::Status Supervisor::Wait() {
  while (!AllExited()) {
    std::vector<pollfd> fds;
    std::vector<SupervisedTask*> owners;
    for (SupervisedTask& t : tasks_) {
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
      for (SupervisedTask& t : tasks_) t.process.Signal(SIGKILL);
      killed_ = true;
    }
  }
  // What the failed task said last, read to its end only now (a process
  // is reaped before its last output is), before where its log is.
  if (failed_task_ >= 0) {
    const SupervisedTask& t = tasks_[static_cast<size_t>(failed_task_)];
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
  // A task that failed on its configuration or input fails the launch so
  // too (exit 2, as the task did): nothing at run time went wrong.
  if (!failure_.empty() && failed_code_ == kExitBadConfig && early_ps_exit_.empty()) {
    return absl::InvalidArgumentError(failure_);
  }
  if (!failure_.empty()) return absl::AbortedError(failure_);
  return absl::OkStatus();
}

}  // namespace pstrain

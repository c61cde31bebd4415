#include "launcher/supervisor/launch.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/free_ports.h"
#include "common/json.h"
#include "common/run_dir.h"
#include "common/status_macros.h"
#include "common/trace_writer.h"
#include "glog/logging.h"
#include "launcher/supervisor/command_frontend.h"
#include "launcher/supervisor/netns_harness.h"
#include "launcher/supervisor/supervisor.h"
#include "transport/job_secret.h"

namespace pstrain {

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

absl::StatusOr<std::string> ResolveProgram(const std::string& program, const std::string& path) {
  if (program.empty()) return absl::InvalidArgumentError("the command after -- is empty");
  if (program.find('/') != std::string::npos) return program;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(program, ": no such program in PATH"));
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

absl::Status CheckStragglers(const LaunchOptions& options, const ClusterSpec& spec) {
  for (const auto& [task, delay] : options.straggler_delay_ms) {
    const auto colon = task.find(':');
    const TaskId id{*ParseTaskType(task.substr(0, colon)), std::stoi(task.substr(colon + 1))};
    if (!spec.Contains(id)) {
      return absl::InvalidArgumentError(absl::StrCat("--straggler: ", task, " is not in ",
                                                     options.cluster_spec_path));
    }
  }
  return absl::OkStatus();
}

// The task binaries, and the user's command with the library it loads.
absl::Status CheckPrograms(const LaunchOptions& options) {
  for (const char* binary : {"/ps_server", "/worker"}) {
    const std::string path = options.bin_dir + binary;
    if (access(path.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(path, ": not found or not executable (build first)"));
    }
  }
  if (options.command.empty()) return absl::OkStatus();
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
  return absl::OkStatus();
}

// The spec the launch runs (its free ports picked), once everything the
// launch is given has been checked: nothing is written or started before.
absl::StatusOr<ClusterSpec> CheckedSpec(const LaunchOptions& options) {
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
  RETURN_IF_ERROR(CheckStragglers(options, spec));
  RETURN_IF_ERROR(CheckFaults(options, spec));
  RETURN_IF_ERROR(CheckPrograms(options));
  return spec;
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

// RUN_DIR made, an earlier run's outputs removed (or, resuming, only its
// results), and the spec the tasks run with written into it.
absl::Status PrepareRunDir(const LaunchOptions& options, const ClusterSpec& spec) {
  RETURN_IF_ERROR(MakeDirs(options.run_dir));
  if (options.resume) {
    RETURN_IF_ERROR(RemoveRunResults(options.run_dir));
  } else if (options.train.clean_run_dir) {
    ASSIGN_OR_RETURN(const std::vector<std::string> removed,
                     RemoveStaleRunOutputs(options.run_dir, /*live_ranks=*/{}));
    if (!removed.empty()) std::printf("pstrain: %s\n", DescribeRemoved(options.run_dir, removed).c_str());
  }
  return WriteFileAtomic(options.run_dir + "/cluster_spec.json", spec.ToJson());
}

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
    const SupervisedTask* task = supervisor.FindTask(id);
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

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options, LaunchEvents* events) {
  ASSIGN_OR_RETURN(ClusterSpec spec, CheckedSpec(options));
  RETURN_IF_ERROR(PrepareRunDir(options, spec));
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

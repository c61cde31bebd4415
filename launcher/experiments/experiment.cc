#include "launcher/experiments/experiment.h"

#include <algorithm>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/cluster_spec.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "launcher/supervisor/launch.h"
#include "launcher/supervisor/progress.h"

namespace pstrain {

MachineInfo ReadMachineInfo() {
  MachineInfo m{"unknown CPU", static_cast<int>(std::thread::hardware_concurrency())};
  absl::StatusOr<std::string> cpuinfo = ReadFileToString("/proc/cpuinfo");
  if (!cpuinfo.ok()) return m;
  for (absl::string_view line : absl::StrSplit(*cpuinfo, '\n')) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon != absl::string_view::npos) m.cpu_model = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    break;
  }
  return m;
}

std::string DescribeMachine(const MachineInfo& machine) {
  return absl::StrCat(machine.cores, machine.cores == 1 ? " core" : " cores", " (", machine.cpu_model, ")");
}

int64_t StepsPerWorker(const ExperimentOptions& options, int num_workers) {
  const TrainOptions& t = options.train;
  const int64_t global = int64_t{t.batch_size} * std::max(1, num_workers);
  const int64_t steps = t.epochs * ((kTrainImages + global - 1) / global);
  return t.max_steps > 0 ? std::min(steps, t.max_steps) : steps;
}

int64_t EvalEverySteps(const ExperimentOptions& options, int64_t steps) {
  if (options.train.eval_every_steps > 0) return options.train.eval_every_steps;
  const int points = std::max(1, options.eval_points);
  return std::max<int64_t>(1, (steps + points - 1) / points);
}

ExperimentRun MakeRun(const ExperimentOptions& options, const std::string& label, const std::string& prefix,
                      const std::string& spec_path, const std::string& run_dir, const ModeSpec& mode,
                      int64_t eval_every_steps) {
  ExperimentRun run;
  run.label = label;
  run.prefix = prefix;
  run.spec_path = spec_path;
  run.run_dir = run_dir;
  run.train = options.train;
  mode.ApplyTo(&run.train);
  run.train.run_dir = run_dir;
  run.train.eval_every_steps = eval_every_steps;
  run.straggler_delay_ms = options.straggler_delay_ms;
  return run;
}

std::string DescribeNetwork(const ExperimentOptions& options) {
  if (options.isolate.empty()) return "every task a process on this machine";
  return absl::StrCat("every task a process in a network namespace of its own on a private bridge",
                      options.link_rate.empty() ? " (links unlimited)"
                                                : absl::StrCat(", links of ", options.link_rate));
}

LaunchOptions ExperimentLaunchOptions(const ExperimentOptions& options, const ExperimentRun& run) {
  LaunchOptions launch;
  launch.cluster_spec_path = run.spec_path;
  launch.free_ports = true;
  launch.run_dir = run.run_dir;
  launch.bin_dir = options.bin_dir;
  launch.command = options.command;
  launch.python_path = options.python_path;
  launch.train = run.train;
  launch.ps = options.ps;
  launch.secret_file = options.secret_file;
  launch.insecure = options.insecure;
  launch.straggler_delay_ms = run.straggler_delay_ms;
  launch.echo = EchoMode::kNone;
  launch.command_line = options.command_line;
  launch.max_restarts = options.max_restarts;
  launch.isolate = options.isolate;
  launch.link_rate = options.link_rate;
  launch.cancel = options.cancel;
  return launch;
}

absl::StatusOr<RunRecord> RunExperiment(const ExperimentOptions& options, const ExperimentRun& run) {
  RunRecord record;
  record.label = run.label;
  record.run_dir = run.run_dir;
  record.eval_every_steps = run.train.eval_every_steps;
  const absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromFile(run.spec_path);
  RunProgress progress(options.progress, options.rewrite_progress, run.prefix,
                       spec.ok() ? spec->num_workers() : 1);
  absl::StatusOr<TaskId> chief =
      spec.ok() ? absl::StatusOr<TaskId>(spec->ChiefTask()) : absl::StatusOr<TaskId>(spec.status());
  if (!chief.ok()) {
    record.status = chief.status();
    progress.Finish(record.status, 0, 0);
    return record;
  }
  LaunchOptions launch = ExperimentLaunchOptions(options, run);
  launch.on_line = [&](const TaskId& task, absl::string_view line) {
    if (task == *chief) progress.OnChiefLine(line);
  };
  launch.on_task_state = [&](const TaskId& task, const std::string& state) {
    progress.OnTaskState(task.ToString(), state);
  };
  absl::StatusOr<LaunchResult> result = Launch(launch);
  if (!result.ok() && result.status().code() == absl::StatusCode::kCancelled) {
    progress.Finish(result.status(), 0, 0);
    return result.status();
  }
  record.status = result.ok() ? ReadRunDir(run.run_dir, &record) : result.status();
  progress.Finish(record.status, record.summary.final_test_accuracy(), record.throughput.images_per_sec);
  return record;
}

absl::Status FinishExperiment(const ExperimentOptions& options, const std::string& report,
                              const std::vector<std::string>& notes, const std::vector<std::string>& failed,
                              size_t runs) {
  const std::string path = options.out_dir + "/report.md";
  RETURN_IF_ERROR(WriteFileAtomic(path, report));
  absl::FPrintF(options.progress, "report: %s\n", path);
  for (const std::string& n : notes) absl::FPrintF(options.progress, "note: %s\n", n);
  if (failed.empty()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(failed.size(), " of ", runs, " runs failed (",
                                         absl::StrJoin(failed, "; "), "); see ", path));
}

}  // namespace pstrain

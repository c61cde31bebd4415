#include "launcher/chaos/chaos.h"

#include <algorithm>
#include <cmath>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "launcher/supervisor/progress.h"

namespace pstrain {
namespace {

// The fault window, as fractions of the baseline's wall time.
constexpr double kFirstFaultAt = 0.1;
constexpr double kLastFaultAt = 0.8;
constexpr int64_t kProgressEverySteps = 10;

// How often a chaos run's chief prints a progress line: every 10 steps (or
// as often as asked), and at least 50 times in a run of max_steps.
int64_t ProgressEverySteps(const TrainOptions& t) {
  int64_t every = t.log_every_steps >= 1 ? std::min(t.log_every_steps, kProgressEverySteps)
                                         : kProgressEverySteps;
  if (t.max_steps > 0) every = std::min(every, std::max<int64_t>(1, t.max_steps / 50));
  return every;
}
constexpr double kMinStopS = 1.0;
// The default hang bound: kTimeoutFactor x the baseline's wall time + kTimeoutSlackS.
constexpr double kTimeoutFactor = 4.0;
constexpr double kTimeoutSlackS = 60.0;

// Uniform in [lo, hi), from 53 random bits.
double Uniform(SplitMix64& rng, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(rng.Next() >> 11) * 0x1.0p-53;
}

absl::StatusOr<ClusterSpec> LoadSpec(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  return ClusterSpec::FromJson(text, path);
}

absl::Status CheckOptions(const ChaosOptions& o) {
  if (o.runs < 1) return absl::InvalidArgumentError("--runs must be >= 1");
  if (o.max_faults_per_run < 1) return absl::InvalidArgumentError("--max_faults_per_run must be >= 1");
  if (o.fault_kinds.empty()) return absl::InvalidArgumentError("--faults names no fault kind");
  if (!(o.run_timeout_s >= 0)) return absl::InvalidArgumentError("--run_timeout_s must be >= 0");
  return absl::OkStatus();
}

// Launches one run of the experiment into OUT/`name` and records it.
// Only Cancelled (experiment.cancel fired) is an error.
absl::StatusOr<ChaosRunRecord> LaunchRun(const ChaosOptions& options, const TaskId& chief, const std::string& name,
                                         const std::string& prefix, const std::vector<Fault>& faults,
                                         double deadline_s) {
  const ExperimentOptions& x = options.experiment;
  ExperimentRun run;
  run.label = name;
  run.spec_path = options.cluster_spec_path;
  run.run_dir = absl::StrCat(x.out_dir, "/", name);
  run.train = x.train;
  run.train.run_dir = run.run_dir;
  // The faults are timed by the chief's progress lines (the baseline's
  // too, so that runs compare).
  run.train.log_every_steps = ProgressEverySteps(x.train);
  run.straggler_delay_ms = x.straggler_delay_ms;
  LaunchOptions launch = ExperimentLaunchOptions(x, run);
  launch.faults = faults;
  launch.deadline_s = deadline_s;
  RunProgress progress(x.progress, x.rewrite_progress, prefix);
  launch.on_line = [&](const TaskId& task, absl::string_view line) {
    if (task == chief) progress.OnChiefLine(line);
  };
  ChaosRunRecord record;
  record.name = name;
  record.run_dir = run.run_dir;
  record.planned = faults;
  LaunchEvents events;
  const int64_t start = MonotonicMicros();
  absl::StatusOr<LaunchResult> result = Launch(launch, &events);
  record.wall_s = SecondsSince(start);
  record.sent = events.faults;
  record.restarts = static_cast<int>(events.restarts.size());
  record.status = result.status();
  if (result.ok()) {
    const proto::RunSummary& s = result->summary;
    record.wall_s = result->wall_seconds;
    record.accuracy = s.final_test_accuracy();
    record.updates_lost = s.updates_lost();
    record.recoveries = s.recoveries_size();
  }
  progress.Finish(record.status, record.accuracy, result.ok() ? result->summary.train_images_per_sec() : 0);
  if (!faults.empty()) {
    absl::FPrintF(x.progress, "%s: faults: %s; %d restart(s)\n", prefix, DescribeRunFaults(record), record.restarts);
  }
  if (record.status.code() == absl::StatusCode::kCancelled) return record.status;
  return record;
}

std::string DescribeCheckpoints(const TrainOptions& t) {
  std::vector<std::string> parts;
  if (t.checkpoint_every_steps > 0) parts.push_back(absl::StrCat("every ", t.checkpoint_every_steps, " steps"));
  if (t.checkpoint_every_s > 0) parts.push_back(absl::StrCat("every ", t.checkpoint_every_s, " s"));
  return parts.empty() ? "off" : absl::StrJoin(parts, " and ");
}

std::vector<std::string> Facts(const ChaosOptions& o, const ClusterSpec& spec, const ChaosResult& result,
                               double run_timeout_s) {
  const TrainOptions& t = o.experiment.train;
  std::vector<std::string> kinds;
  for (FaultKind k : o.fault_kinds) kinds.push_back(absl::StrCat(FaultKindName(k), " (", FaultSignalName(k), ")"));
  return {
      absl::StrFormat("Cluster: %s, %d ps and %d workers, every task a process on this machine",
                      o.cluster_spec_path, spec.num_ps(), spec.num_workers()),
      absl::StrFormat("Training: %s, %s, seed %d, checkpoints %s, peer timeout %g s%s", UpdateModeName(t.mode),
                      t.max_steps > 0 ? absl::StrCat("at most ", t.max_steps, " steps per worker")
                                      : absl::StrCat(t.epochs, " epoch(s)"),
                      t.seed, DescribeCheckpoints(t), t.peer_timeout_s,
                      t.ps_replicas > 0 ? absl::StrFormat(", a hot standby of every shard (failover after %g s)",
                                                          t.failover_after_s)
                                        : ""),
      absl::StrFormat("Faults: %s; per run 1%s, target uniform over %s, sent when a share u of the training "
                      "steps uniform in [%.0f%%, %.0f%%] is done (by the chief's progress lines, every %d steps; "
                      "a second fault at u x the baseline's %.1f s after start if that comes first), a stop (or a "
                      "loss) lasting 1 s to %g s; drawn from seed %d",
                      absl::StrJoin(kinds, ", "), o.max_faults_per_run >= 2 ? " (2 with probability 1/4)" : "",
                      o.fault_targets.empty() ? "every task" : absl::StrJoin(o.fault_targets, ", "),
                      100 * kFirstFaultAt, 100 * kLastFaultAt, ProgressEverySteps(t), result.baseline.wall_s,
                      2 * t.peer_timeout_s, t.seed),
      absl::StrFormat("Restarts: at most %d per task (--max_restarts), after a backoff of 1 s doubling "
                      "per restart of the task, at most %g s",
                      o.experiment.max_restarts, kMaxRestartBackoffS),
      absl::StrFormat("Run timeout: %.0f s%s; a run still going then is a hang", run_timeout_s,
                      o.run_timeout_s > 0 ? " (--run_timeout_s)" : " (4 x the baseline's wall time + 60 s)"),
      absl::StrCat("Run directories: ", o.experiment.out_dir, "/baseline/, ", o.experiment.out_dir,
                   "/run-NNN/ (summary.json, logs/: a restart is marked in its task's log)")};
}

absl::Status WriteReport(const ChaosOptions& o, const ClusterSpec& spec, const ChaosResult& result,
                         double run_timeout_s) {
  ChaosReportFacts facts;
  facts.command_line = o.experiment.command_line;
  facts.date = absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  facts.machine = ReadMachineInfo();
  facts.facts = Facts(o, spec, result, run_timeout_s);
  const std::string& out = o.experiment.out_dir;
  RETURN_IF_ERROR(WriteFileAtomic(out + "/report.md", ChaosReportMarkdown(facts, result)));
  RETURN_IF_ERROR(WriteFileAtomic(out + "/report.json", ChaosReportJson(facts, result)));
  absl::FPrintF(o.experiment.progress, "report: %s/report.md (and report.json)\n", out);
  return absl::OkStatus();
}

void PrintPlan(const ChaosOptions& o, const std::vector<std::vector<Fault>>& plan) {
  absl::FPrintF(o.experiment.progress, "fault plan (seed %d):\n", o.experiment.train.seed);
  for (size_t i = 0; i < plan.size(); ++i) {
    std::vector<std::string> faults;
    for (const Fault& f : plan[i]) faults.push_back(DescribeFault(f));
    absl::FPrintF(o.experiment.progress, "  run-%03d: %s\n", i + 1, absl::StrJoin(faults, "; "));
  }
  std::fflush(o.experiment.progress);
}

}  // namespace

std::vector<std::vector<Fault>> PlanFaults(const FaultPlanOptions& o) {
  SplitMix64 rng(Mix64(o.seed));
  std::vector<std::vector<Fault>> plan(static_cast<size_t>(o.runs));
  for (std::vector<Fault>& run : plan) {
    const bool two = o.max_faults_per_run >= 2 && rng.Below(4) == 0;
    for (int i = 0; i < (two ? 2 : 1); ++i) {
      Fault f;
      f.kind = o.kinds[rng.Below(o.kinds.size())];
      f.task = o.tasks[rng.Below(o.tasks.size())];
      f.at_progress = Uniform(rng, kFirstFaultAt, kLastFaultAt);
      const double stop_s = Uniform(rng, kMinStopS, std::max(kMinStopS, 2 * o.peer_timeout_s));
      if (f.kind != FaultKind::kKill) f.stop_s = stop_s;  // drawn for kills too: the plan's draws stay aligned
      run.push_back(f);
    }
    std::stable_sort(run.begin(), run.end(),
                     [](const Fault& a, const Fault& b) { return a.at_progress < b.at_progress; });
    // The second also by the clock (Fault::at_progress): it may land while
    // the first stalls the run.
    if (run.size() == 2) run[1].at_s = run[1].at_progress * o.baseline_s;
  }
  return plan;
}

absl::StatusOr<std::vector<TaskId>> FaultTargets(const ClusterSpec& spec, const std::vector<std::string>& targets) {
  auto names = [&](const std::string& target, const TaskId& id) {
    return target == id.ToString() || target == TaskTypeName(id.type) || (target == "chief" && spec.IsChief(id));
  };
  std::vector<TaskId> tasks;
  for (const TaskId& id : spec.AllTasks()) {
    if (id.type == TaskType::kEvaluator) continue;  // the launcher does not start one
    if (targets.empty() || absl::c_any_of(targets, [&](const std::string& t) { return names(t, id); })) {
      tasks.push_back(id);
    }
  }
  for (const std::string& t : targets) {
    if (!absl::c_any_of(tasks, [&](const TaskId& id) { return names(t, id); })) {
      return absl::InvalidArgumentError(absl::StrCat("--fault_targets: \"", t, "\" names no task of the spec"));
    }
  }
  return tasks;
}

absl::StatusOr<std::vector<FaultKind>> ParseFaultKinds(const std::string& text) {
  std::vector<FaultKind> kinds;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    if (item == "kill") {
      kinds.push_back(FaultKind::kKill);
    } else if (item == "stop") {
      kinds.push_back(FaultKind::kStop);
    } else if (item == "lose") {
      kinds.push_back(FaultKind::kLose);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--faults: \"", item, "\" (expected kill, stop or lose)"));
    }
  }
  if (kinds.empty()) {
    return absl::InvalidArgumentError("--faults names no fault kind (expected kill, stop, lose)");
  }
  return kinds;
}

absl::StatusOr<ChaosResult> RunChaos(const ChaosOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(const ClusterSpec spec, LoadSpec(options.cluster_spec_path));
  ASSIGN_OR_RETURN(std::vector<TaskId> targets, FaultTargets(spec, options.fault_targets));
  const ExperimentOptions& x = options.experiment;
  RETURN_IF_ERROR(MakeDirs(x.out_dir));
  const int n = options.runs;
  ChaosResult result;
  ASSIGN_OR_RETURN(result.baseline, LaunchRun(options, spec.ChiefTask(), "baseline",
                                              absl::StrFormat("[0/%d] baseline", n), {}, options.run_timeout_s));
  if (!result.baseline.status.ok()) {
    return absl::AbortedError(absl::StrCat("the baseline run failed, so there is nothing to compare with: ",
                                           result.baseline.status.message()));
  }
  FaultPlanOptions plan_options{x.train.seed,          n,
                                options.fault_kinds,   options.max_faults_per_run,
                                std::move(targets),    result.baseline.wall_s,
                                x.train.peer_timeout_s};
  const std::vector<std::vector<Fault>> plan = PlanFaults(plan_options);
  PrintPlan(options, plan);
  const double timeout_s = options.run_timeout_s > 0
                               ? options.run_timeout_s
                               : std::ceil(kTimeoutFactor * result.baseline.wall_s + kTimeoutSlackS);
  for (int i = 0; i < n; ++i) {
    const std::string name = absl::StrFormat("run-%03d", i + 1);
    const std::string prefix = absl::StrFormat("[%d/%d] %s", i + 1, n, name);
    ASSIGN_OR_RETURN(ChaosRunRecord record, LaunchRun(options, spec.ChiefTask(), name, prefix, plan[i], timeout_s));
    result.runs.push_back(std::move(record));
  }
  result.totals = SumUpChaos(result.baseline, result.runs);
  RETURN_IF_ERROR(WriteReport(options, spec, result, timeout_s));
  return result;
}

}  // namespace pstrain

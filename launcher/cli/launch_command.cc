// `pstrain launch`: its flags, the LaunchOptions they make, and the run:
// RUN_DIR/launch.json written, a resume's recorded flags taken back, the
// progress line on a terminal, the summary at the end.

#include "launcher/cli/commands.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/status_macros.h"
#include "flags/task_flags.h"
#include "glog/logging.h"
#include "launcher/cli/shared_flags.h"
#include "launcher/supervisor/launch.h"
#include "launcher/supervisor/launch_record.h"
#include "launcher/supervisor/progress.h"
#include "launcher/supervisor/straggler.h"
#include "launcher/supervisor/summary_printer.h"
#include "worker/train_flags.h"

ABSL_FLAG(bool, metrics, pstrain::LaunchOptions().metrics,
          "Serve every task's live metrics for Prometheus on a free port of 127.0.0.1: prints "
          "the addresses and writes RUN_DIR/prometheus.yml to scrape them");
ABSL_FLAG(bool, free_ports, pstrain::LaunchOptions().free_ports,
          "Give every loopback task of the spec (localhost, 127.x, ::1) a free port chosen by the OS");
ABSL_FLAG(std::string, echo, pstrain::EchoModeName(pstrain::LaunchOptions().echo),
          "Task output to show: all, progress or none");
ABSL_FLAG(double, stop_grace_s, pstrain::LaunchOptions().stop_grace_s,
          "Seconds between SIGTERM and SIGKILL when stopping tasks");
ABSL_FLAG(double, restart_backoff_s, pstrain::LaunchOptions().restart_backoff_s,
          "launch: the wait before a failed task's first restart, doubled for each later one (at "
          "most 8 s, or this when longer): how long a pod takes to come back");
ABSL_FLAG(std::string, resume, "",
          "launch: continue the run in this run directory from its newest usable checkpoint, "
          "with the flags it was launched with (RUN_DIR/launch.json)");

namespace pstrain {
namespace {

absl::StatusOr<EchoMode> ParseEcho(const std::string& s) {
  if (s == "all") return EchoMode::kAll;
  if (s == "progress") return EchoMode::kProgress;
  if (s == "none") return EchoMode::kNone;
  return absl::InvalidArgumentError(absl::StrCat("--echo: \"", s, "\" (expected all, progress or none)"));
}

// `path` made absolute against the current directory ("runs/x" ->
// "/home/u/job/runs/x"); an absolute one, and one that cannot be, as it is.
std::string AbsolutePath(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.string();
}

// runs/<time>-<mode>, made here so that no other launch takes it (two in
// one second from one directory, a script's jobs started together): the
// first of it, -2, -3, ... that mkdir makes.
absl::StatusOr<std::string> MakeDefaultRunDir(const TrainOptions& o) {
  const std::string base =
      absl::StrCat("runs/", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()),
                   "-", UpdateModeName(o.mode));
  std::error_code ec;
  std::filesystem::create_directories("runs", ec);
  for (int n = 1; !ec && n < 1000; ++n) {
    const std::string dir = n == 1 ? base : absl::StrCat(base, "-", n);
    if (std::filesystem::create_directory(dir, ec)) return dir;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot make a run directory ", base, " here",
                   ec ? absl::StrCat(" (", ec.message(), ")") : " (-2 to -999 are taken too)",
                   "; give --run_dir=DIR"));
}

// `resume`: the run directory is the resumed one (no default is made).
absl::StatusOr<LaunchOptions> LaunchOptionsFromFlags(int argc, char** argv, bool resume = false) {
  ASSIGN_OR_RETURN(TrainOptions train, TrainOptionsFromFlags());
  LaunchOptions o;
  ASSIGN_OR_RETURN(o.command, CommandAfterDashes(argc, argv));
  if (!o.command.empty()) {
    // Recorded with the command, for a resume from another directory.
    std::error_code ec;
    o.command_dir = std::filesystem::current_path(ec).string();
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("the current directory: ", ec.message(), " (the command runs there)"));
    }
  }
  if (const char* python_path = std::getenv("PYTHONPATH")) o.python_path = python_path;
  o.cluster_spec_path = ClusterSpecFlag();
  if (o.cluster_spec_path.empty()) return absl::InvalidArgumentError("launch needs --cluster_spec=FILE");
  o.free_ports = absl::GetFlag(FLAGS_free_ports);
  o.metrics = absl::GetFlag(FLAGS_metrics);
  o.isolate = absl::GetFlag(FLAGS_isolate);
  o.link_rate = absl::GetFlag(FLAGS_link_rate);
  if (!o.link_rate.empty() && o.isolate.empty()) {
    return absl::InvalidArgumentError("--link_rate needs --isolate=netns");
  }
  // A spec that cannot be read is refused before a run directory is made
  // for it.
  if (!resume) RETURN_IF_ERROR(ClusterSpec::FromFile(o.cluster_spec_path).status());
  // Absolute: a resume may start from another directory, and a command
  // runs in its own.
  if (train.run_dir.empty() && !resume) {
    ASSIGN_OR_RETURN(train.run_dir, MakeDefaultRunDir(train));
  }
  o.run_dir = AbsolutePath(train.run_dir);
  if (!train.checkpoint_dir.empty()) train.checkpoint_dir = AbsolutePath(train.checkpoint_dir);
  o.bin_dir = BinDir();
  o.train = train;
  ASSIGN_OR_RETURN(o.ps, PsOptionsFor(train));
  o.secret_file = SecretFileFlag();
  o.insecure = InsecureFlag();
  ASSIGN_OR_RETURN(o.straggler_delay_ms, ParseStragglerItems(absl::GetFlag(FLAGS_straggler)));
  ASSIGN_OR_RETURN(o.echo, ParseEcho(absl::GetFlag(FLAGS_echo)));
  o.stop_grace_s = absl::GetFlag(FLAGS_stop_grace_s);
  ASSIGN_OR_RETURN(o.max_restarts, MaxRestartsFlag());
  o.restart_backoff_s = absl::GetFlag(FLAGS_restart_backoff_s);
  if (!(o.restart_backoff_s >= 0) || o.restart_backoff_s > 3600) {
    return absl::InvalidArgumentError("--restart_backoff_s must be in [0, 3600] seconds");
  }
  std::vector<std::string> args(argv, argv + argc);
  o.command_line = absl::StrJoin(args, " ");
  return o;
}

// Every flag of a launch as "--name=value", for RUN_DIR/launch.json.
std::vector<std::string> LaunchFlags(const LaunchOptions& o) {
  TrainOptions train = o.train;
  train.run_dir = o.run_dir;
  train.restore = false;
  std::vector<std::string> flags = train.ToArgs();
  flags.push_back(absl::StrCat("--cluster_spec=", ClusterSpecFlag()));
  flags.push_back(absl::StrCat("--free_ports=", absl::UnparseFlag(o.free_ports)));
  flags.push_back(absl::StrCat("--metrics=", absl::UnparseFlag(o.metrics)));
  flags.push_back(absl::StrCat("--isolate=", o.isolate));
  flags.push_back(absl::StrCat("--link_rate=", o.link_rate));
  flags.push_back(absl::StrCat("--straggler=", absl::UnparseFlag(absl::GetFlag(FLAGS_straggler))));
  flags.push_back(absl::StrCat("--echo=", EchoModeName(o.echo)));
  flags.push_back(absl::StrCat("--stop_grace_s=", absl::UnparseFlag(o.stop_grace_s)));
  flags.push_back(absl::StrCat("--max_restarts=", o.max_restarts));
  flags.push_back(absl::StrCat("--restart_backoff_s=", absl::UnparseFlag(o.restart_backoff_s)));
  flags.push_back(absl::StrCat("--io_threads=", o.ps.io_threads));
  flags.push_back(absl::StrCat("--update_threads=", o.ps.update_threads));
  flags.push_back(absl::StrCat("--secret_file=", o.secret_file));
  flags.push_back(absl::StrCat("--insecure=", absl::UnparseFlag(o.insecure)));
  return flags;
}

// `launch --resume=DIR`: the recorded flags, then the run directory's own
// spec (its ports re-picked if the launch had --free_ports).
absl::StatusOr<LaunchOptions> ResumeOptionsFromFlags(const std::string& run_dir, int argc,
                                                     char** argv) {
  ASSIGN_OR_RETURN(const RecordedLaunch recorded,
                   ApplyLaunchRecord(run_dir, FlagsOnCommandLine(argc, argv)));
  ASSIGN_OR_RETURN(LaunchOptions o, LaunchOptionsFromFlags(argc, argv, /*resume=*/true));
  if (o.command.empty()) {
    ASSIGN_OR_RETURN(LaunchedCommand command, CommandToResume(recorded, run_dir));
    if (!command.argv.empty()) {
      o.command = std::move(command.argv);
      o.command_dir = std::move(command.working_dir);
      std::printf("pstrain: the workers run the recorded command in %s: %s\n",
                  o.command_dir.c_str(), absl::StrJoin(o.command, " ").c_str());
    }
  }
  o.run_dir = AbsolutePath(run_dir);
  o.train.run_dir = o.run_dir;
  o.cluster_spec_path = o.run_dir + "/cluster_spec.json";
  o.resume = true;
  return o;
}

}  // namespace

absl::Status RunLaunch(int argc, char** argv, const Cancellation& stop) {
  const std::string resume = absl::GetFlag(FLAGS_resume);
  ASSIGN_OR_RETURN(const LaunchOptions options, resume.empty()
                                                    ? LaunchOptionsFromFlags(argc, argv)
                                                    : ResumeOptionsFromFlags(resume, argc, argv));
  RETURN_IF_ERROR(WriteLaunchRecord(options.run_dir, LaunchFlags(options), options.command_line,
                                    {options.command, options.command_dir}));
  if (options.resume) std::printf("pstrain: resuming the run in %s\n", options.run_dir.c_str());
  std::printf("pstrain: launching %s, run directory %s\n", options.cluster_spec_path.c_str(),
              options.run_dir.c_str());
  std::fflush(stdout);
  // On a terminal, --echo=progress is one line redrawn in place.
  std::unique_ptr<RunProgress> view;
  LaunchOptions launch = options;
  launch.cancel = &stop;
  if (options.echo == EchoMode::kProgress && isatty(STDOUT_FILENO) != 0) {
    ASSIGN_OR_RETURN(const ClusterSpec spec, ClusterSpec::FromFile(options.cluster_spec_path));
    const TaskId chief = spec.ChiefTask();
    view = std::make_unique<RunProgress>(stdout, /*rewrite=*/true, options.run_dir, spec.num_workers());
    launch.echo = EchoMode::kNone;
    // The launcher's own INFO lines would break the line drawn in place;
    // warnings and errors still show.
    FLAGS_minloglevel = google::GLOG_WARNING;
    launch.on_line = [&](const TaskId& task, absl::string_view line) {
      if (task == chief) view->OnChiefLine(line);
    };
    launch.on_task_state = [&](const TaskId& task, const std::string& state) {
      view->OnTaskState(task.ToString(), state);
    };
  }
  auto result = Launch(launch);
  if (view != nullptr) {
    view->Finish(result.status(), result.ok() ? result->summary.final_test_accuracy() : 0,
                 result.ok() ? result->summary.train_images_per_sec() : 0);
  }
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat(result.status().message(), " (run directory ", options.run_dir, ")"));
  }
  PrintSummary(result->summary, options.run_dir, stdout);
  return absl::OkStatus();
}

}  // namespace pstrain

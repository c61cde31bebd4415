// pstrain: the user's front door.
//
//   pstrain launch --cluster_spec=cluster_specs/local_2ps_2w.json --mode=sync --epochs=3
//
// starts every task of the spec on this machine and prints their logs, the
// per-epoch test accuracy and a final summary; RUN_DIR holds the rest.
//
//   pstrain compare --cluster_spec=... --modes=sync,async,ssp:2 --out=DIR
//   pstrain scale --workers=1,2,4 --ps=1,2 --mode=sync --out=DIR
//
// run experiments of several launches each and write DIR/report.md with
// plots (docs/experiments.md).
//
//   pstrain plan --calibrate=RUN_DIR --workers=1,2,4,8,16,32,64 --ps=1,2,4,8 --link_rate=10gbit --out=DIR
//
// predicts images/s of each cell from runs that already ran, before any
// of them runs (docs/planning.md).
//
//   pstrain chaos --cluster_spec=... --mode=async --runs=10 --faults=kill,stop --out=DIR
//
// kills and stops tasks of running jobs at random and reports how training
// survived (docs/recovery.md, "Restarts and chaos runs").

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/exit_codes.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "export/commands.h"
#include "flags/task_flags.h"
#include "glog/logging.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "launcher/chaos/chaos.h"
#include "launcher/experiments/compare.h"
#include "launcher/experiments/mode_spec.h"
#include "launcher/experiments/scale.h"
#include "launcher/k8s/k8s_manifest.h"
#include "launcher/plan/plan.h"
#include "launcher/reporting/timeline_chart.h"
#include "launcher/supervisor/launch.h"
#include "launcher/supervisor/launch_record.h"
#include "launcher/supervisor/progress.h"
#include "launcher/supervisor/straggler.h"
#include "launcher/supervisor/summary_printer.h"
#include "transport/job_secret.h"
#include "worker/presets.h"
#include "worker/train_flags.h"

namespace {

// The defaults of the flags below that are options' fields: those of a
// default LaunchOptions, ExperimentOptions and ScaleOptions (the training
// flags take theirs from TrainOptions, in train_flags.cc).
const pstrain::LaunchOptions& LaunchDefaults() {
  static const pstrain::LaunchOptions* const defaults = new pstrain::LaunchOptions();
  return *defaults;
}
const pstrain::ChaosOptions& ChaosDefaults() {
  static const pstrain::ChaosOptions* const defaults = new pstrain::ChaosOptions();
  return *defaults;
}
const pstrain::ScaleOptions& ScaleDefaults() {
  static const pstrain::ScaleOptions* const defaults = new pstrain::ScaleOptions();
  return *defaults;
}

}  // namespace

ABSL_FLAG(bool, metrics, LaunchDefaults().metrics,
          "Serve every task's live metrics for Prometheus on a free port of 127.0.0.1: prints "
          "the addresses and writes RUN_DIR/prometheus.yml to scrape them");
ABSL_FLAG(std::string, isolate, "",
          "netns: run every task in a network namespace of its own on a private bridge, with "
          "its own address and name (root only)");
ABSL_FLAG(std::string, link_rate, "",
          "With --isolate=netns: each task's link rate, e.g. 1gbit, 10gbit, 100mbit; plan: the links' rate "
          "to predict for ('': no link limit)");
ABSL_FLAG(bool, free_ports, LaunchDefaults().free_ports,
          "Give every loopback task of the spec (localhost, 127.x, ::1) a free port chosen by the OS");
ABSL_FLAG(std::vector<std::string>, straggler, {},
          "Slow a worker on purpose: worker:1:delay_ms=40 (comma-separated list)");
ABSL_FLAG(std::string, echo, pstrain::EchoModeName(LaunchDefaults().echo),
          "Task output to show: all, progress or none");
ABSL_FLAG(double, stop_grace_s, LaunchDefaults().stop_grace_s,
          "Seconds between SIGTERM and SIGKILL when stopping tasks");
ABSL_FLAG(int, max_restarts, LaunchDefaults().max_restarts,
          "launch/compare/scale/chaos: restart a task that fails (non-zero exit or a signal) up to this "
          "many times, with the same command line, after a backoff of 1 s doubling per restart (at most "
          "8 s); 0: a failed task fails the launch");
ABSL_FLAG(double, restart_backoff_s, LaunchDefaults().restart_backoff_s,
          "launch: the wait before a failed task's first restart, doubled for each later one (at "
          "most 8 s, or this when longer): how long a pod takes to come back");
ABSL_FLAG(std::string, resume, "",
          "launch: continue the run in this run directory from its newest usable checkpoint, "
          "with the flags it was launched with (RUN_DIR/launch.json)");
ABSL_FLAG(std::string, modes, "sync,async,ssp:2",
          "compare: update modes, comma-separated: sync, sync+backup:B, async, ssp:S (+slr: "
          "staleness-aware lr, for async and ssp)");
ABSL_FLAG(std::string, out, "",
          "compare/scale: output directory ('': runs/<command>-<time>); keygen: the secret file "
          "to write; export: the model file ('': RUN_DIR/model.onnx)");
ABSL_FLAG(std::string, checkpoint, "",
          "export/evaluate: which parameters of --run_dir: '' (final_params.f32), latest, ckpt-N, N "
          "or a checkpoint directory");
ABSL_FLAG(std::string, format, "onnx", "export: the model format (onnx)");
ABSL_FLAG(std::string, steps, "",
          "timeline: the steps to draw, A:B (inclusive) or one step A");
ABSL_FLAG(bool, invert, false,
          "predict: the images are dark on light (MNIST's are a white digit on black)");
ABSL_FLAG(std::string, workers, "1,2,4",
          "scale: worker counts, comma-separated (plan: default 1,2,4,8,16,32,64)");
ABSL_FLAG(std::string, ps, "1", "scale: ps counts, comma-separated (plan: default 1,2,4,8)");
ABSL_FLAG(int, eval_points, ScaleDefaults().experiment.eval_points,
          "compare/scale: about this many test evaluations per run when --eval_every_steps is 0");
ABSL_FLAG(double, target_accuracy, ScaleDefaults().experiment.target_accuracy,
          "compare/scale/plan: a test accuracy whose time each run is reported to reach (beside "
          "95-99%; scale: plotted against the workers; plan: predicted where a calibration run "
          "reached it)");
ABSL_FLAG(int, runs, ChaosDefaults().runs, "chaos: runs with faults, after the undisturbed baseline");
ABSL_FLAG(std::string, faults, "kill,stop",
          "chaos: fault kinds to draw from, comma-separated: kill (SIGKILL), stop (SIGSTOP, then SIGCONT "
          "after 1 s to 2 x --peer_timeout_s), lose (SIGKILL, and no restart for as long: a lost "
          "machine)");
ABSL_FLAG(std::vector<std::string>, fault_targets, {},
          "chaos: the tasks faults may hit, comma-separated types (ps, chief, worker) or tasks "
          "(worker:1); empty: every task of the spec");
ABSL_FLAG(int, max_faults_per_run, ChaosDefaults().max_faults_per_run,
          "chaos: 1, or 2 to give a quarter of the runs two faults");
ABSL_FLAG(double, run_timeout_s, ChaosDefaults().run_timeout_s,
          "chaos: a run not finished after this many seconds is a hang (0: 4 x the baseline's wall "
          "time + 60 s)");
ABSL_FLAG(std::string, image, "", "k8s: the container image every replica runs");
ABSL_FLAG(std::string, worker_image, "",
          "k8s with a command after --: the image the chief and worker replicas run it in (a "
          "PyTorch image with pstrain's /opt/pstrain copied in; default: --image)");
ABSL_FLAG(std::string, name, "", "k8s: the TFJob's name (a DNS-1035 label)");
ABSL_FLAG(std::string, namespace, "default", "k8s: the Kubernetes namespace");
ABSL_FLAG(int, gpus_per_worker, 0, "k8s: nvidia.com/gpu per chief and worker replica");
ABSL_FLAG(bool, dynamic_workers, false,
          "k8s: enableDynamicWorker: each replica gets a sparse TF_CONFIG, and workers may be "
          "added and removed while the job runs (async and ssp; no Chief replica: worker 0 is "
          "the chief)");
ABSL_FLAG(std::vector<std::string>, calibrate, {},
          "plan, scale: run directories to calibrate the predictions from (repeat the flag or separate with "
          "commas; scale: default its first cell)");
ABSL_FLAG(std::vector<std::string>, check, {},
          "plan: run directories to predict in their own cells against what they measured (repeat the flag "
          "or separate with commas); writes OUT/check.md");
ABSL_FLAG(std::string, link_kind, "nic",
          "plan: nic (each host's link carries --link_rate each way) or netns (only each task's egress "
          "is shaped, with a 10 ms bucket: what --isolate=netns --link_rate emulates)");
ABSL_FLAG(std::string, placement, "one_host",
          "plan: one_host (every task on one host of --host_cores cores, as `pstrain launch` runs them) "
          "or host_per_task");
ABSL_FLAG(int, host_cores, 0, "plan: cores of each host (0: the calibration host's)");
ABSL_FLAG(int, runs_host_cores, 0,
          "plan: cores of the host that made the --calibrate and --check runs, for runs whose summary.json "
          "does not record it (an older launcher's; 0: this machine's)");
ABSL_FLAG(double, ps_share, pstrain::kDefaultPsShare,
          "plan: for runs without task_cpu.csv, the ps's share of a 1-worker run's push/pull time (its "
          "service, which other workers queue for; the rest is the worker's latency), in (0, 1]");
ABSL_FLAG(int64_t, params, 0,
          "plan: a model of this many parameters (floats), with the compute of --model (0: --model's own)");
ABSL_FLAG(double, compute_ms, 0,
          "plan: a step's compute, mean ms, the measured distribution scaled to it (0: as measured)");
ABSL_FLAG(std::string, gnuplot, ScaleDefaults().experiment.gnuplot,
          "compare/scale: the gnuplot program that draws the plots");

namespace pstrain {
namespace {

constexpr char kUsage[] =
    "pstrain <command> [flags]\n\n"
    "commands:\n"
    "  launch   start every task of --cluster_spec on this machine and train\n"
    "  compare  train the same spec in several update modes; report and plots\n"
    "  scale    train over a matrix of ps and worker counts; report and plots\n"
    "  plan     predict images/s of ps and worker counts from calibration runs, before any runs\n"
    "  chaos    kill and stop tasks of running jobs at random; report how training survived\n"
    "  keygen   write a fresh job secret (--out=FILE, mode 0600) for --secret_file\n"
    "  export   write a run's trained model (or a checkpoint) as ONNX\n"
    "  evaluate evaluate a run's trained model (or a checkpoint) on the test set\n"
    "  predict  classify PNG images with a run's trained model\n"
    "  timeline draw steps of a run's timeline (--timeline) as a Gantt chart (PNG)\n"
    "  k8s      write a Kubernetes manifest (a Kubeflow TFJob) that runs the spec's job\n"
    "  task     a container's entrypoint: run ps_server or worker by $TF_CONFIG's task type\n\n"
    "  pstrain launch --cluster_spec=FILE --mode=sync|async|ssp --epochs=N [--batch_size=128]\n"
    "                 [--lr=..] [--optimizer=sgd|adam|adamw|adagrad] [--momentum=..] [--beta1=..]\n"
    "                 [--beta2=..] [--eps=..] [--weight_decay=..] [--adagrad_lr_decay=..]\n"
    "                 [--adagrad_initial_accumulator=..] [--max_steps=N] [--seed=S] [--run_dir=DIR]\n"
    "                 [--data_dir=DIR] [--model=mnist_cnn] [--free_ports] [--echo=progress] [--metrics]\n"
    "                 [--isolate=netns [--link_rate=1gbit]]\n"
    "                 [--checkpoint_every_steps=N] [--checkpoint_every_s=T] [--keep_checkpoints=3]\n"
    "  pstrain launch --cluster_spec=FILE [flags] -- python3 train.py ARGS...\n"
    "                 runs the command as the chief and every worker (python/pstrain,\n"
    "                 pstrain.torch); compare and scale take a command the same way\n"
    "  pstrain launch --resume=RUN_DIR [--max_steps=N | --epochs=N] [-- COMMAND...]\n"
    "                 a script's job reruns its recorded command where it first ran\n"
    "  pstrain compare --cluster_spec=FILE --modes=sync,async,ssp:2 [--epochs=N]\n"
    "                 [--straggler=worker:1:delay_ms=40] [--out=DIR] [training flags]\n"
    "  pstrain scale --workers=1,2,4,8 --ps=1,2 --mode=sync|async [--epochs=N] [--out=DIR]\n"
    "                 [--calibrate=RUN_DIR,...]\n"
    "                 [training flags]\n"
    "  pstrain plan --calibrate=RUN_DIR [--calibrate=RUN_DIR ...] --workers=1,2,4,8,16,32,64\n"
    "                 --ps=1,2,4,8 [--mode=sync,async] [--link_rate=10gbit] [--link_kind=nic|netns]\n"
    "                 [--placement=one_host|host_per_task] [--host_cores=N] [--model=NAME]\n"
    "                 [--params=N] [--compute_ms=X] [--wire=f32|bf16|fp16|topk:R] [--insecure] --out=DIR\n"
    "  pstrain plan --calibrate=RUN_DIR ... --check=RUN_DIR,... --out=DIR   (predicted against measured)\n"
    "  pstrain chaos --cluster_spec=FILE --mode=async --runs=N [--faults=kill,stop] [--seed=S]\n"
    "                 [--max_faults_per_run=2] [--fault_targets=worker:1] [--run_timeout_s=T]\n"
    "                 [--out=DIR] [training flags]\n"
    "  pstrain keygen --out=FILE\n"
    "  pstrain export --run_dir=DIR [--checkpoint=latest|ckpt-N] [--format=onnx] [--out=FILE]\n"
    "  pstrain evaluate --run_dir=DIR [--checkpoint=latest|ckpt-N] [--data_dir=DIR] [--dataset=D]\n"
    "  pstrain predict --run_dir=DIR [--checkpoint=latest|ckpt-N] [--invert] IMAGE.png...\n"
    "  pstrain timeline RUN_DIR --steps=A:B --out=FILE.png\n"
    "  pstrain k8s --cluster_spec=FILE --image=IMG --name=NAME [--namespace=NS]\n"
    "              [--gpus_per_worker=N] [--secret_file=FILE] [--out=FILE] [training flags]\n"
    "              [--worker_image=IMG -- python3 /app/train.py ARGS...]\n"
    "  pstrain task -- [ps_server or worker flags]   (TF_CONFIG in the environment)\n"
    "  launch, compare, scale and chaos take --max_restarts=N (default 3, per task).\n"
    "  Every command that starts tasks takes --secret_file=FILE (default: a fresh secret in the\n"
    "  run directory) or --insecure. See docs/experiments.md and README.md, \"Security\".\n";

// How many arguments follow "--" (0 without it).
size_t ArgsAfterDashes(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") return static_cast<size_t>(argc - i - 1);
  }
  return 0;
}

std::string BinDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "build/bin";
  std::string exe(path, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/'));
}

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

std::string DefaultRunDir(const TrainOptions& o) {
  return absl::StrCat("runs/", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()),
                      "-", UpdateModeName(o.mode));
}

// The ps tasks' options: the defaults, but for --peer_timeout_s and
// --register_timeout_s, which `pstrain` takes as training flags and gives
// to both sides.
PsServerOptions PsOptionsFor(const TrainOptions& train) {
  PsServerOptions ps;
  ps.peer_timeout_s = train.peer_timeout_s;
  ps.register_timeout_s = train.register_timeout_s;
  return ps;
}

absl::StatusOr<int> MaxRestartsFlag() {
  const int n = absl::GetFlag(FLAGS_max_restarts);
  if (n < 0) return absl::InvalidArgumentError("--max_restarts must be >= 0");
  return n;
}

// The user's command: what follows "--" (launch, compare, scale), its
// program looked up in PATH. Empty without one.
absl::StatusOr<std::vector<std::string>> CommandAfterDashes(int argc, char** argv) {
  std::vector<std::string> command;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    command.assign(argv + i + 1, argv + argc);
    if (command.empty()) return absl::InvalidArgumentError("nothing follows --: give a command");
    const char* path = std::getenv("PATH");
    ASSIGN_OR_RETURN(command.front(), ResolveProgram(command.front(), path ? path : ""));
    break;
  }
  return command;
}

absl::StatusOr<LaunchOptions> LaunchOptionsFromFlags(int argc, char** argv) {
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
  // Absolute: a resume may start from another directory, and a command
  // runs in its own.
  o.run_dir = AbsolutePath(train.run_dir.empty() ? DefaultRunDir(train) : train.run_dir);
  if (!train.checkpoint_dir.empty()) train.checkpoint_dir = AbsolutePath(train.checkpoint_dir);
  o.bin_dir = BinDir();
  o.train = train;
  o.ps = PsOptionsFor(train);
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

// export and evaluate: the run directory and data flags as given on the
// command line ('' when not given: the run's record decides).
SavedModelCommand SavedModelCommandFromFlags(int argc, char** argv) {
  const std::set<std::string> given = FlagsOnCommandLine(argc, argv);
  SavedModelCommand c;
  auto flag = [&](const char* name) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    return given.count(name) != 0 && f != nullptr ? f->CurrentValue() : std::string();
  };
  c.run_dir = flag("run_dir");
  c.data_dir = flag("data_dir");
  c.dataset = flag("dataset");
  c.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  c.format = absl::GetFlag(FLAGS_format);
  c.out = absl::GetFlag(FLAGS_out);
  return c;
}

// pstrain timeline RUN_DIR --steps=A:B --out=FILE.png (or --run_dir=RUN_DIR).
absl::Status RunTimelineCommand(const std::vector<std::string>& positional) {
  TimelineChartOptions o;
  if (positional.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", positional[1], "\""));
  }
  const absl::CommandLineFlag* run_dir = absl::FindCommandLineFlag("run_dir");
  o.run_dir = !positional.empty() ? positional[0] : run_dir != nullptr ? run_dir->CurrentValue() : "";
  if (o.run_dir.empty()) return absl::InvalidArgumentError("timeline needs RUN_DIR");
  if (absl::GetFlag(FLAGS_steps).empty()) return absl::InvalidArgumentError("timeline needs --steps=A:B");
  RETURN_IF_ERROR(ParseStepRange(absl::GetFlag(FLAGS_steps), &o));
  o.out = absl::GetFlag(FLAGS_out);
  if (o.out.empty()) o.out = absl::StrCat(o.run_dir, "/timeline_steps_", o.first_step, "-", o.last_step, ".png");
  o.gnuplot = absl::GetFlag(FLAGS_gnuplot);
  RETURN_IF_ERROR(DrawTimelineChart(o));
  std::printf("pstrain: wrote %s\n", o.out.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

// pstrain k8s: the TFJob manifest for --cluster_spec's task counts, each
// replica with the training flags given here and the paths of its pod.
// `command`: what follows "--", run by the Chief and Worker replicas
// (as written: the program is looked up in their image).
absl::Status RunK8s(const std::vector<std::string>& command) {
  const std::string spec_path = ClusterSpecFlag();
  if (spec_path.empty()) return absl::InvalidArgumentError("k8s needs --cluster_spec=FILE");
  ASSIGN_OR_RETURN(const ClusterSpec spec, ClusterSpec::FromFile(spec_path));
  ASSIGN_OR_RETURN(TrainOptions train, TrainOptionsFromFlags());
  K8sManifestOptions o;
  o.name = absl::GetFlag(FLAGS_name);
  o.k8s_namespace = absl::GetFlag(FLAGS_namespace);
  o.image = absl::GetFlag(FLAGS_image);
  o.gpus_per_worker = absl::GetFlag(FLAGS_gpus_per_worker);
  o.dynamic_workers = absl::GetFlag(FLAGS_dynamic_workers);
  if (o.dynamic_workers && train.mode == proto::SYNC) {
    return absl::InvalidArgumentError(
        "--dynamic_workers with --mode=sync: a sync version waits for every worker, which a "
        "sparse TF_CONFIG does not list; use --mode=async or --mode=ssp");
  }
  if (train.metrics_port != 0) o.metrics_port = train.metrics_port;
  if (!SecretFileFlag().empty()) {
    // Loaded to check it: a damaged file is refused here, not in the pods.
    RETURN_IF_ERROR(JobSecret::Load(SecretFileFlag()).status());
    ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(SecretFileFlag()));
    o.secret_b64 = absl::Base64Escape(bytes);
  }
  const std::string run_dir = absl::StrCat(kPodDataRoot, "/runs/", o.name);
  train.run_dir = run_dir;
  train.data_dir = absl::StrCat(kPodDataRoot, "/mnist");
  train.checkpoint_dir = run_dir + "/checkpoints";
  // A restarted ps is restored from the last checkpoint: keep them coming
  // unless the flags say how often.
  if (train.checkpoint_every_steps == 0 && train.checkpoint_every_s == 0) train.checkpoint_every_s = 60;
  train.metrics_port = o.metrics_port;
  train.metrics_host = "0.0.0.0";
  const std::string secret_flag = absl::StrCat("--secret_file=", kPodSecretFile);
  o.worker_args = train.ToArgs();
  o.worker_args.push_back(secret_flag);
  PsServerOptions ps = PsOptionsFor(train);
  ps.checkpoint_dir = train.checkpoint_dir;
  ps.metrics_port = o.metrics_port;
  ps.metrics_host = "0.0.0.0";
  o.ps_args = ps.ToArgs();
  o.ps_args.push_back(secret_flag);
  o.worker_command = command;
  o.worker_image = absl::GetFlag(FLAGS_worker_image);
  if (!command.empty()) {
    std::string flags_json;
    google::protobuf::Value flags;
    for (const std::string& a : train.ToArgs()) {
      flags.mutable_list_value()->add_values()->set_string_value(a);
    }
    (void)google::protobuf::util::MessageToJsonString(flags, &flags_json);
    const std::string root = kPodFrontendRoot;
    o.worker_env = {absl::StrCat("PSTRAIN_SECRET_FILE=", kPodSecretFile),
                    absl::StrCat("PSTRAIN_RUN_DIR=", run_dir),
                    absl::StrCat("PSTRAIN_FLAGS=", flags_json),
                    absl::StrCat("PSTRAIN_LIBRARY=", root, "/lib/libpstrain.so"),
                    absl::StrCat("LD_LIBRARY_PATH=", root, "/lib"),
                    absl::StrCat("PYTHONPATH=", root, "/python"), "PYTHONUNBUFFERED=1"};
  }
  ASSIGN_OR_RETURN(const std::string manifest, TfJobManifest(spec, o));
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fwrite(manifest.data(), 1, manifest.size(), stdout);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(WriteFileAtomic(out, manifest));
  std::printf("pstrain: wrote %s (kubectl apply -f %s)\n", out.c_str(), out.c_str());
  return absl::OkStatus();
}

// pstrain task -- FLAGS: what a container runs. Becomes ps_server (a ps
// task) or worker (chief, worker) of this pstrain's directory, with FLAGS,
// by $TF_CONFIG's task type.
absl::Status RunTask(const std::vector<std::string>& flags) {
  const char* tf_config = std::getenv("TF_CONFIG");
  if (tf_config == nullptr || *tf_config == '\0') {
    return absl::InvalidArgumentError(
        "pstrain task needs $TF_CONFIG (Kubeflow's training operator sets it for each replica)");
  }
  ASSIGN_OR_RETURN(const ClusterSpec spec, ClusterSpec::FromJson(tf_config, "$TF_CONFIG"));
  if (!spec.task().has_value()) return absl::InvalidArgumentError("$TF_CONFIG names no task");
  const TaskType type = spec.task()->type;
  if (type != TaskType::kPs && type != TaskType::kChief && type != TaskType::kWorker) {
    return absl::InvalidArgumentError(absl::StrCat("$TF_CONFIG's task is ", spec.task()->ToString(),
                                                   ": pstrain runs ps, chief and worker tasks"));
  }
  const std::string binary = BinDir() + (type == TaskType::kPs ? "/ps_server" : "/worker");
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& f : flags) argv.push_back(const_cast<char*>(f.c_str()));
  argv.push_back(nullptr);
  LOG(INFO) << "pstrain task: " << spec.task()->ToString() << ": exec " << binary;
  google::FlushLogFiles(google::GLOG_INFO);
  execv(binary.c_str(), argv.data());
  return absl::InternalError(absl::StrCat("cannot run ", binary, ": ", std::strerror(errno)));
}

absl::Status RunKeygen() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("keygen needs --out=FILE");
  RETURN_IF_ERROR(JobSecret::Generate().WriteNewFile(out));
  std::printf("pstrain: wrote a new job secret to %s (mode 0600); give every task of the job "
              "--secret_file=%s\n", out.c_str(), out.c_str());
  return absl::OkStatus();
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
  ASSIGN_OR_RETURN(LaunchOptions o, LaunchOptionsFromFlags(argc, argv));
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

absl::StatusOr<ExperimentOptions> ExperimentOptionsFromFlags(const TrainOptions& train,
                                                              const std::string& command, int argc,
                                                              char** argv,
                                                              const Cancellation& stop) {
  ExperimentOptions x;
  x.cancel = &stop;
  x.out_dir = absl::GetFlag(FLAGS_out);
  if (x.out_dir.empty()) {
    x.out_dir = absl::StrCat("runs/", command, "-",
                             absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()));
  }
  x.bin_dir = BinDir();
  ASSIGN_OR_RETURN(x.command, CommandAfterDashes(argc, argv));
  if (const char* python_path = std::getenv("PYTHONPATH")) x.python_path = python_path;
  x.train = train;
  x.ps = PsOptionsFor(train);
  x.secret_file = SecretFileFlag();
  x.insecure = InsecureFlag();
  x.straggler_items = absl::GetFlag(FLAGS_straggler);
  ASSIGN_OR_RETURN(x.straggler_delay_ms, ParseStragglerItems(x.straggler_items));
  ASSIGN_OR_RETURN(x.max_restarts, MaxRestartsFlag());
  x.isolate = absl::GetFlag(FLAGS_isolate);
  x.link_rate = absl::GetFlag(FLAGS_link_rate);
  if (!x.link_rate.empty() && x.isolate.empty()) {
    return absl::InvalidArgumentError("--link_rate needs --isolate=netns");
  }
  x.target_accuracy = absl::GetFlag(FLAGS_target_accuracy);
  if (!(x.target_accuracy > 0 && x.target_accuracy <= 1)) {
    return absl::InvalidArgumentError("--target_accuracy must be in (0, 1]");
  }
  x.eval_points = absl::GetFlag(FLAGS_eval_points);
  if (x.eval_points < 1) return absl::InvalidArgumentError("--eval_points must be >= 1");
  x.gnuplot = absl::GetFlag(FLAGS_gnuplot);
  x.command_line = absl::StrJoin(std::vector<std::string>(argv, argv + argc), " ");
  x.progress = stdout;
  x.rewrite_progress = isatty(STDOUT_FILENO) != 0;
  return x;
}

absl::Status RunCompareCommand(int argc, char** argv, const Cancellation& stop) {
  ASSIGN_OR_RETURN(const TrainOptions train, TrainOptionsFromFlags());
  CompareOptions o;
  ASSIGN_OR_RETURN(o.experiment, ExperimentOptionsFromFlags(train, "compare", argc, argv, stop));
  o.cluster_spec_path = ClusterSpecFlag();
  if (o.cluster_spec_path.empty()) return absl::InvalidArgumentError("compare needs --cluster_spec=FILE");
  ASSIGN_OR_RETURN(o.modes, ParseModeList(absl::GetFlag(FLAGS_modes)));
  o.lr_given = train.lr > 0;
  std::printf("pstrain compare: %zu runs of %s, output in %s\n", o.modes.size(), o.cluster_spec_path.c_str(),
              o.experiment.out_dir.c_str());
  return RunCompare(o);
}

// The mode of `train` in compare's syntax ("ssp:2", "sync+backup:1").
absl::StatusOr<ModeSpec> ModeOf(const TrainOptions& train) {
  std::string text = UpdateModeName(train.mode);
  if (train.mode == proto::SSP) absl::StrAppend(&text, ":", train.staleness);
  if (train.backup_workers > 0) absl::StrAppend(&text, "+backup:", train.backup_workers);
  if (train.staleness_lr && train.mode != proto::SYNC) absl::StrAppend(&text, "+slr");
  return ParseModeSpec(text);
}

absl::Status RunScaleCommand(int argc, char** argv, const Cancellation& stop) {
  ASSIGN_OR_RETURN(const TrainOptions train, TrainOptionsFromFlags());
  ScaleOptions o;
  ASSIGN_OR_RETURN(o.experiment, ExperimentOptionsFromFlags(train, "scale", argc, argv, stop));
  ASSIGN_OR_RETURN(o.workers, ParseCountList(absl::GetFlag(FLAGS_workers), "workers", 256));
  ASSIGN_OR_RETURN(o.ps, ParseCountList(absl::GetFlag(FLAGS_ps), "ps", 64));
  ASSIGN_OR_RETURN(o.mode, ModeOf(train));
  o.lr_given = train.lr > 0;
  o.calibrate = RepeatedFlagValues(argc, argv, "calibrate");
  std::printf("pstrain scale: %zu runs (%s), output in %s\n", o.ps.size() * o.workers.size(),
              o.mode.label.c_str(), o.experiment.out_dir.c_str());
  return RunScale(o);
}

// `pstrain plan`: flags -> PlanOptions (validated by RunPlan).
absl::StatusOr<PlanOptions> PlanOptionsFromFlags(int argc, char** argv) {
  const std::set<std::string> given = FlagsOnCommandLine(argc, argv);
  auto flag = [&](const char* name) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    return given.count(name) != 0 && f != nullptr ? f->CurrentValue() : std::string();
  };
  PlanOptions o;
  o.calibrate = RepeatedFlagValues(argc, argv, "calibrate");
  o.check = RepeatedFlagValues(argc, argv, "check");
  if (given.count("workers")) {
    ASSIGN_OR_RETURN(o.workers, ParseCountList(absl::GetFlag(FLAGS_workers), "workers", 65536));
  }
  if (given.count("ps")) {
    ASSIGN_OR_RETURN(o.ps, ParseCountList(absl::GetFlag(FLAGS_ps), "ps", 4096));
  }
  if (given.count("mode")) {
    ASSIGN_OR_RETURN(o.modes, ParsePlanModes(flag("mode")));
  }
  o.link_rate = absl::GetFlag(FLAGS_link_rate);
  ASSIGN_OR_RETURN(o.link, ParseLinkKind(absl::GetFlag(FLAGS_link_kind)));
  ASSIGN_OR_RETURN(o.placement, ParsePlacement(absl::GetFlag(FLAGS_placement)));
  o.host_cores = absl::GetFlag(FLAGS_host_cores);
  o.model = flag("model");
  o.params = absl::GetFlag(FLAGS_params);
  if (given.count("params") && o.params < 1) return absl::InvalidArgumentError("--params must be >= 1");
  o.compute_ms = absl::GetFlag(FLAGS_compute_ms);
  if (given.count("compute_ms") && !(o.compute_ms > 0)) return absl::InvalidArgumentError("--compute_ms must be > 0");
  o.wire = flag("wire");
  if (given.count("insecure")) o.insecure = InsecureFlag();
  o.out = absl::GetFlag(FLAGS_out);
  o.gnuplot = absl::GetFlag(FLAGS_gnuplot);
  o.command_line = absl::StrJoin(std::vector<std::string>(argv, argv + argc), " ");
  o.ps_share = absl::GetFlag(FLAGS_ps_share);
  o.target_accuracy = absl::GetFlag(FLAGS_target_accuracy);
  if (!(o.target_accuracy > 0 && o.target_accuracy <= 1)) {
    return absl::InvalidArgumentError("--target_accuracy must be in (0, 1]");
  }
  const int runs_host_cores = absl::GetFlag(FLAGS_runs_host_cores);
  o.default_host_cores = runs_host_cores != 0         ? runs_host_cores
                         : ReadMachineInfo().cores > 0 ? ReadMachineInfo().cores
                                                       : 1;
  return o;
}

absl::Status RunPlanCommand(int argc, char** argv) {
  ASSIGN_OR_RETURN(const PlanOptions o, PlanOptionsFromFlags(argc, argv));
  return RunPlan(o);
}

// Chaos runs need checkpoints to recover from: every 50 steps unless
// --checkpoint_every_steps or --checkpoint_every_s is given.
constexpr int64_t kChaosCheckpointEverySteps = 50;

absl::Status RunChaosCommand(int argc, char** argv, const Cancellation& stop) {
  ASSIGN_OR_RETURN(TrainOptions train, TrainOptionsFromFlags());
  const std::set<std::string> given = FlagsOnCommandLine(argc, argv);
  if (!given.count("checkpoint_every_steps") && !given.count("checkpoint_every_s")) {
    train.checkpoint_every_steps = kChaosCheckpointEverySteps;
  }
  ChaosOptions o;
  ASSIGN_OR_RETURN(o.experiment, ExperimentOptionsFromFlags(train, "chaos", argc, argv, stop));
  o.cluster_spec_path = ClusterSpecFlag();
  if (o.cluster_spec_path.empty()) return absl::InvalidArgumentError("chaos needs --cluster_spec=FILE");
  o.runs = absl::GetFlag(FLAGS_runs);
  ASSIGN_OR_RETURN(o.fault_kinds, ParseFaultKinds(absl::GetFlag(FLAGS_faults)));
  o.max_faults_per_run = absl::GetFlag(FLAGS_max_faults_per_run);
  o.fault_targets = absl::GetFlag(FLAGS_fault_targets);
  o.run_timeout_s = absl::GetFlag(FLAGS_run_timeout_s);
  std::printf("pstrain chaos: a baseline and %d runs with faults of %s, output in %s\n", o.runs,
              o.cluster_spec_path.c_str(), o.experiment.out_dir.c_str());
  std::fflush(stdout);
  ASSIGN_OR_RETURN(const ChaosResult result, RunChaos(o));
  std::printf("%s\n", ChaosTotalsLine(result.totals).c_str());
  std::fflush(stdout);
  const ChaosTotals& t = result.totals;
  if (t.hangs == 0 && t.failed == 0) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(t.hangs, " of ", t.runs, " runs hung and ", t.failed,
                                         " failed; see ", o.experiment.out_dir, "/report.md"));
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(pstrain::kUsage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  pstrain::InitLogging(argv[0]);
  const pstrain::Cancellation& stop = pstrain::InstallShutdownHandlers();
  const auto exit_with = [&stop](const absl::Status& status) {
    return pstrain::ExitWith("pstrain", status, stop);
  };
  if (positional.size() < 2) {
    std::fprintf(stderr, "%s", pstrain::kUsage);
    return pstrain::kExitBadConfig;
  }
  const std::set<std::string> given = pstrain::FlagsOnCommandLine(argc, argv);
  if (given.count("preset") > 0 && given.count("resume") > 0) {
    return exit_with(absl::InvalidArgumentError(
        "--preset with --resume: a resumed run continues with the flags it recorded"));
  }
  if (absl::Status s = pstrain::ApplyPresetFlag(given); !s.ok()) return exit_with(s);
  const std::string command = positional[1];
  if (command == "predict") {
    const std::vector<std::string> images(positional.begin() + 2, positional.end());
    return exit_with(pstrain::RunPredict(pstrain::SavedModelCommandFromFlags(argc, argv), images,
                                         absl::GetFlag(FLAGS_invert)));
  }
  if (command == "timeline") {
    return exit_with(pstrain::RunTimelineCommand(
        std::vector<std::string>(positional.begin() + 2, positional.end())));
  }
  if (command == "task") {
    return exit_with(
        pstrain::RunTask(std::vector<std::string>(positional.begin() + 2, positional.end())));
  }
  // launch, compare and scale take a command after "--" (those positional
  // arguments are it); nothing else takes any.
  const bool takes_command =
      command == "launch" || command == "compare" || command == "scale" || command == "k8s";
  const size_t after_dashes = pstrain::ArgsAfterDashes(argc, argv);
  if (positional.size() > 2 + (takes_command ? after_dashes : 0)) {
    return exit_with(absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", positional[2], "\"")));
  }
  if (command == "launch") return exit_with(pstrain::RunLaunch(argc, argv, stop));
  if (command == "compare") return exit_with(pstrain::RunCompareCommand(argc, argv, stop));
  if (command == "scale") return exit_with(pstrain::RunScaleCommand(argc, argv, stop));
  if (command == "chaos") return exit_with(pstrain::RunChaosCommand(argc, argv, stop));
  if (command == "plan") return exit_with(pstrain::RunPlanCommand(argc, argv));
  if (command == "keygen") return exit_with(pstrain::RunKeygen());
  if (command == "k8s") {
    const size_t n = pstrain::ArgsAfterDashes(argc, argv);
    return exit_with(pstrain::RunK8s(std::vector<std::string>(argv + argc - n, argv + argc)));
  }
  if (command == "export" || command == "evaluate") {
    const pstrain::SavedModelCommand c = pstrain::SavedModelCommandFromFlags(argc, argv);
    return exit_with(command == "export" ? pstrain::RunExport(c) : pstrain::RunEvaluate(c));
  }
  return exit_with(absl::InvalidArgumentError(absl::StrCat(
      "unknown command \"", command, "\" (expected launch, compare, scale, plan, chaos, keygen, export, "
      "evaluate, predict, timeline, k8s or task)")));
}

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
//
// Each command is in a file of its own, with the flags only it reads
// (commands.h); the flags several commands read are in shared_flags.h.

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "flags/parse.h"
#include "flags/task_flags.h"
#include "launcher/cli/commands.h"
#include "launcher/cli/shared_flags.h"
#include "worker/presets.h"

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
    "  reshard  cut a run's newest checkpoint again for another ps count (RUN_DIR --ps=N), to resume\n"
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

// InvalidArgument naming the first positional argument `command` does not
// take: launch, compare, scale and k8s take a command after "--" (those
// positional arguments are it); nothing else takes any.
absl::Status CheckNoExtraArguments(const std::string& command, const std::vector<char*>& positional,
                                   int argc, char** argv) {
  const bool takes_command =
      command == "launch" || command == "compare" || command == "scale" || command == "k8s";
  const size_t after_dashes = ArgsAfterDashes(argc, argv);
  if (positional.size() > 2 + (takes_command ? after_dashes : 0)) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", positional[2], "\""));
  }
  return absl::OkStatus();
}

// The command positional[1], after --preset (worker/presets.h).
absl::Status RunCommand(const std::vector<char*>& positional, int argc, char** argv,
                        const Cancellation& stop) {
  const std::set<std::string> given = FlagsOnCommandLine(argc, argv);
  if (given.count("preset") > 0 && given.count("resume") > 0) {
    return absl::InvalidArgumentError(
        "--preset with --resume: a resumed run continues with the flags it recorded");
  }
  RETURN_IF_ERROR(ApplyPresetFlag(given));
  const std::string command = positional[1];
  const std::vector<std::string> rest(positional.begin() + 2, positional.end());
  if (command == "predict") return RunPredictCommand(argc, argv, rest);
  if (command == "timeline") return RunTimelineCommand(rest);
  if (command == "reshard") return RunReshardCommand(rest);
  if (command == "task") return RunTask(rest);
  RETURN_IF_ERROR(CheckNoExtraArguments(command, positional, argc, argv));
  if (command == "launch") return RunLaunch(argc, argv, stop);
  if (command == "compare") return RunCompareCommand(argc, argv, stop);
  if (command == "scale") return RunScaleCommand(argc, argv, stop);
  if (command == "chaos") return RunChaosCommand(argc, argv, stop);
  if (command == "plan") return RunPlanCommand(argc, argv);
  if (command == "keygen") return RunKeygen();
  if (command == "k8s") return RunK8sCommand(argc, argv);
  if (command == "export" || command == "evaluate") return RunSavedModelCommand(command, argc, argv);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown command \"", command, "\" (expected launch, compare, scale, plan, chaos, keygen, export, "
      "evaluate, predict, timeline, reshard, k8s or task)"));
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(pstrain::kUsage);
  std::vector<char*> positional = pstrain::ParseFlagsOrExit(argc, argv);
  pstrain::InitLogging(argv[0]);
  const pstrain::Cancellation& stop = pstrain::InstallShutdownHandlers();
  if (positional.size() < 2) {
    std::fprintf(stderr, "%s", pstrain::kUsage);
    return pstrain::kExitBadConfig;
  }
  return pstrain::ExitWith("pstrain", pstrain::RunCommand(positional, argc, argv, stop), stop);
}

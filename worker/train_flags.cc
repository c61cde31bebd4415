#include "worker/train_flags.h"

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "common/optimizer.h"
#include "common/status_macros.h"

namespace {

// The flags' defaults: a default TrainOptions (a function, so that its
// construction never races other files' static initialisation).
const pstrain::TrainOptions& Defaults() {
  static const pstrain::TrainOptions* const defaults = new pstrain::TrainOptions();
  return *defaults;
}

const char* OnOff(bool on) { return on ? "on" : "off"; }

}  // namespace

ABSL_FLAG(std::string, mode, pstrain::UpdateModeName(Defaults().mode), "Update mode: sync, async or ssp");
ABSL_FLAG(int, staleness, Defaults().staleness,
          "ssp: how many steps a worker may run ahead of the slowest");
ABSL_FLAG(int, backup_workers, Defaults().backup_workers,
          "sync: apply each version once N-B gradients arrived; drop the late ones");
ABSL_FLAG(std::string, staleness_lr, OnOff(Defaults().staleness_lr),
          "async/ssp: divide the step by the staleness (on|off)");
ABSL_FLAG(int, epochs, Defaults().epochs, "Passes over the training set");
ABSL_FLAG(int, batch_size, Defaults().batch_size, "Examples per worker per step");
ABSL_FLAG(double, lr, Defaults().lr,
          "Learning rate (0: the default: sgd in sync 0.01 x workers N, in async and ssp "
          "0.02 x (1 - momentum) x min(N, 12 / (N - 1)); adam and adamw 1e-3; adagrad 1e-2)");
ABSL_FLAG(std::string, optimizer, pstrain::OptimizerName(Defaults().optimizer),
          "The ps tasks' optimizer, as PyTorch defines it: sgd, adam, adamw or adagrad");
ABSL_FLAG(double, momentum, Defaults().momentum,
          "sgd: momentum (-1: the mode's default: 0.5 in sync and with one worker, 0 in async "
          "and ssp with several)");
ABSL_FLAG(bool, nesterov, Defaults().nesterov, "sgd: Nesterov momentum");
ABSL_FLAG(double, weight_decay, Defaults().weight_decay,
          "Weight decay: L2, added to the gradient (sgd, adam, adagrad); decoupled for adamw "
          "(p *= 1 - lr * weight_decay)");
ABSL_FLAG(double, beta1, Defaults().beta1, "adam, adamw: the first moment's decay");
ABSL_FLAG(double, beta2, Defaults().beta2, "adam, adamw: the second moment's decay");
ABSL_FLAG(double, eps, Defaults().eps,
          "adam, adamw, adagrad: added to the denominator (0: PyTorch's default, 1e-8 for adam "
          "and adamw, 1e-10 for adagrad)");
ABSL_FLAG(double, adagrad_lr_decay, Defaults().adagrad_lr_decay,
          "adagrad: lr / (1 + (t - 1) * lr_decay) at step t");
ABSL_FLAG(double, adagrad_initial_accumulator, Defaults().adagrad_initial_accumulator,
          "adagrad: the sum of squared gradients' initial value");
ABSL_FLAG(std::string, lr_schedule, Defaults().lr_schedule,
          "Learning rate per update, computed on the ps: constant, step or cosine");
ABSL_FLAG(int64_t, warmup_steps, Defaults().warmup_steps,
          "Linear warm-up over the first N updates (Goyal et al.), before the schedule");
ABSL_FLAG(int64_t, lr_step_size, Defaults().lr_step_size, "step schedule: decay every N updates");
ABSL_FLAG(double, lr_gamma, Defaults().lr_gamma, "step schedule: multiply the rate by this");
ABSL_FLAG(double, min_lr, Defaults().min_lr, "cosine schedule: the rate at the last update");
ABSL_FLAG(int64_t, max_steps, Defaults().max_steps, "Stop each worker after this many steps (0: no limit)");
ABSL_FLAG(uint64_t, seed, Defaults().seed, "Seed for initialisation, data order and dropout");
ABSL_FLAG(std::string, model, Defaults().model, "Network: mnist_cnn, mlp or cnn_large");
ABSL_FLAG(std::string, device, Defaults().device, "auto, cpu, cuda or cuda:I");
ABSL_FLAG(std::string, data_dir, Defaults().data_dir, "Directory with the four IDX files (raw or .gz)");
ABSL_FLAG(std::string, dataset, Defaults().dataset, "mnist or fashion_mnist (normalisation constants)");
ABSL_FLAG(std::string, run_dir, Defaults().run_dir, "Directory for metrics and the summary ('' for none)");
ABSL_FLAG(bool, clean_run_dir, Defaults().clean_run_dir,
          "Remove an earlier run's outputs from --run_dir first (pstrain launch, else the chief)");
ABSL_FLAG(std::string, shard_strategy, Defaults().shard_strategy, "balanced or tensor_aligned");
ABSL_FLAG(bool, overlap, Defaults().overlap,
          "Push each shard's gradient as soon as backward has finished it (last layers first), "
          "while backward goes on");
ABSL_FLAG(bool, forward_ahead, Defaults().forward_ahead,
          "With --overlap: run the next step's forward while this step's parameters come in, each "
          "layer as soon as its own are in (first layers first)");
ABSL_FLAG(std::string, wire, Defaults().wire,
          "Gradient pushes on the wire: f32, bf16, fp16 or topk:R (each shard's largest fraction "
          "R of entries, 0 < R <= 1); the lossy ones with error feedback. Replies stay f32");
ABSL_FLAG(int64_t, eval_every_steps, Defaults().eval_every_steps,
          "Chief: also evaluate every N steps (0: epoch ends)");
ABSL_FLAG(int64_t, log_every_steps, Defaults().log_every_steps, "Progress line every N steps (0: none)");
ABSL_FLAG(double, straggler_delay_ms, Defaults().straggler_delay_ms,
          "Slow this worker by this much per step");
ABSL_FLAG(double, connect_timeout_s, Defaults().connect_timeout_s,
          "Give up if a ps cannot be reached for this long");
ABSL_FLAG(double, peer_timeout_s, Defaults().peer_timeout_s,
          "A ps (ps_server: a worker) that stops answering for this long is dead or frozen");
ABSL_FLAG(double, recovery_timeout_s, Defaults().recovery_timeout_s,
          "How long to wait for a restarted, dead or frozen ps to be back and restored");
ABSL_FLAG(double, register_timeout_s, Defaults().register_timeout_s,
          "How long a worker waits for the chief to initialise the parameters (pstrain launch and "
          "k8s: and each ps, for the chief's INIT and for every worker to register)");
ABSL_FLAG(double, heartbeat_interval_s, Defaults().heartbeat_interval_s, "Seconds between heartbeats");
ABSL_FLAG(double, rpc_timeout_s, Defaults().rpc_timeout_s, "Upper bound on one request (0: none)");
ABSL_FLAG(std::string, checkpoint_dir, Defaults().checkpoint_dir,
          "Checkpoint directory: the chief's manifests (pstrain launch: RUN_DIR/checkpoints)");
ABSL_FLAG(int64_t, checkpoint_every_steps, Defaults().checkpoint_every_steps,
          "Chief: checkpoint every N steps (0: off)");
ABSL_FLAG(double, checkpoint_every_s, Defaults().checkpoint_every_s,
          "Chief: checkpoint every T seconds (0: off)");
ABSL_FLAG(int, keep_checkpoints, Defaults().keep_checkpoints, "Keep the newest K checkpoints");
ABSL_FLAG(bool, restore, Defaults().restore,
          "Chief: RESTORE the ps tasks from the newest usable checkpoint in --checkpoint_dir and continue from it (others: append to the metrics)");
ABSL_FLAG(int, ps_replicas, Defaults().ps_replicas,
          "1: every shard keeps a hot standby on the next ps; a lost ps loses no update");
ABSL_FLAG(double, failover_after_s, Defaults().failover_after_s,
          "Chief, with --ps_replicas=1: a ps that stays away this long has its shard served by "
          "its standby until it is back (0: never; wait for it)");
ABSL_FLAG(bool, timeline, Defaults().timeline,
          "Write each worker's timeline (compute, push/pull per ps, evaluation, checkpoints, "
          "rejoins) as Chrome trace events; pstrain launch merges them into RUN_DIR/timeline.json");
ABSL_FLAG(int, metrics_port, Defaults().metrics_port,
          "Serve live metrics for Prometheus at http://HOST:PORT/metrics; 0 for none "
          "(pstrain launch: give --metrics instead, which picks a port per task)");
ABSL_FLAG(std::string, metrics_host, Defaults().metrics_host,
          "Address the metrics endpoint binds: 0.0.0.0 (every interface) or 127.0.0.1");

namespace pstrain {
namespace {

absl::StatusOr<bool> ParseOnOff(const std::string& flag, const std::string& value) {
  if (value == "on" || value == "true" || value == "1") return true;
  if (value == "off" || value == "false" || value == "0") return false;
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": \"", value, "\" (expected on or off)"));
}

}  // namespace

absl::StatusOr<TrainOptions> TrainOptionsFromFlags() {
  TrainOptions o;
  ASSIGN_OR_RETURN(o.mode, ParseUpdateMode(absl::GetFlag(FLAGS_mode)));
  o.staleness = absl::GetFlag(FLAGS_staleness);
  o.backup_workers = absl::GetFlag(FLAGS_backup_workers);
  ASSIGN_OR_RETURN(o.staleness_lr, ParseOnOff("staleness_lr", absl::GetFlag(FLAGS_staleness_lr)));
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.lr = absl::GetFlag(FLAGS_lr);
  ASSIGN_OR_RETURN(o.optimizer, ParseOptimizer(absl::GetFlag(FLAGS_optimizer)));
  o.momentum = absl::GetFlag(FLAGS_momentum);
  o.nesterov = absl::GetFlag(FLAGS_nesterov);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.beta1 = absl::GetFlag(FLAGS_beta1);
  o.beta2 = absl::GetFlag(FLAGS_beta2);
  o.eps = absl::GetFlag(FLAGS_eps);
  o.adagrad_lr_decay = absl::GetFlag(FLAGS_adagrad_lr_decay);
  o.adagrad_initial_accumulator = absl::GetFlag(FLAGS_adagrad_initial_accumulator);
  o.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.lr_step_size = absl::GetFlag(FLAGS_lr_step_size);
  o.lr_gamma = absl::GetFlag(FLAGS_lr_gamma);
  o.min_lr = absl::GetFlag(FLAGS_min_lr);
  o.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.model = absl::GetFlag(FLAGS_model);
  o.device = absl::GetFlag(FLAGS_device);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.dataset = absl::GetFlag(FLAGS_dataset);
  o.run_dir = absl::GetFlag(FLAGS_run_dir);
  o.clean_run_dir = absl::GetFlag(FLAGS_clean_run_dir);
  o.shard_strategy = absl::GetFlag(FLAGS_shard_strategy);
  o.wire = absl::GetFlag(FLAGS_wire);
  o.overlap = absl::GetFlag(FLAGS_overlap);
  o.forward_ahead = absl::GetFlag(FLAGS_forward_ahead);
  o.eval_every_steps = absl::GetFlag(FLAGS_eval_every_steps);
  o.log_every_steps = absl::GetFlag(FLAGS_log_every_steps);
  o.straggler_delay_ms = absl::GetFlag(FLAGS_straggler_delay_ms);
  o.connect_timeout_s = absl::GetFlag(FLAGS_connect_timeout_s);
  o.peer_timeout_s = absl::GetFlag(FLAGS_peer_timeout_s);
  o.recovery_timeout_s = absl::GetFlag(FLAGS_recovery_timeout_s);
  o.register_timeout_s = absl::GetFlag(FLAGS_register_timeout_s);
  o.heartbeat_interval_s = absl::GetFlag(FLAGS_heartbeat_interval_s);
  o.rpc_timeout_s = absl::GetFlag(FLAGS_rpc_timeout_s);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  o.checkpoint_every_s = absl::GetFlag(FLAGS_checkpoint_every_s);
  o.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  o.restore = absl::GetFlag(FLAGS_restore);
  o.ps_replicas = absl::GetFlag(FLAGS_ps_replicas);
  o.failover_after_s = absl::GetFlag(FLAGS_failover_after_s);
  o.timeline = absl::GetFlag(FLAGS_timeline);
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  RETURN_IF_ERROR(ValidateTrainOptions(o));
  return o;
}

namespace {

// This file's flags (not --cluster_spec or --secret_file: they are not
// the job's to give as training flags), by name.
bool IsTrainFlag(const absl::CommandLineFlag& flag) {
  return absl::EndsWith(flag.Filename(), "train_flags.cc");
}

absl::StatusOr<TrainOptions> ParseTrainArgs(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (!absl::StartsWith(arg, "--") || eq == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", arg, "\" is not a training flag of the form --name=value"));
    }
    const std::string name = arg.substr(2, eq - 2);
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr || !IsTrainFlag(*flag)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a training flag"));
    }
    std::string error;
    if (!flag->ParseFrom(arg.substr(eq + 1), &error)) {
      return absl::InvalidArgumentError(absl::StrCat(arg, ": ", error));
    }
  }
  return TrainOptionsFromFlags();
}

}  // namespace

absl::StatusOr<TrainOptions> TrainOptionsFromArgs(const std::vector<std::string>& args) {
  // Every training flag's value before, put back after (absl::FlagSaver
  // would log a line for each).
  std::vector<std::pair<absl::CommandLineFlag*, std::string>> saved;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsTrainFlag(*flag)) saved.emplace_back(flag, flag->CurrentValue());
  }
  absl::StatusOr<TrainOptions> options = ParseTrainArgs(args);
  for (auto& [flag, value] : saved) {
    std::string error;
    CHECK(flag->ParseFrom(value, &error)) << flag->Name() << ": " << error;
  }
  return options;
}

}  // namespace pstrain

#include "worker/train_flags.h"

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/optimizer.h"

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
ABSL_FLAG(double, beta1, Defaults().beta1, "adam, adamw: the first moment's decay (-1: 0.9)");
ABSL_FLAG(double, beta2, Defaults().beta2, "adam, adamw: the second moment's decay (-1: 0.999)");
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
ABSL_FLAG(bool, colocated_ipc, Defaults().colocated_ipc,
          "Reach a ps on this host over its Unix socket in a private directory, not "
          "encrypted (docs/deployment.md); false: over TCP (with CURVE unless --insecure)");
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
          "Chief, with --ps_replicas=1: a ps that stays away this long, and does not answer "
          "when asked directly for as long again, has its shard served by its standby until it "
          "is back (0: never; wait for it)");
ABSL_FLAG(double, embedding_memory_mb, Defaults().embedding_memory_mb,
          "Each ps holds at most this many MiB of embedding rows over all its tables, dropping "
          "the least recently updated rows to make room (0: no cap)");
ABSL_FLAG(int64_t, max_message_mb, Defaults().max_message_mb,
          "The largest message any task takes from a peer, in MiB (every ps and worker); a ps's "
          "state and embedding tables larger than that go to its standby, and back through the "
          "chief, in parts of at most one message");
ABSL_FLAG(int, busy_poll_us, Defaults().busy_poll_us,
          "Microseconds a worker waiting for its replies, and a ps for the next request after "
          "the last, looks before it sleeps (0 to 20000; 0: at once): sooner answers for small "
          "models' steps, at the cost of a core each while they keep coming; for hosts with a "
          "core to spare for every ps and worker");
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

// This file's flags (not --cluster_spec or --secret_file: they are not
// the job's to give as training flags).
bool IsTrainFlag(const absl::CommandLineFlag& flag) {
  return absl::EndsWith(flag.Filename(), "train_flags.cc");
}

}  // namespace

absl::StatusOr<TrainOptions> TrainOptionsFromFlags() {
  std::vector<std::string> args;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsTrainFlag(*flag)) args.push_back(absl::StrCat("--", name, "=", flag->CurrentValue()));
  }
  return TrainOptionsFromArgs(args);
}

}  // namespace pstrain

#pragma once

// Everything a worker needs to know about a training run, with the seed's
// defaults. The defaults are written here and only here: the flags of
// `worker` and `pstrain` (train_flags.h) take theirs from a default
// TrainOptions, and `pstrain launch` hands a TrainOptions to each worker it
// starts through ToArgs().

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/update_mode.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// SGD's defaults for one worker (the seed's): lr per worker, momentum.
inline constexpr double kSgdLrPerWorker = 0.01;
inline constexpr double kSgdMomentum = 0.5;
// Async and ssp: one worker's step grows with the workers while N (N - 1)
// <= this, and falls as 1 / (N - 1) beyond (EffectiveLearningRate).
inline constexpr double kAsyncStalenessBudget = 12;
// TrainOptions::momentum's "not given": the mode's default.
inline constexpr double kModeMomentum = -1.0;
// --beta1/--beta2 not given: PyTorch's Adam defaults (0.9, 0.999); apart
// from a value given, so that one given to another optimizer is refused.
inline constexpr double kOptimizerDefault = -1.0;

// Each field is the flag of the same name (--mode, --staleness, ...).
struct TrainOptions {
  proto::UpdateMode mode = proto::SYNC;  // --mode=sync|async|ssp
  int staleness = 2;                     // ssp bound s (steps a worker may run ahead)
  int backup_workers = 0;                // sync: apply after N - B gradients
  bool staleness_lr = false;             // async/ssp: lr / staleness
  int epochs = 1;
  int batch_size = 128;                  // per worker
  // 0: the default, EffectiveLearningRate() (sgd: by mode and worker
  // count; adam and adamw 1e-3, adagrad 1e-2, PyTorch's).
  double lr = 0.0;
  // The optimizer the ps tasks apply (common/optimizer.h, PyTorch's
  // definitions) and its hyperparameters; each optimizer reads its own.
  proto::Optimizer optimizer = proto::SGD;  // --optimizer=sgd|adam|adamw|adagrad
  double momentum = kModeMomentum;          // sgd; -1: EffectiveMomentum()
  bool nesterov = false;                    // sgd
  double weight_decay = 0.0;                // every optimizer (adamw: decoupled)
  double beta1 = kOptimizerDefault;         // adam, adamw; -1: 0.9
  double beta2 = kOptimizerDefault;         // adam, adamw; -1: 0.999
  double eps = 0.0;                         // 0: 1e-8 (adam, adamw), 1e-10 (adagrad)
  double adagrad_lr_decay = 0.0;
  double adagrad_initial_accumulator = 0.0;
  // The learning rate per update, computed on the ps (common/lr_schedule.h):
  // constant | step | cosine, after a linear warm-up of warmup_steps updates.
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  int64_t lr_step_size = 0;              // step: every N updates (required)
  double lr_gamma = 0.1;                 // step: the factor
  double min_lr = 0.0;                   // cosine: the last update's rate
  int64_t max_steps = 0;                 // per worker; 0: epochs x steps per epoch
  uint64_t seed = 1;
  std::string model = "mnist_cnn";
  std::string device = "auto";           // auto | cpu | cuda | cuda:I
  std::string data_dir = "data/mnist";
  std::string dataset = "mnist";         // mnist | fashion_mnist (normalisation constants)
  std::string run_dir;                   // "": write no files
  // First remove the outputs an earlier run left in run_dir
  // (RemoveStaleRunOutputs): `pstrain launch` before it starts any task
  // (passing false to the workers it starts), else the chief.
  bool clean_run_dir = true;
  std::string shard_strategy = "balanced";
  // How this worker's gradient pushes travel (common/wire_codec.h): f32,
  // bf16, fp16 or topk:R (the fraction R of each shard's entries, largest
  // first), the lossy ones with error feedback (worker/gradient_encoder.h).
  // Parameters always come back f32. Workers of one job may differ.
  std::string wire = "f32";
  // Send each shard's gradient as soon as backward has finished it, while
  // backward goes on (the CPU model; a backend that cannot say when, the
  // CUDA one, sends them all at the end as without it).
  bool overlap = true;
  // With overlap: run the next step's forward while this step's replies
  // come in, each layer as soon as its parameters are in (the CPU model;
  // docs/decisions/0029-forward-ahead.md). Changes no result, only when
  // forward runs.
  bool forward_ahead = true;
  int64_t eval_every_steps = 0;          // chief: also evaluate every N steps (0: epoch ends only)
  int64_t log_every_steps = 100;         // progress line every N steps
  double straggler_delay_ms = 0.0;       // slow this worker down on purpose (experiments)

  // Connection and liveness.
  double connect_timeout_s = 60.0;
  // A ps that stops answering for this long is dead or frozen: the worker
  // waits for it to come back (below). Seconds, so recovery starts soon.
  double peer_timeout_s = 10.0;
  double heartbeat_interval_s = 1.0;
  double rpc_timeout_s = 0.0;
  // With CURVE: a ps on this host is reached over its Unix socket, not
  // encrypted (transport/local_route.h says what of CURVE's guarantees
  // that keeps, and what not).
  bool colocated_ipc = true;
  // After a ps restarted, died or was rolled back: how long a worker waits
  // for it to be back and restored before it gives up (worker/trainer.h).
  double recovery_timeout_s = 120.0;
  // How long a worker's first REGISTER waits for the chief to initialise
  // the shards before it gives up, naming the chief: long enough for a
  // chief whose pod starts minutes after the others (an image pull, a node
  // scaled up). `pstrain launch` and `pstrain k8s` give the ps tasks the
  // same value: a ps waits as long for the chief's INIT after it starts,
  // and for every worker to register after it.
  double register_timeout_s = 600.0;

  // Checkpoints (the chief asks every ps to SAVE, then writes the manifest;
  // checkpoint/checkpoint_dir.h). `pstrain launch` sets checkpoint_dir to
  // RUN_DIR/checkpoints for every task.
  std::string checkpoint_dir;            // "": no checkpoints, no resume
  int64_t checkpoint_every_steps = 0;    // chief: save every N of its steps (0: off)
  double checkpoint_every_s = 0.0;       // chief: and/or every T seconds (0: off)
  int keep_checkpoints = 3;              // the newest K are kept
  // Chief: continue from the newest usable checkpoint in checkpoint_dir
  // (RESTORE instead of INIT). The other workers learn their position when
  // they register; for them it only means: append to the metrics CSVs.
  bool restore = false;
  // 1: every shard keeps a hot standby on the next ps (ps k's on ps k+1),
  // which has every update a worker has seen; a restarted ps is restored
  // from it and nothing applied is lost. Needs 2 or more ps. 0: none.
  int ps_replicas = 0;
  // With ps_replicas: a ps that has not come back this long after it was
  // lost has its shard served by its standby (ADOPT) until it is back, when
  // the chief gives the shard back (ps_server/hosted_shards.h). 0: never;
  // the workers wait for the ps, up to recovery_timeout_s.
  double failover_after_s = 2.0;
  // Each ps holds at most this many MiB of embedding rows over all its
  // tables, dropping the least recently updated row of any table to make
  // room (ps_server/embedding_tables.h). 0: no cap.
  double embedding_memory_mb = 0;
  // The largest message any task takes from a peer, MiB (every ps, and
  // each worker's client). A ps's state and embedding tables larger than
  // this go to its standby (--ps_replicas), and back through the chief,
  // in parts of at most one message (transport/state_parts.h).
  int64_t max_message_mb = 1024;
  // How long a worker waiting for its replies, and a ps for the next
  // request after the last, looks before it sleeps, microseconds (0:
  // sleeps at once; at most kMaxBusyPollUs).
  // Looking costs a core each; it answers sooner where a sleeping thread
  // and an idle core wake slowly: small models' steps, on hosts with a
  // core to spare for every ps and worker (transport/transport.h
  // PollReadable).
  int busy_poll_us = 0;
  // Write this task's timeline (Chrome trace events) to
  // RUN_DIR/timeline/; `pstrain launch` merges them into
  // RUN_DIR/timeline.json (worker/metrics_recorder.h).
  bool timeline = false;
  // Serve live metrics for Prometheus at http://metrics_host:metrics_port/
  // metrics (worker/metrics_recorder.h lists them); 0: none. `pstrain
  // launch --metrics` picks a free port for each task.
  int metrics_port = 0;
  std::string metrics_host = "0.0.0.0";

  // "--name=value" for every field, in declaration order, such that
  // TrainOptionsFromArgs (and the flags of train_flags.h) read them back to
  // an equal TrainOptions (doubles round-trip exactly).
  std::vector<std::string> ToArgs() const;
};

// The options that `args` ("--name=value", as ToArgs writes them) give
// over the defaults, validated. InvalidArgument naming the argument for
// one that is not a training option or whose value does not parse. Reads
// no flags: a process that parses no command line (one driving the C API)
// has none.
absl::StatusOr<TrainOptions> TrainOptionsFromArgs(const std::vector<std::string>& args);

// The training options' names, in declaration order (the flags' names).
std::vector<std::string> TrainOptionNames();

// InvalidArgument naming the flag for any value out of range.
absl::Status ValidateTrainOptions(const TrainOptions& options);

// The defaults of --lr and --momentum follow what one update applies
// (docs/decisions/0049-default-lr-by-mode.md). num_workers is the job's
// worker count, 0 when it is not known (a dynamic job).
//
// SGD's momentum: options.momentum when given (>= 0); else 0.5 in sync and
// with one worker, and 0 in async and ssp with several: N asynchronous
// workers already act as a momentum of about 1 - 1/N (Mitliagkas et al.
// 2016, "Asynchrony begets momentum"), which is at least one worker's 0.5
// from N = 2 on.
double EffectiveMomentum(const TrainOptions& options, int num_workers);

// The learning rate actually used: options.lr when given; adam and adamw
// 1e-3, adagrad 1e-2 (PyTorch's); sgd in sync 0.01 x workers (an update
// averages every worker's batch: the linear scaling rule, Goyal et al.
// 2017); sgd in async and ssp 0.02 x (1 - momentum) x min(N, 12 / (N -
// 1)): one worker's step lr / (1 - momentum) = 0.01 / 0.5, scaled with
// the workers as in sync while the mean staleness N - 1 is small, and as
// 1 / staleness beyond (a delayed gradient is stable for lr x staleness
// bounded; Zhang et al. 2016 divide by the staleness). With 1 worker 0.01,
// 2: 0.04, 4: 0.08, 8: 0.034, 16: 0.016; 0.02 when N is not known.
double EffectiveLearningRate(const TrainOptions& options, int num_workers);

// The eps actually used: options.eps, or the optimizer's PyTorch default.
double EffectiveEps(const TrainOptions& options);

// Sets `job`'s optimizer fields (optimizer, momentum, nesterov,
// weight_decay, betas, eps, Adagrad's) from `options` and the worker count
// (EffectiveMomentum): those the optimizer
// reads, the others left unset.
void SetJobOptimizer(const TrainOptions& options, int num_workers, proto::JobConfig* job);

}  // namespace pstrain

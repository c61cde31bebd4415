#include "worker/train_options.h"

#include <algorithm>
#include <cmath>

#include "absl/flags/marshalling.h"
#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "common/optimizer.h"
#include "common/shard_plan.h"
#include "common/status_macros.h"
#include "common/update_mode.h"
#include "common/wire_codec.h"

namespace pstrain {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", what));
}

// "--name=value" with the value as the flag would print it (exact doubles).
template <typename T>
std::string Arg(absl::string_view name, const T& value) {
  return absl::StrCat("--", name, "=", absl::UnparseFlag(value));
}

bool InUnitInterval(double x) { return x >= 0 && x < 1; }
bool NonNegative(double x) { return x >= 0 && std::isfinite(x); }

// The optimizer flags' ranges (PyTorch's, but eps: 0 is the default).
absl::Status ValidateOptimizerRanges(const TrainOptions& o) {
  if (!proto::Optimizer_IsValid(o.optimizer)) return Bad("optimizer", "unknown optimizer");
  if (!InUnitInterval(o.momentum) && o.momentum != kModeMomentum) {
    return Bad("momentum", absl::StrCat("must be in [0, 1) (or -1: the mode's default), got ",
                                        o.momentum));
  }
  if (o.nesterov && o.momentum <= 0) {
    return Bad("nesterov", "needs --momentum > 0 (set it: its default depends on --mode)");
  }
  if (!NonNegative(o.weight_decay)) return Bad("weight_decay", "must be >= 0");
  for (const auto& [flag, beta] : {std::pair<const char*, double>{"beta1", o.beta1},
                                   std::pair<const char*, double>{"beta2", o.beta2}}) {
    if (!InUnitInterval(beta)) return Bad(flag, absl::StrCat("must be in [0, 1), got ", beta));
  }
  if (!NonNegative(o.eps)) return Bad("eps", "must be >= 0 (0: the optimizer's default)");
  if (!NonNegative(o.adagrad_lr_decay)) return Bad("adagrad_lr_decay", "must be >= 0");
  if (!NonNegative(o.adagrad_initial_accumulator)) {
    return Bad("adagrad_initial_accumulator", "must be >= 0");
  }
  return absl::OkStatus();
}

// A flag that only another optimizer reads is refused when it is not at
// its default: it would be ignored. (--momentum and the betas have
// non-zero defaults and cannot be told apart from them; they are ignored.)
absl::Status ValidateOptimizerOptions(const TrainOptions& o) {
  RETURN_IF_ERROR(ValidateOptimizerRanges(o));
  if (o.nesterov && o.optimizer != proto::SGD) {
    return Bad("nesterov", "only applies to --optimizer=sgd");
  }
  const bool adagrad_flags = o.adagrad_lr_decay != 0 || o.adagrad_initial_accumulator != 0;
  if (adagrad_flags && o.optimizer != proto::ADAGRAD) {
    return Bad(o.adagrad_lr_decay != 0 ? "adagrad_lr_decay" : "adagrad_initial_accumulator",
               "only applies to --optimizer=adagrad");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTrainOptions(const TrainOptions& o) {
  if (o.epochs < 1) return Bad("epochs", absl::StrCat("must be >= 1, got ", o.epochs));
  if (o.batch_size < 1 || o.batch_size > 65536) {
    return Bad("batch_size", absl::StrCat("must be in 1..65536, got ", o.batch_size));
  }
  if (o.lr < 0 || !std::isfinite(o.lr)) return Bad("lr", absl::StrCat("must be >= 0, got ", o.lr));
  RETURN_IF_ERROR(ValidateOptimizerOptions(o));
  RETURN_IF_ERROR(ParseLrScheduleKind(o.lr_schedule).status());
  if (o.warmup_steps < 0) return Bad("warmup_steps", "must be >= 0");
  if (o.lr_schedule == "step" && o.lr_step_size < 1) {
    return Bad("lr_step_size", "must be >= 1 with --lr_schedule=step");
  }
  if (o.lr_step_size < 0) return Bad("lr_step_size", "must be >= 0");
  if (!(o.lr_gamma > 0) || !std::isfinite(o.lr_gamma)) return Bad("lr_gamma", "must be > 0");
  if (!(o.min_lr >= 0) || !std::isfinite(o.min_lr)) return Bad("min_lr", "must be >= 0");
  if (o.lr > 0 && o.min_lr > o.lr) return Bad("min_lr", "must not exceed --lr");
  if (o.max_steps < 0) return Bad("max_steps", "must be >= 0");
  if (o.metrics_port < 0 || o.metrics_port > 65535) {
    return Bad("metrics_port", absl::StrCat("must be a TCP port (1-65535) or 0, got ", o.metrics_port));
  }
  if (o.staleness < 0) return Bad("staleness", "must be >= 0");
  if (o.backup_workers < 0) return Bad("backup_workers", "must be >= 0");
  if (o.backup_workers > 0 && o.mode != proto::SYNC) {
    return Bad("backup_workers", "only applies to --mode=sync");
  }
  if (o.eval_every_steps < 0) return Bad("eval_every_steps", "must be >= 0");
  if (o.log_every_steps < 0) return Bad("log_every_steps", "must be >= 0");
  if (!(o.straggler_delay_ms >= 0) || o.straggler_delay_ms > 600000) {
    return Bad("straggler_delay_ms", "must be in [0, 600000]");
  }
  if (o.dataset != "mnist" && o.dataset != "fashion_mnist") {
    return Bad("dataset", absl::StrCat("\"", o.dataset, "\" (expected mnist or fashion_mnist)"));
  }
  if (auto s = ParseShardStrategy(o.shard_strategy); !s.ok()) {
    return Bad("shard_strategy", s.status().message());
  }
  if (auto w = ParseWireEncoding(o.wire); !w.ok()) return Bad("wire", w.status().message());
  if (!(o.connect_timeout_s > 0) || !(o.peer_timeout_s > 0) || !(o.heartbeat_interval_s > 0) ||
      !(o.rpc_timeout_s >= 0)) {
    return Bad("connect_timeout_s/peer_timeout_s/heartbeat_interval_s", "must be > 0");
  }
  if (o.checkpoint_every_steps < 0) return Bad("checkpoint_every_steps", "must be >= 0");
  if (!(o.checkpoint_every_s >= 0)) return Bad("checkpoint_every_s", "must be >= 0");
  if (o.keep_checkpoints < 1) return Bad("keep_checkpoints", "must be >= 1");
  if (!(o.recovery_timeout_s > 0)) return Bad("recovery_timeout_s", "must be > 0");
  if (!(o.register_timeout_s > 0)) return Bad("register_timeout_s", "must be > 0");
  if (o.ps_replicas < 0 || o.ps_replicas > 1) return Bad("ps_replicas", "must be 0 or 1");
  if (!(o.failover_after_s >= 0) || !std::isfinite(o.failover_after_s)) {
    return Bad("failover_after_s", "must be a number of seconds >= 0");
  }
  if (o.heartbeat_interval_s * 2 > o.peer_timeout_s) {
    return Bad("peer_timeout_s", "must be at least twice --heartbeat_interval_s");
  }
  return absl::OkStatus();
}

std::vector<std::string> TrainOptions::ToArgs() const {
  return {Arg("mode", UpdateModeName(mode)),
          Arg("staleness", staleness),
          Arg("backup_workers", backup_workers),
          Arg("staleness_lr", std::string(staleness_lr ? "on" : "off")),
          Arg("epochs", epochs),
          Arg("batch_size", batch_size),
          Arg("lr", lr),
          Arg("optimizer", OptimizerName(optimizer)),
          Arg("momentum", momentum),
          Arg("nesterov", nesterov),
          Arg("weight_decay", weight_decay),
          Arg("beta1", beta1),
          Arg("beta2", beta2),
          Arg("eps", eps),
          Arg("adagrad_lr_decay", adagrad_lr_decay),
          Arg("adagrad_initial_accumulator", adagrad_initial_accumulator),
          Arg("lr_schedule", lr_schedule),
          Arg("warmup_steps", warmup_steps),
          Arg("lr_step_size", lr_step_size),
          Arg("lr_gamma", lr_gamma),
          Arg("min_lr", min_lr),
          Arg("max_steps", max_steps),
          Arg("seed", seed),
          Arg("model", model),
          Arg("device", device),
          Arg("data_dir", data_dir),
          Arg("dataset", dataset),
          Arg("run_dir", run_dir),
          Arg("clean_run_dir", clean_run_dir),
          Arg("shard_strategy", shard_strategy),
          Arg("overlap", overlap),
          Arg("forward_ahead", forward_ahead),
          Arg("wire", wire),
          Arg("eval_every_steps", eval_every_steps),
          Arg("log_every_steps", log_every_steps),
          Arg("straggler_delay_ms", straggler_delay_ms),
          Arg("connect_timeout_s", connect_timeout_s),
          Arg("peer_timeout_s", peer_timeout_s),
          Arg("heartbeat_interval_s", heartbeat_interval_s),
          Arg("rpc_timeout_s", rpc_timeout_s),
          Arg("recovery_timeout_s", recovery_timeout_s),
          Arg("register_timeout_s", register_timeout_s),
          Arg("checkpoint_dir", checkpoint_dir),
          Arg("checkpoint_every_steps", checkpoint_every_steps),
          Arg("checkpoint_every_s", checkpoint_every_s),
          Arg("keep_checkpoints", keep_checkpoints),
          Arg("restore", restore),
          Arg("ps_replicas", ps_replicas),
          Arg("failover_after_s", failover_after_s),
          Arg("timeline", timeline),
          Arg("metrics_port", metrics_port),
          Arg("metrics_host", metrics_host)};
}

double EffectiveMomentum(const TrainOptions& options, int num_workers) {
  if (options.momentum >= 0) return options.momentum;
  if (options.mode == proto::SYNC || num_workers == 1) return kSgdMomentum;
  return 0.0;
}

double EffectiveLearningRate(const TrainOptions& options, int num_workers) {
  if (options.lr > 0) return options.lr;
  switch (options.optimizer) {
    case proto::ADAM:
    case proto::ADAMW:
      return 1e-3;
    case proto::ADAGRAD:
      return 1e-2;
    default:
      break;
  }
  if (options.mode == proto::SYNC) return kSgdLrPerWorker * std::max(num_workers, 1);
  // One worker's step, kSgdLrPerWorker / (1 - kSgdMomentum), at this
  // momentum, times the workers' share of it that staleness allows.
  const double step = kSgdLrPerWorker / (1 - kSgdMomentum) * (1 - EffectiveMomentum(options, num_workers));
  if (num_workers <= 1) return step;
  const double n = num_workers;
  return step * std::min(n, kAsyncStalenessBudget / (n - 1));
}

double EffectiveEps(const TrainOptions& options) {
  if (options.eps > 0) return options.eps;
  return options.optimizer == proto::ADAGRAD ? kAdagradEps : kAdamEps;
}

void SetJobOptimizer(const TrainOptions& o, int num_workers, proto::JobConfig* job) {
  job->set_optimizer(o.optimizer);
  job->set_weight_decay(o.weight_decay);
  if (o.optimizer == proto::SGD) {
    job->set_momentum(EffectiveMomentum(o, num_workers));
    job->set_nesterov(o.nesterov);
    return;
  }
  job->set_eps(EffectiveEps(o));
  if (o.optimizer == proto::ADAGRAD) {
    job->set_adagrad_lr_decay(o.adagrad_lr_decay);
    job->set_adagrad_initial_accumulator(o.adagrad_initial_accumulator);
    return;
  }
  job->set_beta1(o.beta1);
  job->set_beta2(o.beta2);
}

}  // namespace pstrain

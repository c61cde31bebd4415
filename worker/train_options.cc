#include "worker/train_options.h"

#include <cmath>

#include "absl/flags/marshalling.h"
#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "common/shard_plan.h"
#include "common/status_macros.h"
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

}  // namespace

absl::StatusOr<proto::UpdateMode> ParseUpdateMode(const std::string& name) {
  if (name == "sync") return proto::SYNC;
  if (name == "async") return proto::ASYNC;
  if (name == "ssp") return proto::SSP;
  return Bad("mode", absl::StrCat("\"", name, "\" (expected sync, async or ssp)"));
}

std::string UpdateModeName(proto::UpdateMode mode) {
  switch (mode) {
    case proto::SYNC:
      return "sync";
    case proto::ASYNC:
      return "async";
    case proto::SSP:
      return "ssp";
    default:
      return "unknown";
  }
}

absl::Status ValidateTrainOptions(const TrainOptions& o) {
  if (o.epochs < 1) return Bad("epochs", absl::StrCat("must be >= 1, got ", o.epochs));
  if (o.batch_size < 1 || o.batch_size > 65536) {
    return Bad("batch_size", absl::StrCat("must be in 1..65536, got ", o.batch_size));
  }
  if (o.lr < 0 || !std::isfinite(o.lr)) return Bad("lr", absl::StrCat("must be >= 0, got ", o.lr));
  if (!(o.momentum >= 0 && o.momentum < 1)) {
    return Bad("momentum", absl::StrCat("must be in [0, 1), got ", o.momentum));
  }
  if (o.nesterov && o.momentum == 0) return Bad("nesterov", "needs --momentum > 0");
  if (!(o.weight_decay >= 0)) return Bad("weight_decay", "must be >= 0");
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
          Arg("momentum", momentum),
          Arg("nesterov", nesterov),
          Arg("weight_decay", weight_decay),
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
          Arg("wire", wire),
          Arg("eval_every_steps", eval_every_steps),
          Arg("log_every_steps", log_every_steps),
          Arg("straggler_delay_ms", straggler_delay_ms),
          Arg("connect_timeout_s", connect_timeout_s),
          Arg("peer_timeout_s", peer_timeout_s),
          Arg("heartbeat_interval_s", heartbeat_interval_s),
          Arg("rpc_timeout_s", rpc_timeout_s),
          Arg("recovery_timeout_s", recovery_timeout_s),
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

double EffectiveLearningRate(const TrainOptions& options, int num_workers) {
  return options.lr > 0 ? options.lr : 0.01 * num_workers;
}

}  // namespace pstrain

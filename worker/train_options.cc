#include "worker/train_options.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/flags/marshalling.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/clock.h"
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

bool InUnitInterval(double x) { return x >= 0 && x < 1; }
bool NonNegative(double x) { return x >= 0 && std::isfinite(x); }

// The optimizer flags' ranges (PyTorch's, but eps: 0 is the default).
absl::Status ValidateOptimizerRanges(const TrainOptions& o) {
  if (!proto::Optimizer_IsValid(o.optimizer)) return Bad("optimizer", "unknown optimizer");
  if (!InUnitInterval(o.momentum) && o.momentum != kModeMomentum) {
    return Bad("momentum", absl::StrCat("must be in [0, 1) (or -1: the mode's default), got ",
                                        o.momentum));
  }
  if (!NonNegative(o.weight_decay)) return Bad("weight_decay", "must be >= 0");
  for (const auto& [flag, beta] : {std::pair<const char*, double>{"beta1", o.beta1},
                                   std::pair<const char*, double>{"beta2", o.beta2}}) {
    if (!InUnitInterval(beta) && beta != kOptimizerDefault) {
      return Bad(flag, absl::StrCat("must be in [0, 1) (or -1: Adam's default), got ", beta));
    }
  }
  if (!NonNegative(o.eps)) return Bad("eps", "must be >= 0 (0: the optimizer's default)");
  if (!NonNegative(o.adagrad_lr_decay)) return Bad("adagrad_lr_decay", "must be >= 0");
  if (!NonNegative(o.adagrad_initial_accumulator)) {
    return Bad("adagrad_initial_accumulator", "must be >= 0");
  }
  return absl::OkStatus();
}

// A flag that only another optimizer reads is refused when it is not at
// its default: it would be ignored.
absl::Status ValidateOptimizerOptions(const TrainOptions& o) {
  RETURN_IF_ERROR(ValidateOptimizerRanges(o));
  if (o.optimizer != proto::SGD && (o.nesterov || o.momentum != kModeMomentum)) {
    return Bad(o.nesterov ? "nesterov" : "momentum", "only applies to --optimizer=sgd");
  }
  if (o.nesterov && o.momentum <= 0) {
    return Bad("nesterov", "needs --momentum > 0 (set it: its default depends on --mode)");
  }
  // Adam's own defaults pass too: what launch.json recorded before -1 was.
  const bool adam = o.optimizer == proto::ADAM || o.optimizer == proto::ADAMW;
  const bool beta1_given = o.beta1 != kOptimizerDefault && o.beta1 != 0.9;
  if (!adam && (beta1_given || (o.beta2 != kOptimizerDefault && o.beta2 != 0.999))) {
    return Bad(beta1_given ? "beta1" : "beta2", "only applies to --optimizer=adam and adamw");
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
  if (o.keep_checkpoints < 1 || o.keep_checkpoints > kMaxKeepCheckpoints) {
    return Bad("keep_checkpoints", absl::StrCat("must be 1 to ", kMaxKeepCheckpoints));
  }
  if (!(o.recovery_timeout_s > 0)) return Bad("recovery_timeout_s", "must be > 0");
  if (!(o.register_timeout_s > 0)) return Bad("register_timeout_s", "must be > 0");
  if (o.ps_replicas < 0 || o.ps_replicas > 1) return Bad("ps_replicas", "must be 0 or 1");
  if (!(o.embedding_memory_mb >= 0) || o.embedding_memory_mb > 1 << 30) {
    return Bad("embedding_memory_mb", "must be in [0, 2^30] (MiB)");
  }
  if (o.max_message_mb < 1 || o.max_message_mb > (int64_t{1} << 16)) {
    return Bad("max_message_mb", "must be in [1, 65536] (MiB)");
  }
  if (o.busy_poll_us < 0 || o.busy_poll_us > kMaxBusyPollUs) {
    return Bad("busy_poll_us", absl::StrCat("must be in [0, ", kMaxBusyPollUs, "] (us)"));
  }
  if (!(o.failover_after_s >= 0) || !std::isfinite(o.failover_after_s)) {
    return Bad("failover_after_s", "must be a number of seconds >= 0");
  }
  if (o.heartbeat_interval_s * 2 > o.peer_timeout_s) {
    return Bad("peer_timeout_s", "must be at least twice --heartbeat_interval_s");
  }
  return absl::OkStatus();
}

namespace {

// One field of TrainOptions as its flag's text: its name, how its value
// is written and how it is read back.
struct Field {
  const char* name;
  std::function<std::string(const TrainOptions&)> write;
  std::function<absl::Status(const std::string&, TrainOptions*)> read;
};

// A field whose text is the flag's own (absl::UnparseFlag / ParseFlag).
template <typename T>
Field Plain(const char* name, T TrainOptions::*member) {
  return {name, [member](const TrainOptions& o) { return absl::UnparseFlag(o.*member); },
          [name, member](const std::string& text, TrainOptions* o) {
            std::string error;
            if (absl::ParseFlag(text, &(o->*member), &error)) return absl::OkStatus();
            return absl::InvalidArgumentError(
                absl::StrCat("--", name, "=", text, ": Illegal value '", text,
                             "' specified for flag '", name, "'", error.empty() ? "" : "; ", error));
          }};
}

// A field written and read by functions of its own (names of enums, on/off).
template <typename T, typename Write, typename Read>
Field Named(const char* name, T TrainOptions::*member, Write write, Read read) {
  return {name, [member, write](const TrainOptions& o) { return std::string(write(o.*member)); },
          [member, read](const std::string& text, TrainOptions* o) -> absl::Status {
            ASSIGN_OR_RETURN(o->*member, read(text));
            return absl::OkStatus();
          }};
}

const char* OnOff(bool on) { return on ? "on" : "off"; }

absl::StatusOr<bool> ParseOnOff(const std::string& text) {
  if (text == "on" || text == "true" || text == "1") return true;
  if (text == "off" || text == "false" || text == "0") return false;
  return Bad("staleness_lr", absl::StrCat("\"", text, "\" (expected on or off)"));
}

// Every field, in declaration order: ToArgs writes them, TrainOptionsFromArgs
// reads them, and the flags (train_flags.cc) are one each.
const std::vector<Field>& Fields() {
  using O = TrainOptions;
  static const std::vector<Field>* const fields = new std::vector<Field>{
      Named("mode", &O::mode, UpdateModeName, ParseUpdateMode),
      Plain("staleness", &O::staleness),
      Plain("backup_workers", &O::backup_workers),
      Named("staleness_lr", &O::staleness_lr, OnOff, ParseOnOff),
      Plain("epochs", &O::epochs),
      Plain("batch_size", &O::batch_size),
      Plain("lr", &O::lr),
      Named("optimizer", &O::optimizer, OptimizerName, ParseOptimizer),
      Plain("momentum", &O::momentum),
      Plain("nesterov", &O::nesterov),
      Plain("weight_decay", &O::weight_decay),
      Plain("beta1", &O::beta1),
      Plain("beta2", &O::beta2),
      Plain("eps", &O::eps),
      Plain("adagrad_lr_decay", &O::adagrad_lr_decay),
      Plain("adagrad_initial_accumulator", &O::adagrad_initial_accumulator),
      Plain("lr_schedule", &O::lr_schedule),
      Plain("warmup_steps", &O::warmup_steps),
      Plain("lr_step_size", &O::lr_step_size),
      Plain("lr_gamma", &O::lr_gamma),
      Plain("min_lr", &O::min_lr),
      Plain("max_steps", &O::max_steps),
      Plain("seed", &O::seed),
      Plain("model", &O::model),
      Plain("device", &O::device),
      Plain("data_dir", &O::data_dir),
      Plain("dataset", &O::dataset),
      Plain("run_dir", &O::run_dir),
      Plain("clean_run_dir", &O::clean_run_dir),
      Plain("shard_strategy", &O::shard_strategy),
      Plain("overlap", &O::overlap),
      Plain("forward_ahead", &O::forward_ahead),
      Plain("wire", &O::wire),
      Plain("eval_every_steps", &O::eval_every_steps),
      Plain("log_every_steps", &O::log_every_steps),
      Plain("straggler_delay_ms", &O::straggler_delay_ms),
      Plain("connect_timeout_s", &O::connect_timeout_s),
      Plain("peer_timeout_s", &O::peer_timeout_s),
      Plain("heartbeat_interval_s", &O::heartbeat_interval_s),
      Plain("rpc_timeout_s", &O::rpc_timeout_s),
      Plain("colocated_ipc", &O::colocated_ipc),
      Plain("recovery_timeout_s", &O::recovery_timeout_s),
      Plain("register_timeout_s", &O::register_timeout_s),
      Plain("checkpoint_dir", &O::checkpoint_dir),
      Plain("checkpoint_every_steps", &O::checkpoint_every_steps),
      Plain("checkpoint_every_s", &O::checkpoint_every_s),
      Plain("keep_checkpoints", &O::keep_checkpoints),
      Plain("restore", &O::restore),
      Plain("ps_replicas", &O::ps_replicas),
      Plain("failover_after_s", &O::failover_after_s),
      Plain("embedding_memory_mb", &O::embedding_memory_mb),
      Plain("max_message_mb", &O::max_message_mb),
      Plain("busy_poll_us", &O::busy_poll_us),
      Plain("timeline", &O::timeline),
      Plain("metrics_port", &O::metrics_port),
      Plain("metrics_host", &O::metrics_host),
  };
  return *fields;
}

}  // namespace

std::vector<std::string> TrainOptions::ToArgs() const {
  std::vector<std::string> args;
  for (const Field& f : Fields()) args.push_back(absl::StrCat("--", f.name, "=", f.write(*this)));
  return args;
}

std::vector<std::string> TrainOptionNames() {
  std::vector<std::string> names;
  for (const Field& f : Fields()) names.emplace_back(f.name);
  return names;
}

absl::StatusOr<TrainOptions> TrainOptionsFromArgs(const std::vector<std::string>& args) {
  TrainOptions o;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (!absl::StartsWith(arg, "--") || eq == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", arg, "\" is not a training flag of the form --name=value"));
    }
    const std::string name = arg.substr(2, eq - 2);
    const auto field = std::find_if(Fields().begin(), Fields().end(),
                                    [&name](const Field& f) { return name == f.name; });
    if (field == Fields().end()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a training flag"));
    }
    RETURN_IF_ERROR(field->read(arg.substr(eq + 1), &o));
  }
  RETURN_IF_ERROR(ValidateTrainOptions(o));
  return o;
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
  job->set_beta1(o.beta1 == kOptimizerDefault ? 0.9 : o.beta1);
  job->set_beta2(o.beta2 == kOptimizerDefault ? 0.999 : o.beta2);
}

}  // namespace pstrain

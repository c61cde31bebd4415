#include "worker/train_flags.h"

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, mode, "sync", "Update mode: sync, async or ssp");
ABSL_FLAG(int, staleness, 2, "ssp: how many steps a worker may run ahead of the slowest");
ABSL_FLAG(int, backup_workers, 0,
          "sync: apply each version once N-B gradients arrived; drop the late ones");
ABSL_FLAG(std::string, staleness_lr, "off", "async/ssp: divide the step by the staleness (on|off)");
ABSL_FLAG(int, epochs, 1, "Passes over the training set");
ABSL_FLAG(int, batch_size, 128, "Examples per worker per step");
ABSL_FLAG(double, lr, 0.0, "Learning rate (0: 0.01 x number of workers, the seed's rule)");
ABSL_FLAG(double, momentum, 0.5, "SGD momentum (PyTorch's definition)");
ABSL_FLAG(bool, nesterov, false, "Nesterov momentum");
ABSL_FLAG(double, weight_decay, 0.0, "L2 weight decay");
ABSL_FLAG(int64_t, max_steps, 0, "Stop each worker after this many steps (0: no limit)");
ABSL_FLAG(uint64_t, seed, 1, "Seed for initialisation, data order and dropout");
ABSL_FLAG(std::string, model, "mnist_cnn", "Network: mnist_cnn, mlp or cnn_large");
ABSL_FLAG(std::string, device, "auto", "auto, cpu, cuda or cuda:I");
ABSL_FLAG(std::string, data_dir, "data/mnist", "Directory with the four IDX files (raw or .gz)");
ABSL_FLAG(std::string, dataset, "mnist", "mnist or fashion_mnist (normalisation constants)");
ABSL_FLAG(std::string, run_dir, "", "Directory for metrics and the summary ('' for none)");
ABSL_FLAG(std::string, shard_strategy, "balanced", "balanced or tensor_aligned");
ABSL_FLAG(int64_t, eval_every_steps, 0, "Chief: also evaluate every N steps (0: epoch ends)");
ABSL_FLAG(int64_t, log_every_steps, 100, "Progress line every N steps (0: none)");
ABSL_FLAG(double, straggler_delay_ms, 0.0, "Slow this worker by this much per step");
ABSL_FLAG(double, connect_timeout_s, 60.0, "Give up if a ps cannot be reached for this long");
ABSL_FLAG(double, peer_timeout_s, 60.0, "A ps that stops answering for this long is dead");
ABSL_FLAG(double, heartbeat_interval_s, 1.0, "Seconds between heartbeats");
ABSL_FLAG(double, rpc_timeout_s, 0.0, "Upper bound on one request (0: none)");

namespace pstrain {
namespace {

// Flags a launcher forwards to every worker (straggler_delay_ms is per
// worker and set by the launcher itself).
constexpr const char* kForwarded[] = {
    "mode",           "staleness",         "backup_workers",    "staleness_lr",
    "epochs",         "batch_size",        "lr",                "momentum",
    "nesterov",       "weight_decay",      "max_steps",         "seed",
    "model",          "device",            "data_dir",          "dataset",
    "run_dir",        "shard_strategy",    "eval_every_steps",  "log_every_steps",
    "connect_timeout_s", "peer_timeout_s", "heartbeat_interval_s", "rpc_timeout_s"};

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
  o.momentum = absl::GetFlag(FLAGS_momentum);
  o.nesterov = absl::GetFlag(FLAGS_nesterov);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.model = absl::GetFlag(FLAGS_model);
  o.device = absl::GetFlag(FLAGS_device);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.dataset = absl::GetFlag(FLAGS_dataset);
  o.run_dir = absl::GetFlag(FLAGS_run_dir);
  o.shard_strategy = absl::GetFlag(FLAGS_shard_strategy);
  o.eval_every_steps = absl::GetFlag(FLAGS_eval_every_steps);
  o.log_every_steps = absl::GetFlag(FLAGS_log_every_steps);
  o.straggler_delay_ms = absl::GetFlag(FLAGS_straggler_delay_ms);
  o.connect_timeout_s = absl::GetFlag(FLAGS_connect_timeout_s);
  o.peer_timeout_s = absl::GetFlag(FLAGS_peer_timeout_s);
  o.heartbeat_interval_s = absl::GetFlag(FLAGS_heartbeat_interval_s);
  o.rpc_timeout_s = absl::GetFlag(FLAGS_rpc_timeout_s);
  RETURN_IF_ERROR(ValidateTrainOptions(o));
  return o;
}

std::vector<std::string> TrainFlagArgs() {
  std::vector<std::string> args;
  for (const char* name : kForwarded) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr) args.push_back(absl::StrCat("--", name, "=", flag->CurrentValue()));
  }
  return args;
}

}  // namespace pstrain

#include "launcher/cli/shared_flags.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "common/status_macros.h"
#include "launcher/experiments/scale.h"
#include "launcher/supervisor/launch.h"

ABSL_FLAG(std::string, isolate, "",
          "netns: run every task in a network namespace of its own on a private bridge, with "
          "its own address and name (root only)");
ABSL_FLAG(std::string, link_rate, "",
          "With --isolate=netns: each task's link rate, e.g. 1gbit, 10gbit, 100mbit; plan: the links' rate "
          "to predict for ('': no link limit)");
ABSL_FLAG(std::vector<std::string>, straggler, {},
          "Slow a worker on purpose: worker:1:delay_ms=40 (comma-separated list)");
ABSL_FLAG(int, max_restarts, pstrain::LaunchOptions().max_restarts,
          "launch/compare/scale/chaos: restart a task that fails (non-zero exit or a signal) up to this "
          "many times, with the same command line, after a backoff of 1 s doubling per restart (at most "
          "8 s); 0: a failed task fails the launch");
ABSL_FLAG(std::string, out, "",
          "compare/scale: output directory ('': runs/<command>-<time>); keygen: the secret file "
          "to write; export: the model file ('': RUN_DIR/model.onnx)");
ABSL_FLAG(std::string, workers, "1,2,4",
          "scale: worker counts, comma-separated (plan: default 1,2,4,8,16,32,64)");
ABSL_FLAG(std::string, ps, "1",
          "scale: ps counts, comma-separated (plan: default 1,2,4,8); reshard: the new ps count");
ABSL_FLAG(double, target_accuracy, pstrain::ScaleOptions().experiment.target_accuracy,
          "compare/scale/plan: a test accuracy whose time each run is reported to reach (beside "
          "95-99%; scale: plotted against the workers; plan: predicted where a calibration run "
          "reached it)");
ABSL_FLAG(std::vector<std::string>, calibrate, {},
          "plan, scale: run directories to calibrate the predictions from (repeat the flag or separate with "
          "commas; scale: default its first cell)");
ABSL_FLAG(int, io_threads, pstrain::PsServerOptions().io_threads,
          "launch/compare/scale/chaos/k8s: each ps's ZeroMQ I/O threads (1 to 16; under CURVE each "
          "encrypts its share of the workers' connections; 0: one per worker up to half the "
          "host's cores and 8 under CURVE, else 1)");
ABSL_FLAG(int, update_threads, pstrain::PsServerOptions().update_threads,
          "launch/compare/scale/chaos/k8s: the threads each ps shares a large update of its shard "
          "with (1 to 64; the values are the same on any number)");
ABSL_FLAG(std::string, gnuplot, pstrain::ScaleOptions().experiment.gnuplot,
          "compare/scale: the gnuplot program that draws the plots");

namespace pstrain {

absl::StatusOr<int> MaxRestartsFlag() {
  const int n = absl::GetFlag(FLAGS_max_restarts);
  if (n < 0) return absl::InvalidArgumentError("--max_restarts must be >= 0");
  return n;
}

absl::StatusOr<PsServerOptions> PsOptionsFor(const TrainOptions& train) {
  PsServerOptions ps;
  ps.peer_timeout_s = train.peer_timeout_s;
  ps.register_timeout_s = train.register_timeout_s;
  ps.max_message_bytes = train.max_message_mb << 20;
  ps.busy_poll_us = train.busy_poll_us;
  ps.io_threads = absl::GetFlag(FLAGS_io_threads);
  ps.update_threads = absl::GetFlag(FLAGS_update_threads);
  RETURN_IF_ERROR(ValidatePsServerOptions(ps));
  return ps;
}

size_t ArgsAfterDashes(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") return static_cast<size_t>(argc - i - 1);
  }
  return 0;
}

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

std::string BinDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "build/bin";
  std::string exe(path, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/'));
}

}  // namespace pstrain

// pstrain: the user's front door.
//
//   pstrain launch --cluster_spec=cluster_specs/local_2ps_2w.json --mode=sync --epochs=3
//
// starts every task of the spec on this machine and prints their logs, the
// per-epoch test accuracy and a final summary; RUN_DIR holds the rest.

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "common/task_flags.h"
#include "launcher/launcher.h"
#include "launcher/straggler.h"
#include "launcher/summary_printer.h"
#include "worker/train_flags.h"

ABSL_FLAG(bool, free_ports, false,
          "Give every localhost task of the spec a free port chosen by the OS");
ABSL_FLAG(std::vector<std::string>, straggler, {},
          "Slow a worker on purpose: worker:1:delay_ms=40 (comma-separated list)");
ABSL_FLAG(std::string, echo, "all", "Task output to show: all, progress or none");
ABSL_FLAG(double, stop_grace_s, 4.0, "Seconds between SIGTERM and SIGKILL when stopping tasks");

namespace pstrain {
namespace {

constexpr char kUsage[] =
    "pstrain <command> [flags]\n\n"
    "commands:\n"
    "  launch   start every task of --cluster_spec on this machine and train\n\n"
    "  pstrain launch --cluster_spec=FILE --mode=sync|async|ssp --epochs=N [--batch_size=128]\n"
    "                 [--lr=..] [--momentum=..] [--max_steps=N] [--seed=S] [--run_dir=DIR]\n"
    "                 [--data_dir=DIR] [--model=mnist_cnn] [--free_ports] [--echo=progress]\n";

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

std::string DefaultRunDir(const TrainOptions& o) {
  return absl::StrCat("runs/", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()),
                      "-", UpdateModeName(o.mode));
}

absl::StatusOr<LaunchOptions> LaunchOptionsFromFlags(int argc, char** argv) {
  ASSIGN_OR_RETURN(TrainOptions train, TrainOptionsFromFlags());
  LaunchOptions o;
  o.cluster_spec_path = ClusterSpecFlag();
  if (o.cluster_spec_path.empty()) return absl::InvalidArgumentError("launch needs --cluster_spec=FILE");
  o.free_ports = absl::GetFlag(FLAGS_free_ports);
  o.run_dir = train.run_dir.empty() ? DefaultRunDir(train) : train.run_dir;
  o.bin_dir = BinDir();
  o.worker_args = TrainFlagArgs();
  for (std::string& arg : o.worker_args) {
    if (absl::StartsWith(arg, "--run_dir=")) arg = "--run_dir=" + o.run_dir;
  }
  o.ps_args = {absl::StrCat("--peer_timeout_s=", train.peer_timeout_s)};
  ASSIGN_OR_RETURN(o.straggler_delay_ms, ParseStragglerItems(absl::GetFlag(FLAGS_straggler)));
  ASSIGN_OR_RETURN(o.echo, ParseEcho(absl::GetFlag(FLAGS_echo)));
  o.stop_grace_s = absl::GetFlag(FLAGS_stop_grace_s);
  std::vector<std::string> args(argv, argv + argc);
  o.command_line = absl::StrJoin(args, " ");
  return o;
}

absl::Status RunLaunch(int argc, char** argv) {
  ASSIGN_OR_RETURN(const LaunchOptions options, LaunchOptionsFromFlags(argc, argv));
  std::printf("pstrain: launching %s, run directory %s\n", options.cluster_spec_path.c_str(),
              options.run_dir.c_str());
  std::fflush(stdout);
  auto result = Launch(options);
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat(result.status().message(), " (run directory ", options.run_dir, ")"));
  }
  PrintSummary(result->summary, options.run_dir, stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(pstrain::kUsage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  pstrain::InitLogging(argv[0]);
  pstrain::InstallShutdownHandlers();
  if (positional.size() < 2) {
    std::fprintf(stderr, "%s", pstrain::kUsage);
    return pstrain::kExitBadConfig;
  }
  const std::string command = positional[1];
  if (positional.size() > 2) {
    return pstrain::ExitWith("pstrain", absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", positional[2], "\"")));
  }
  if (command == "launch") return pstrain::ExitWith("pstrain", pstrain::RunLaunch(argc, argv));
  return pstrain::ExitWith("pstrain", absl::InvalidArgumentError(absl::StrCat(
      "unknown command \"", command, "\" (expected launch)")));
}

#pragma once

// Runs every task of a cluster spec on this machine: each task its own
// process with its own TF_CONFIG, its output prefixed ("[worker:1] ...")
// and kept in RUN_DIR/logs/<task>.log.
//
// Ending: success when every task exits 0 and the chief wrote
// RUN_DIR/summary.json. When a task dies (non-zero exit or a signal), or on
// SIGINT/SIGTERM, every other task gets SIGTERM and, after stop_grace_s,
// SIGKILL; Run then names the task and how it ended. Nothing is left behind.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/cluster_spec.h"
#include "proto/run_summary.pb.h"

namespace pstrain {

enum class EchoMode {
  kAll,       // every line of every task, prefixed
  kProgress,  // the chief's epoch lines and every warning or error
  kNone,
};

struct LaunchOptions {
  std::string cluster_spec_path;
  // Replace each localhost port of the spec with a free one the OS picks
  // (so several runs, or a busy machine, never collide).
  bool free_ports = false;
  std::string run_dir;                       // created if missing
  std::string bin_dir;                       // holds ps_server and worker
  std::vector<std::string> worker_args;      // forwarded to every worker
  std::vector<std::string> ps_args;          // forwarded to every ps
  // The job secret every task gets (--secret_file). Empty: the launcher
  // uses RUN_DIR/job.secret, making it (mode 0600) when it is missing.
  std::string secret_file;
  bool insecure = false;                     // --insecure to every task instead
  std::map<std::string, double> straggler_delay_ms;  // by task, "worker:1"
  EchoMode echo = EchoMode::kAll;
  double stop_grace_s = 4.0;                 // SIGTERM -> SIGKILL
  // After the last worker exits, how long the ps tasks may take to exit.
  double ps_exit_grace_s = 10.0;
  std::string command_line;                  // recorded in the summary
  // Called with every line of every task's output, whatever `echo` says, on
  // the thread that called Launch (experiments draw progress from it).
  std::function<void(const TaskId& task, absl::string_view line)> on_line;
};

struct LaunchResult {
  proto::RunSummary summary;   // the chief's, plus the launcher's fields
  double wall_seconds = 0;
};

// Launches and waits. Errors: InvalidArgument/NotFound for a bad spec (no
// task started), Aborted naming the task that failed, Cancelled on
// SIGINT/SIGTERM, DataLoss if training "succeeded" without a summary.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

// The security flags every task of a launch gets: --insecure, or
// --secret_file=ABSOLUTE_PATH (options.secret_file, else RUN_DIR/job.secret,
// made when missing). InvalidArgument for both at once or a bad file.
absl::StatusOr<std::string> TaskSecurityArg(const LaunchOptions& options);

// A copy of `spec` whose localhost/127.0.0.1 ports are free ports chosen by
// the OS.
absl::StatusOr<ClusterSpec> WithFreePorts(const ClusterSpec& spec);

// The cluster JSON (no task) of `spec`, for RUN_DIR/cluster_spec.json.
std::string ClusterJson(const ClusterSpec& spec);

}  // namespace pstrain

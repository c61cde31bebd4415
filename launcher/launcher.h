#pragma once

// Runs every task of a cluster spec on this machine: each task its own
// process with its own TF_CONFIG, its output prefixed ("[worker:1] ...")
// and kept in RUN_DIR/logs/<task>.log.
//
// Before any task starts, the outputs an earlier run left in RUN_DIR are
// removed (RemoveStaleRunOutputs), with one line naming them, unless
// train.clean_run_dir is false or the launch resumes the run.
//
// Checkpoints: every task gets --checkpoint_dir=RUN_DIR/checkpoints (unless
// train.checkpoint_dir names another); the chief saves as
// train.checkpoint_every_steps/_s say.
//
// Ending: success when every task exits 0 and the chief wrote
// RUN_DIR/summary.json. Training is done when the chief has exited 0; the
// chief's SHUTDOWN makes the ps tasks exit just before it does, so a ps that
// exits 0 earlier is a failure only if the chief has not exited 0 within
// chief_exit_grace_s of it. When a task fails (non-zero exit, a signal, or
// that early ps exit), or on SIGINT/SIGTERM, every other task gets SIGTERM
// and, after stop_grace_s, SIGKILL; Launch then names the task and how it
// ended. Nothing is left behind.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/cluster_spec.h"
#include "proto/run_summary.pb.h"
#include "ps_server/ps_server_options.h"
#include "worker/train_options.h"

namespace pstrain {

enum class EchoMode {
  kAll,       // every line of every task, prefixed
  kProgress,  // the chief's epoch lines and every warning or error
  kNone,
};

// "all", "progress", "none": the values of `pstrain --echo`.
const char* EchoModeName(EchoMode mode);

struct LaunchOptions {
  std::string cluster_spec_path;
  // Replace each loopback address's port (IsLoopbackHost) with a free one
  // the OS picks (so several runs, or a busy machine, never collide).
  bool free_ports = false;
  std::string run_dir;                       // created if missing
  // Continue the run in run_dir from its newest usable checkpoint: nothing
  // is cleaned but summary.json and final_params.f32, the chief is started
  // with --restore and every worker appends to its metrics.
  bool resume = false;
  std::string bin_dir;                       // holds ps_server and worker
  // What every worker is started with (ToArgs), but for run_dir (the one
  // above), clean_run_dir (false: Launch cleans, if this one says so) and
  // straggler_delay_ms (the map below).
  TrainOptions train;
  PsServerOptions ps;                        // what every ps is started with
  // The job secret every task gets (--secret_file). Empty: the launcher
  // uses RUN_DIR/job.secret, making it (mode 0600) when it is missing.
  std::string secret_file;
  bool insecure = false;                     // --insecure to every task instead
  std::map<std::string, double> straggler_delay_ms;  // by task, "worker:1"
  EchoMode echo = EchoMode::kAll;
  double stop_grace_s = 4.0;                 // SIGTERM -> SIGKILL
  // After the last worker exits, how long the ps tasks may take to exit.
  double ps_exit_grace_s = 10.0;
  // After a ps exits 0, how long the chief may take to exit 0 (see above).
  double chief_exit_grace_s = 5.0;
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
// SIGINT/SIGTERM, DataLoss if training "succeeded" without a readable
// summary.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

// The security flag every task of a launch gets: --insecure, or
// --secret_file=ABSOLUTE_PATH (options.secret_file, else RUN_DIR/job.secret,
// made when missing). InvalidArgument for both at once or a bad file.
absl::StatusOr<std::string> TaskSecurityArg(const LaunchOptions& options);

}  // namespace pstrain

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
// that early ps exit), or when options.cancel fires (`pstrain`'s
// SIGINT/SIGTERM), every other task gets SIGTERM and, after stop_grace_s,
// SIGKILL; Launch then names the task and how it ended (InvalidArgument,
// exit 2, when the task exited 2: its configuration or input was bad;
// Aborted otherwise). Nothing is left behind.
//
// Restarts, as a Kubernetes TFJob's restart policy (OnFailure): a task
// that exits non-zero or by a signal while the launch is not stopping, and
// before training is done, is started again after a backoff
// (RestartBackoffSeconds) with exactly the same command line and TF_CONFIG,
// its output appended to the same log, up to max_restarts times per task.
// The launcher never tells a task how to recover: the tasks rejoin by
// themselves. Exit 0 is never restarted, nor kExitBadConfig (a bad flag or
// input fails the same way every time): that task fails the launch as
// before, and so does one with no restarts left (the message says how many
// it had). Cancellation, a failure or the deadline end every restart.
// Training being done ends them too (as a TFJob succeeds with its chief): a
// restart still waiting is dropped, and a restarted task that is still
// running chief_exit_grace_s later is stopped; neither fails the launch,
// and the summary's TaskExit says how it ended.
//
// Faults (tests and `pstrain chaos`): each of options.faults is sent at its
// time, or at its share of the training steps, if its task is running then,
// and reported as it happens.

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/cancellation.h"
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

enum class FaultKind {
  kKill,  // SIGKILL
  kStop,  // SIGSTOP, then SIGCONT after stop_s (a hung, not a dead, task)
  // SIGKILL, and no restart for stop_s: a lost machine, whose pod must be
  // scheduled elsewhere (with --ps_replicas, a ps lost this way has its
  // shard served by its standby meanwhile).
  kLose,
};

// "kill", "stop", "lose": the values of `pstrain chaos --faults`.
const char* FaultKindName(FaultKind kind);
// "SIGKILL", "SIGSTOP", "SIGKILL".
const char* FaultSignalName(FaultKind kind);

// A fault to inject into a launch.
struct Fault {
  double at_s = 0;   // seconds after every task was started
  TaskId task;
  FaultKind kind = FaultKind::kKill;
  double stop_s = 0; // kStop: how long the task stays stopped; kLose: away
  // In (0, 1): sent once the chief's progress lines ("epoch E/N step S/T
  // ...", every train.log_every_steps steps) say this share of the run's
  // steps is done (of N x T, or of train.max_steps when fewer). A run
  // faster than expected still gets its fault mid-training, where a time
  // alone could fall after its end. With at_s > 0 too, once an earlier
  // fault of the launch has gone out, at at_s if that comes first: a
  // later fault still lands while an earlier one stalls the run (a
  // stopped task, a recovery), when no progress line comes. < 0: at at_s.
  double at_progress = -1;
};

// "kill worker:1 at 3.2 s", "stop ps:0 at 4.0 s for 2.5 s", "lose ps:1 at
// 2.0 s for 6.0 s", "kill worker:1 at 55% of training".
std::string DescribeFault(const Fault& fault);

// A fault that was sent.
struct FaultRecord {
  Fault fault;        // as planned
  double sent_s = 0;  // when the signal was sent, seconds after every task was started
  pid_t pid = 0;      // the process it went to
  // kStop: when SIGCONT was sent (by plan, or by StopAll so that the task
  // could exit), < 0 if the process died stopped.
  double resumed_s = -1;
  double sent_progress = 0;  // the share of the training steps done then (as Fault::at_progress)
};

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
  // A program of the user's to run as the chief and every worker, instead
  // of the worker binary (`pstrain launch ... -- python3 train.py ARGS`;
  // the program is looked up in PATH). It finds in its environment
  //   TF_CONFIG            the cluster and its task, as the worker binary
  //   PSTRAIN_SECRET_FILE  the job secret (or PSTRAIN_INSECURE=1)
  //   PSTRAIN_RUN_DIR      the run directory
  //   PSTRAIN_FLAGS        the job's flags, a JSON array of "--name=value"
  //                        (what the worker binary would be started with)
  //   PSTRAIN_LIBRARY      the C API's library (bin_dir/../lib/libpstrain.so,
  //                        or the installed package's: command_frontend.h)
  //   PYTHONPATH           with the Python package's directory first
  //                        (bin_dir/../python, or the installed package's parent)
  // (include/pstrain/c_api.h reads them; python/pstrain loads the library).
  // Empty: the worker binary.
  std::vector<std::string> command;
  // The directory the command runs in; "": the launcher's own.
  std::string command_dir;
  // What follows the package on the command's PYTHONPATH: the launcher's
  // own PYTHONPATH, as main() read it ("" for none).
  std::string python_path;
  // What every worker is started with (ToArgs), but for run_dir (the one
  // above), clean_run_dir (false: Launch cleans, if this one says so) and
  // straggler_delay_ms (the map below).
  TrainOptions train;
  PsServerOptions ps;                        // what every ps is started with
  // Every task serves live metrics for Prometheus on a free port of
  // 127.0.0.1 (--metrics_port): the launcher prints the addresses and
  // writes RUN_DIR/prometheus.yml, a scrape config for them. train and ps
  // must then leave metrics_port 0.
  bool metrics = false;
  // "netns": every task in a network namespace of its own on a private
  // bridge (launcher/supervisor/netns_harness.h), as on hosts of a network: its
  // address "<type>-<index>.pstrain.svc:2222" resolves to its own IP.
  // Root only. "": every task on this machine's network, as the spec says.
  std::string isolate;
  std::string link_rate;  // with isolate: each task's egress rate ("1gbit"); "": unlimited
  // The job secret every task gets (--secret_file). Empty: the launcher
  // uses RUN_DIR/job.secret, making it (mode 0600) when it is missing.
  std::string secret_file;
  bool insecure = false;                     // --insecure to every task instead
  std::map<std::string, double> straggler_delay_ms;  // by task, "worker:1"
  EchoMode echo = EchoMode::kAll;
  double stop_grace_s = 4.0;                 // SIGTERM -> SIGKILL
  // After the last worker exits, how long the ps tasks may take to exit.
  double ps_exit_grace_s = 10.0;
  // After a ps exits 0, how long the chief may take to exit 0 (see above);
  // with a command, at least kCommandExitGraceS (an interpreter's teardown,
  // PyTorch's, takes seconds on a busy machine).
  double chief_exit_grace_s = 5.0;
  // Restarts per task (0: none, a failed task fails the launch at once).
  int max_restarts = 3;
  // Wait before a task's first restart; doubled for each later restart of
  // the same task, at most kMaxRestartBackoffS.
  double restart_backoff_s = 1.0;
  // 0: none. Past it (seconds since the first task was started), every task
  // is stopped and Launch returns DeadlineExceeded: the run is presumed hung.
  double deadline_s = 0;
  std::vector<Fault> faults;                 // sent by the launcher (above); empty: none
  std::string command_line;                  // recorded in the summary
  // Called with every line of every task's output, whatever `echo` says, on
  // the thread that called Launch (experiments draw progress from it).
  std::function<void(const TaskId& task, absl::string_view line)> on_line;
  // Called when a task's state changes: "running" (started or restarted),
  // "restarting" (died, restart scheduled), "done" (exited 0), "failed",
  // on the same thread (the progress view shows them).
  std::function<void(const TaskId& task, const std::string& state)> on_task_state;
  // Stops the launch: every task is stopped as for a failure, and Launch
  // returns Cancelled ("interrupted by <reason>"). `pstrain` passes its
  // SIGINT/SIGTERM. Borrowed, must outlive Launch; null: never.
  const Cancellation* cancel = nullptr;
};

inline constexpr double kMaxRestartBackoffS = 8.0;
inline constexpr double kCommandExitGraceS = 30.0;

// The wait before a task's restart number `restart` (1-based):
// restart_backoff_s x 2^(restart - 1), at most kMaxRestartBackoffS (or
// restart_backoff_s itself, when that is longer).
double RestartBackoffSeconds(const LaunchOptions& options, int restart);

// What happened to a launch's tasks: the faults sent and the restarts made,
// in order. Filled as they happen, so that a caller has them also when
// Launch fails.
struct LaunchEvents {
  std::vector<FaultRecord> faults;
  std::vector<proto::TaskRestart> restarts;
};

struct LaunchResult {
  // The chief's, plus the launcher's fields: wall_seconds, command, tasks
  // (with their restarts), restarts and task_restarts.
  proto::RunSummary summary;
  double wall_seconds = 0;
  std::vector<FaultRecord> faults;  // those sent, as in LaunchEvents
};

// `program` as the command's program: itself when it holds a '/', else
// the first executable of that name in the directories of `path` (PATH's
// value). NotFound naming it when there is none.
absl::StatusOr<std::string> ResolveProgram(const std::string& program, const std::string& path);

// Launches and waits. Errors: InvalidArgument/NotFound for a bad spec or
// fault (no task started), Aborted naming the task that failed (its
// restarts, its last error line, or for an exit code its last line, and
// its log), DeadlineExceeded past options.deadline_s, Cancelled once
// options.cancel fired, DataLoss if training "succeeded" without a readable
// summary. `events` (optional, owned by the caller) gets the faults and
// restarts whatever the outcome.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options, LaunchEvents* events = nullptr);

// The security flag every task of a launch gets: --insecure, or
// --secret_file=ABSOLUTE_PATH (options.secret_file, else RUN_DIR/job.secret,
// made when missing). InvalidArgument for both at once or a bad file.
absl::StatusOr<std::string> TaskSecurityArg(const LaunchOptions& options);

// The text of RUN_DIR/prometheus.yml: a Prometheus config scraping every
// "127.0.0.1:PORT" of `metrics_ports` (by task, "ps:0") every second, as
// the job "pstrain".
std::string PrometheusScrapeConfig(const std::string& run_dir,
                                   const std::map<std::string, int>& metrics_ports);

}  // namespace pstrain

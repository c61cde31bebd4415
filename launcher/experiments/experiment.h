#pragma once

// What `pstrain compare` and `pstrain scale` share: running one cluster of
// an experiment with a progress line and reading back what it left, and the
// facts every report states (the machine, the evaluation interval).

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/experiments/mode_spec.h"
#include "launcher/reporting/run_record.h"
#include "launcher/supervisor/launch.h"
#include "ps_server/ps_server_options.h"
#include "worker/train_options.h"

namespace pstrain {

// MNIST and Fashion-MNIST both train on 60,000 images.
inline constexpr int64_t kTrainImages = 60000;

struct ExperimentOptions {
  std::string out_dir;                      // created if missing
  std::string bin_dir;                      // holds ps_server and worker
  std::vector<std::string> command;         // as LaunchOptions: the user's program, or none
  std::string python_path;                  // as LaunchOptions
  // Every run's training options, but for what MakeRun sets: the mode,
  // run_dir, and eval_every_steps (this one when > 0, else chosen from
  // eval_points).
  TrainOptions train;
  PsServerOptions ps;
  std::string secret_file;                  // as LaunchOptions; "" = one per run directory
  bool insecure = false;
  std::vector<std::string> straggler_items; // as given, for the report
  std::map<std::string, double> straggler_delay_ms;
  int max_restarts = 3;                     // per task, as LaunchOptions
  std::string isolate;                      // as LaunchOptions: "netns" or ""
  std::string link_rate;                    // as LaunchOptions
  int eval_points = 10;                     // evaluations per run (about)
  // Reported beside 95/97/98/99% (time to it) and plotted (scale).
  double target_accuracy = 0.97;
  std::string gnuplot = "gnuplot";          // the plotting program
  std::string command_line;                 // the experiment's, for the report
  std::FILE* progress = stdout;
  bool rewrite_progress = false;            // progress on a terminal
  const Cancellation* cancel = nullptr;     // as LaunchOptions: stops the run under way
};

struct MachineInfo {
  std::string cpu_model;  // /proc/cpuinfo's "model name", or "unknown CPU"
  int cores = 0;          // hardware threads
};
MachineInfo ReadMachineInfo();
std::string DescribeMachine(const MachineInfo& machine);  // "2 cores (Intel Xeon ...)"
// Where the tasks ran: "every task a process on this machine", or in
// namespaces on a private bridge (--isolate=netns, with its link rate).
std::string DescribeNetwork(const ExperimentOptions& options);

// Steps each worker runs: epochs x ceil(kTrainImages / (batch x workers)),
// capped by max_steps (of options.train).
int64_t StepsPerWorker(const ExperimentOptions& options, int num_workers);

// The evaluation interval for a run of `steps` steps per worker: the given
// one, else about eval_points evaluations per run (at least every step).
int64_t EvalEverySteps(const ExperimentOptions& options, int64_t steps);

// One run of an experiment.
struct ExperimentRun {
  std::string label;        // "ssp:2"
  std::string prefix;       // progress prefix, "[2/3] ssp:2"
  std::string spec_path;
  std::string run_dir;
  TrainOptions train;  // complete: mode, run_dir and eval_every_steps set
  std::map<std::string, double> straggler_delay_ms;  // by task, "worker:1"
};

// A run of `label` into RUN_DIR: options.train in `mode`, with run_dir and
// eval_every_steps set, and the straggler.
ExperimentRun MakeRun(const ExperimentOptions& options, const std::string& label, const std::string& prefix,
                      const std::string& spec_path, const std::string& run_dir, const ModeSpec& mode,
                      int64_t eval_every_steps);

// What RunExperiment launches `run` with: free ports, no task output
// echoed, the experiment's security and restarts.
LaunchOptions ExperimentLaunchOptions(const ExperimentOptions& options, const ExperimentRun& run);

// Launches the run (ExperimentLaunchOptions, a progress line) and
// reads its run directory. A run that fails comes back as a record with
// its status set; only Cancelled (options.cancel fired) is returned as an error,
// so that an experiment stops there.
absl::StatusOr<RunRecord> RunExperiment(const ExperimentOptions& options, const ExperimentRun& run);

// Writes OUT/report.md and prints where it is and `notes`. Then Aborted
// naming the `failed` runs (of `runs`), if any.
absl::Status FinishExperiment(const ExperimentOptions& options, const std::string& report,
                              const std::vector<std::string>& notes, const std::vector<std::string>& failed,
                              size_t runs);

}  // namespace pstrain

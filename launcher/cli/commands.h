#pragma once

// The commands of `pstrain`, which main.cc dispatches to: each in its own
// file, with the flags that it alone reads defined there (the flags
// several read: shared_flags.h). Each returns what `pstrain` exits with
// (ExitWith, common/exit_codes.h): InvalidArgument or NotFound, exit 2,
// for what the user gave; any other error, exit 1.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cancellation.h"
#include "launcher/experiments/experiment.h"
#include "worker/train_options.h"

namespace pstrain {

// launch_command.cc: `pstrain launch`, also with --resume=RUN_DIR. `stop`
// (SIGINT, SIGTERM) stops the launch: Cancelled.
absl::Status RunLaunch(int argc, char** argv, const Cancellation& stop);

// experiment_commands.cc: `pstrain compare` and `pstrain scale`.
absl::Status RunCompareCommand(int argc, char** argv, const Cancellation& stop);
absl::Status RunScaleCommand(int argc, char** argv, const Cancellation& stop);

// What every experiment (compare, scale, chaos) takes from the flags
// besides `train`: where its output goes (--out, else
// runs/<command>-<time>), the user's command after "--", security,
// stragglers, restarts, isolation, --target_accuracy, --eval_points and
// --gnuplot. InvalidArgument naming a flag out of range.
absl::StatusOr<ExperimentOptions> ExperimentOptionsFromFlags(const TrainOptions& train,
                                                             const std::string& command, int argc,
                                                             char** argv, const Cancellation& stop);

// plan_command.cc: `pstrain plan`.
absl::Status RunPlanCommand(int argc, char** argv);

// chaos_command.cc: `pstrain chaos`; Aborted when a run hung or failed.
absl::Status RunChaosCommand(int argc, char** argv, const Cancellation& stop);

// k8s_command.cc: `pstrain k8s`, the TFJob manifest (what follows "--" is
// the command of the Chief and Worker replicas); and `pstrain task --
// FLAGS`, a container's entrypoint, which execs ps_server or worker by
// $TF_CONFIG's task type with FLAGS and returns only when it cannot.
absl::Status RunK8sCommand(int argc, char** argv);
absl::Status RunTask(const std::vector<std::string>& flags);

// tool_commands.cc: `pstrain keygen`, `timeline RUN_DIR`, `export` and
// `evaluate` (`command`), and `predict IMAGE...`.
absl::Status RunKeygen();
absl::Status RunTimelineCommand(const std::vector<std::string>& positional);
absl::Status RunSavedModelCommand(const std::string& command, int argc, char** argv);
absl::Status RunPredictCommand(int argc, char** argv, const std::vector<std::string>& images);
// `reshard RUN_DIR --ps=N`: the run's newest checkpoint cut again for N ps
// (ps_server/reshard.h) and its spec given N ps, to resume with N.
absl::Status RunReshardCommand(const std::vector<std::string>& positional);

}  // namespace pstrain

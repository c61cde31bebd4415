#pragma once

// The flags of `pstrain` that several commands read, and what those
// commands share in reading the command line (launcher/cli/). A flag that
// one command alone reads is defined beside that command, in its file
// (commands.h); the training flags are worker/train_flags.h's, the task's
// flags/task_flags.h's.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "ps_server/ps_server_options.h"
#include "worker/train_options.h"

// launch, compare, scale, chaos
ABSL_DECLARE_FLAG(std::string, isolate);
ABSL_DECLARE_FLAG(std::vector<std::string>, straggler);
ABSL_DECLARE_FLAG(int, max_restarts);
// launch, compare, scale, chaos, plan
ABSL_DECLARE_FLAG(std::string, link_rate);
// compare, scale, chaos, plan, keygen, export, timeline, k8s
ABSL_DECLARE_FLAG(std::string, out);
// scale, plan
ABSL_DECLARE_FLAG(std::string, workers);
ABSL_DECLARE_FLAG(std::string, ps);
ABSL_DECLARE_FLAG(std::vector<std::string>, calibrate);
// compare, scale, chaos, plan
ABSL_DECLARE_FLAG(double, target_accuracy);
// compare, scale, chaos, plan, timeline
ABSL_DECLARE_FLAG(std::string, gnuplot);

namespace pstrain {

// --max_restarts; InvalidArgument when it is below 0.
absl::StatusOr<int> MaxRestartsFlag();

// The ps tasks' options: the defaults, but for --peer_timeout_s,
// --register_timeout_s, --max_message_mb and --busy_poll_us, which
// `pstrain` takes as training flags and gives to both sides, and the ps's
// own --io_threads and --update_threads; InvalidArgument for values a ps
// would refuse.
absl::StatusOr<PsServerOptions> PsOptionsFor(const TrainOptions& train);

// How many arguments follow "--" (0 without it).
size_t ArgsAfterDashes(int argc, char** argv);

// The user's command: what follows "--" (launch, compare, scale), its
// program looked up in PATH. Empty without one; InvalidArgument when
// nothing follows "--", NotFound when the program is not in PATH.
absl::StatusOr<std::vector<std::string>> CommandAfterDashes(int argc, char** argv);

// The directory of this binary, where ps_server and worker are too
// ("build/bin" when /proc/self/exe cannot be read).
std::string BinDir();

}  // namespace pstrain

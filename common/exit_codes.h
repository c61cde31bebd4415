#pragma once

// Process exit codes shared by every pstrain binary.

#include <cstdio>

#include "absl/status/status.h"
#include "common/cancellation.h"

namespace pstrain {

inline constexpr int kExitOk = 0;
// Training or serving failed at run time: a dead peer, a refused request,
// a corrupt reply, a socket that cannot bind, a file that cannot be written,
// a run that ended without its summary.
inline constexpr int kExitFailure = 1;
// Bad configuration or input given by the user: malformed cluster spec,
// invalid flag value, missing or corrupt data files.
inline constexpr int kExitBadConfig = 2;
// Stopped by SIGINT or SIGTERM: 130 for either (128 + SIGINT, what a shell
// reports for Ctrl-C), not 128 + the signal's number.
inline constexpr int kExitInterrupted = 130;

// kExitOk for OK; kExitInterrupted for any error once `interrupted` (the
// process got SIGINT/SIGTERM: what failed after that failed because of it);
// kExitBadConfig for InvalidArgument and NotFound, the codes for what the
// user gave being wrong or missing (a data file the user gave that is
// corrupt is InvalidArgument); kExitFailure for everything else: DataLoss
// (bytes lost or corrupted at run time) and a Cancelled that no signal
// caused (a peer's "shutting down" reply) included.
inline int ExitCodeFor(const absl::Status& status, bool interrupted) {
  if (status.ok()) return kExitOk;
  if (interrupted) return kExitInterrupted;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
      return kExitBadConfig;
    default:
      return kExitFailure;
  }
}

// Prints "program: error: message" on stderr (nothing for OK) and returns
// ExitCodeFor(status, whether `stop` fired: the Cancellation main() got
// from InstallShutdownHandlers). A process stopped by SIGINT or SIGTERM
// (the launcher stopping a job, a user's Ctrl-C) says "program: message":
// what it was doing ended because it was asked to, which is no error of
// its own. For main()'s last line.
inline int ExitWith(const char* program, const absl::Status& status, const Cancellation& stop) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s%.*s\n", program, stop.cancelled() ? "" : "error: ",
                 static_cast<int>(status.message().size()), status.message().data());
  }
  return ExitCodeFor(status, stop.cancelled());
}

}  // namespace pstrain

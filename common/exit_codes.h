#pragma once

// Process exit codes shared by every pstrain binary.

#include <cstdio>

#include "absl/status/status.h"

namespace pstrain {

inline constexpr int kExitOk = 0;
// Training or serving failed at run time: a dead peer, a refused request,
// a socket that cannot bind, a file that cannot be written.
inline constexpr int kExitFailure = 1;
// Bad configuration or input given by the user: malformed cluster spec,
// invalid flag value, missing or corrupt data files.
inline constexpr int kExitBadConfig = 2;
// Stopped by SIGINT / SIGTERM (128 + signal number is used for the detail).
inline constexpr int kExitInterrupted = 130;

// kExitOk for OK, kExitBadConfig for InvalidArgument / NotFound / DataLoss
// (what the user gave is wrong or missing), kExitFailure otherwise.
inline int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDataLoss:
      return kExitBadConfig;
    case absl::StatusCode::kCancelled:
      return kExitInterrupted;
    default:
      return kExitFailure;
  }
}

// Prints "program: error: message" on stderr (nothing for OK) and returns
// ExitCodeFor(status). For main()'s last line.
inline int ExitWith(const char* program, const absl::Status& status) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: error: %.*s\n", program, static_cast<int>(status.message().size()),
                 status.message().data());
  }
  return ExitCodeFor(status);
}

}  // namespace pstrain

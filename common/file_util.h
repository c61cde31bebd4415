#pragma once

// Small file helpers with Status errors that name the path.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// NotFound when `path` does not exist, Internal on a read error.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// At most `max_bytes` + 1 bytes of the file (more: it is longer than
// `max_bytes`), for a file that must be small (/dev/zero named for one).
absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes);

// Writes `contents` to `path` atomically and durably: a temporary file
// beside it (PATH.tmp.<pid>), written in full and fsynced, renamed over
// `path`, then the directory fsynced. A reader sees the old file or the
// whole new one, never half, even after a crash. On error `path` is
// unchanged and the temporary file removed; the message names `path` and
// the OS error. ResourceExhausted for a full disk or quota, Internal
// otherwise (a missing directory included).
absl::Status WriteFileAtomic(const std::string& path, absl::string_view contents);

// mkdir -p. OK when the directory exists already.
absl::Status MakeDirs(const std::string& path);

bool FileExists(const std::string& path);

// A path's directory and last component: "a/b/c" -> {"a/b", "c"},
// "c" -> {".", "c"}, "/c" -> {"/", "c"}.
struct PathParts {
  std::string dir;
  std::string name;
};
PathParts SplitPath(const std::string& path);

}  // namespace pstrain

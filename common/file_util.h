#pragma once

// Small file helpers with Status errors that name the path.

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace pstrain {

// NotFound when `path` does not exist, Internal on a read error.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `contents` to `path` atomically (a temporary file, then rename), so
// a reader never sees half a file.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view contents);

// mkdir -p. OK when the directory exists already.
absl::Status MakeDirs(const std::string& path);

bool FileExists(const std::string& path);

}  // namespace pstrain

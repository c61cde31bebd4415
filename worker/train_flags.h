#pragma once

// The training flags shared by `worker` and `pstrain` (launch, compare,
// scale): one flag per TrainOptions field, of the same name, whose default
// is that field's default. Linking this file defines the flags.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train_options.h"

namespace pstrain {

// Reads the parsed flags into options (validated: InvalidArgument naming
// the flag).
absl::StatusOr<TrainOptions> TrainOptionsFromFlags();

// The options that `args` ("--name=value", as TrainOptions::ToArgs writes
// them) give over the defaults, as the flags would read them; the flags
// themselves are left as they were. InvalidArgument naming the argument
// for one that is not a training flag or whose value does not parse.
// Not thread-safe with other users of the flags (a process that parses no
// command line, such as one driving the C API, has none).
absl::StatusOr<TrainOptions> TrainOptionsFromArgs(const std::vector<std::string>& args);

}  // namespace pstrain

#pragma once

// The training flags shared by `worker` and `pstrain` (launch, compare,
// scale): one flag per TrainOptions field, of the same name, whose default
// is that field's default. Linking this file defines the flags: binaries
// link it (library pstrain_train_flags), libraries and libpstrain.so do not.

#include "absl/status/statusor.h"
#include "worker/train_options.h"

namespace pstrain {

// Reads the parsed flags into options (validated: InvalidArgument naming
// the flag), through TrainOptionsFromArgs (train_options.h), which knows
// each field's text.
absl::StatusOr<TrainOptions> TrainOptionsFromFlags();

}  // namespace pstrain

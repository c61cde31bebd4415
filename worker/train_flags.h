#pragma once

// The training flags shared by `worker` and `pstrain launch`. Defining them
// once keeps the two in step: the launcher forwards every one of them to
// each worker it starts.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train_options.h"

namespace pstrain {

// Reads the parsed flags into options (validated).
absl::StatusOr<TrainOptions> TrainOptionsFromFlags();

// "--name=value" for every training flag, with its current value, for a
// launcher to pass to the workers it starts.
std::vector<std::string> TrainFlagArgs();

}  // namespace pstrain

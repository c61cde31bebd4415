#pragma once

// The update modes' names, as the --mode flag, the manifest and the run
// summary spell them: "sync", "async", "ssp" (proto/pstrain.proto's
// UpdateMode); and the examples a step may weigh its gradient by.

#include <string>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// "sync" -> SYNC, ...; InvalidArgument naming --mode otherwise.
absl::StatusOr<proto::UpdateMode> ParseUpdateMode(const std::string& name);

// SYNC -> "sync", ...; "unknown" for any other value.
std::string UpdateModeName(proto::UpdateMode mode);

// A push's examples (its weight in a sync average) are 0 to this; a ps
// refuses more.
inline constexpr int kMaxStepExamples = 1 << 24;

}  // namespace pstrain

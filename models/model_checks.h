#pragma once

// Argument checks every backend makes the same way, so that the CPU and
// CUDA models refuse the same inputs with the same messages.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/model.h"

namespace pstrain::models {

// InvalidArgument "<who>: batch of N examples outside [1, max_batch]"
// unless 0 < n <= max_batch.
absl::Status CheckBatchSize(absl::string_view who, int n, int max_batch);

// The Batch contract of Model::ForwardBackward (training) and
// Model::Evaluate: a size in [1, max_batch], images and labels, and, when
// training, example keys. InvalidArgument naming `model` otherwise.
absl::Status CheckBatch(absl::string_view model, const Batch& batch, int max_batch, bool training);

// What every backend's Create checks first: max_batch >= 1 and a network
// with classes and consistent layers. Returns the network's parameter
// tensors (NetParamSpecs).
absl::StatusOr<std::vector<ParamSpec>> CheckModelOptions(const NetSpec& net,
                                                         const ModelOptions& options);

// InvalidArgument "<who>: <what> of GOT floats, expected WANT" unless equal.
absl::Status CheckFloatCount(absl::string_view who, absl::string_view what, int64_t got,
                             int64_t want);

}  // namespace pstrain::models

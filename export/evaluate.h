#pragma once

// A model's accuracy and loss on a test set, computed on the CPU exactly as
// the chief computes its per-epoch figures (Trainer::Evaluate): the same
// backend, the same normalisation, dropout off.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dataset/mnist_dataset.h"

namespace pstrain {

struct Evaluation {
  int64_t correct = 0;
  int64_t count = 0;
  double mean_loss = 0;  // mean NLL
  double accuracy() const { return count > 0 ? static_cast<double>(correct) / count : 0.0; }
};

// Evaluates network `model` with `params` on every example of `test`.
// InvalidArgument for a parameter count that is not the model's.
absl::StatusOr<Evaluation> EvaluateParams(const std::string& model, absl::Span<const float> params,
                                          const Dataset& test, const Normalization& norm);

}  // namespace pstrain

#pragma once

// The test-set pass, one for every caller: the chief's evaluations
// (Trainer::Evaluate) and `pstrain evaluate` / `pstrain export`
// (export/evaluate.h) sum the same per-batch results in the same order, so
// a saved model scores exactly as the run that made it did.

#include <cstdint>

#include "absl/status/statusor.h"
#include "dataset/mnist_dataset.h"
#include "models/model.h"

namespace pstrain {

// The model's loss sum, correct count and example count over every example
// of `dataset`, in order, in batches of at most `batch` examples gathered
// (normalised by `norm`) into the model's InputBuffer. Dropout off (the
// model's Evaluate). InvalidArgument when `batch` is larger than the model's
// max_batch, or the dataset's images are not the size the model takes.
// REQUIRES: batch >= 1.
absl::StatusOr<models::EvalResult> EvaluateDataset(models::Model& model, const Dataset& dataset,
                                                   const Normalization& norm, int batch);

}  // namespace pstrain

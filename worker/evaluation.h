#pragma once

// The test-set pass, one for every caller: the chief's evaluations
// (Trainer::Evaluate) and `pstrain evaluate` / `pstrain export`
// (export/evaluate.h) sum the same per-batch results in the same order, so
// a saved model scores exactly as the run that made it did.

#include <cstdint>

#include "absl/status/statusor.h"
#include "models/model.h"
#include "worker/mnist_dataset.h"

namespace pstrain {

// The model's loss sum, correct count and example count over every example
// of `dataset`, in order, in batches of at most `batch` examples gathered
// (normalised by `norm`) into `images` and `labels`, which have room for
// `batch` examples. Dropout off (the model's Evaluate).
// REQUIRES: batch >= 1 and no larger than the model's max_batch.
absl::StatusOr<models::EvalResult> EvaluateDataset(models::Model& model, const Dataset& dataset,
                                                   const Normalization& norm, int batch,
                                                   float* images, int32_t* labels);

}  // namespace pstrain

#include "worker/evaluation.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {

absl::StatusOr<models::EvalResult> EvaluateDataset(models::Model& model, const Dataset& dataset,
                                                   const Normalization& norm, int batch) {
  CHECK_GE(batch, 1);
  const models::NetSpec& net = model.net();
  if (net.input.c != 1 || net.input.h != dataset.rows || net.input.w != dataset.cols) {
    return absl::InvalidArgumentError(absl::StrCat("the test set's images are ", dataset.rows, "x",
                                                   dataset.cols, "; ", net.name, " takes ",
                                                   net.input.h, "x", net.input.w));
  }
  models::EvalResult total;
  std::vector<int64_t> indices;
  for (int64_t begin = 0; begin < dataset.size; begin += batch) {
    const int n = static_cast<int>(std::min<int64_t>(batch, dataset.size - begin));
    ASSIGN_OR_RETURN(const models::BatchBuffer in, model.InputBuffer());
    if (static_cast<size_t>(batch) > in.labels.size()) {
      return absl::InvalidArgumentError(absl::StrCat("evaluation batch of ", batch,
                                                     " is larger than ", net.name,
                                                     "'s max_batch (", in.labels.size(), ")"));
    }
    indices.resize(static_cast<size_t>(n));
    std::iota(indices.begin(), indices.end(), begin);
    GatherBatch(dataset, indices, norm, in.images.data(), in.labels.data());
    const models::Batch b{n, in.images.data(), in.labels.data(), nullptr};
    ASSIGN_OR_RETURN(const models::EvalResult r, model.Evaluate(b));
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.count += r.count;
  }
  return total;
}

}  // namespace pstrain

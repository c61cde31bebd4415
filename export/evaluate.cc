#include "export/evaluate.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/model.h"

namespace pstrain {

absl::StatusOr<Evaluation> EvaluateParams(const std::string& model, absl::Span<const float> params,
                                          const Dataset& test, const Normalization& norm) {
  constexpr int kBatch = 256;
  models::ModelOptions options;
  options.name = model;
  options.device = "cpu";
  options.max_batch = kBatch;
  ASSIGN_OR_RETURN(std::unique_ptr<models::Model> m, models::CreateModel(options));
  if (static_cast<int64_t>(params.size()) != m->num_params()) {
    return absl::InvalidArgumentError(absl::StrCat(model, " has ", m->num_params(), " parameters; ",
                                                   params.size(), " were given"));
  }
  RETURN_IF_ERROR(m->SetParams(params));
  const size_t image_size = static_cast<size_t>(test.rows) * test.cols;
  std::vector<float> images(kBatch * image_size);
  std::vector<int32_t> labels(kBatch);
  std::vector<int64_t> indices;
  Evaluation total;
  double loss_sum = 0;
  for (int64_t begin = 0; begin < test.size; begin += kBatch) {
    const int n = static_cast<int>(std::min<int64_t>(kBatch, test.size - begin));
    indices.resize(static_cast<size_t>(n));
    std::iota(indices.begin(), indices.end(), begin);
    GatherBatch(test, indices, norm, images.data(), labels.data());
    models::Batch batch;
    batch.n = n;
    batch.images = images.data();
    batch.labels = labels.data();
    ASSIGN_OR_RETURN(const models::EvalResult r, m->Evaluate(batch));
    total.correct += r.correct;
    total.count += r.count;
    loss_sum += r.loss_sum;
  }
  total.mean_loss = total.count > 0 ? loss_sum / static_cast<double>(total.count) : 0.0;
  return total;
}

}  // namespace pstrain

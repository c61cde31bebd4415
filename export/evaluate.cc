#include "export/evaluate.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/model.h"
#include "worker/evaluation.h"

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
  ASSIGN_OR_RETURN(const models::EvalResult r, EvaluateDataset(*m, test, norm, kBatch));
  Evaluation total;
  total.correct = r.correct;
  total.count = r.count;
  total.mean_loss = r.count > 0 ? r.loss_sum / static_cast<double>(r.count) : 0.0;
  return total;
}

}  // namespace pstrain

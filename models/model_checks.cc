#include "models/model_checks.h"

#include "absl/strings/str_cat.h"

namespace pstrain::models {

absl::Status CheckBatchSize(absl::string_view who, int n, int max_batch) {
  if (n < 1 || n > max_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": batch of ", n, " examples outside [1, ", max_batch, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckBatch(absl::string_view model, const Batch& batch, int max_batch, bool training) {
  if (absl::Status s = CheckBatchSize(model, batch.n, max_batch); !s.ok()) return s;
  if (batch.images == nullptr || batch.labels == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(model, ": batch without images or labels"));
  }
  if (training && batch.example_keys == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(model, ": training batch without keys"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ParamSpec>> CheckModelOptions(const NetSpec& net,
                                                         const ModelOptions& options) {
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(net.name, ": max_batch must be >= 1, got ", options.max_batch));
  }
  if (net.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(net.name, ": no classes"));
  }
  return NetParamSpecs(net);
}

absl::Status CheckFloatCount(absl::string_view who, absl::string_view what, int64_t got,
                             int64_t want) {
  if (got != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", what, " of ", got, " floats, expected ", want));
  }
  return absl::OkStatus();
}

}  // namespace pstrain::models

#include "models/layer_base.h"

#include <utility>

#include "glog/logging.h"
#include "models/model_checks.h"

namespace pstrain::models {

LayerBase::LayerBase(std::string name, Shape input, Shape output, int max_batch)
    : name_(std::move(name)), input_(input), output_(output), max_batch_(max_batch) {
  CHECK_GE(max_batch, 1) << name_;
  CHECK_GT(input.size(), 0) << name_;
  CHECK_GT(output.size(), 0) << name_;
}

absl::Status LayerBase::CheckBatch(const BatchContext& ctx) const {
  return CheckBatchSize(name_, ctx.n, max_batch_);
}

}  // namespace pstrain::models

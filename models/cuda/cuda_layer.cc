#include "models/cuda/cuda_layer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "models/model_checks.h"

namespace pstrain::models::cuda {

CudaLayer::CudaLayer(CudaContext& context, std::string name, Shape input, Shape output,
                     int max_batch)
    : context_(context),
      name_(std::move(name)),
      input_(input),
      output_(output),
      max_batch_(max_batch) {
  CHECK_GE(max_batch, 1) << name_;
  CHECK_GT(input.size(), 0) << name_;
  CHECK_GT(output.size(), 0) << name_;
}

absl::Status CudaLayer::CheckBatch(const BatchContext& ctx) const {
  return CheckBatchSize(name_, ctx.n, max_batch_);
}

}  // namespace pstrain::models::cuda

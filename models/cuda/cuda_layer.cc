#include "models/cuda/cuda_layer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

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
  if (ctx.n < 1 || ctx.n > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": batch of ", ctx.n, " examples outside [1, ", max_batch_, "]"));
  }
  return absl::OkStatus();
}

}  // namespace pstrain::models::cuda

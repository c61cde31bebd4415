#include "models/cpu/cpu_layer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "models/model_checks.h"

namespace pstrain::models::cpu {

float DeterministicSum(const float* v, int64_t size) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= size; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += v[i + l];
  }
  for (int l = 0; i < size; ++i, ++l) lanes[l] += v[i];
  float total = 0.0f;
  for (float lane : lanes) total += lane;
  return total;
}

CpuLayer::CpuLayer(std::string name, Shape input, Shape output, int max_batch)
    : name_(std::move(name)), input_(input), output_(output), max_batch_(max_batch) {
  CHECK_GE(max_batch, 1) << name_;
  CHECK_GT(input.size(), 0) << name_;
  CHECK_GT(output.size(), 0) << name_;
}

absl::Status CpuLayer::CheckBatch(const BatchContext& ctx) const {
  return CheckBatchSize(name_, ctx.n, max_batch_);
}

}  // namespace pstrain::models::cpu

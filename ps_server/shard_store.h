#pragma once

// One ps shard's parameters and optimizer state: a contiguous range of the
// model's flat parameter vector, its SGD momentum buffer, and the update.
//
// SGD follows PyTorch's torch.optim.SGD exactly (dampening 0):
//   g   = grad + weight_decay * p
//   buf = g                      on the first update
//   buf = momentum * buf + g     afterwards
//   g   = g + momentum * buf     if nesterov, else g = buf
//   p  -= lr * g
//
// An update is applied only when the new parameters and momentum are
// finite in f32 arithmetic: every value finite and the squared L2 norm
// below FLT_MAX (so |p| < 1.8e19). A huge but finite gradient (3e38) would
// otherwise leave values that overflow the next forward pass; such an
// update leaves the shard as it was.
//
// Thread safety: none; the ps's single event loop owns it.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace pstrain {

struct OptimizerConfig {
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
};

// True when every value is finite and the squared L2 norm, summed in
// double, is below FLT_MAX: what the ps accepts as gradients and keeps as
// parameters.
bool IsFiniteInF32(absl::Span<const float> values);

// InvalidArgument naming the field when a value is out of range
// (momentum outside [0, 1), negative weight decay, nesterov without momentum).
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

class ShardStore {
 public:
  // REQUIRES: ValidateOptimizerConfig(config).ok().
  ShardStore(std::vector<float> initial_params, const OptimizerConfig& config);
  // The state a checkpoint recorded: parameters, momentum buffer and the
  // number of updates taken (the first one sets the buffer to g).
  // REQUIRES: as above, and momentum.size() == params.size(), updates >= 0.
  ShardStore(std::vector<float> saved_params, std::vector<float> saved_momentum, int64_t updates,
             const OptimizerConfig& config);

  int64_t size() const { return static_cast<int64_t>(params_.size()); }
  absl::Span<const float> params() const { return params_; }
  absl::Span<const float> momentum_buffer() const { return momentum_; }
  int64_t updates() const { return updates_; }

  // Applies one optimizer step with gradient `grad` scaled by `grad_scale`
  // (an average's 1/weight) and learning rate `lr`. FailedPrecondition,
  // and nothing changed, when the result would not be IsFiniteInF32.
  // REQUIRES: grad.size() == size().
  absl::Status Apply(absl::Span<const float> grad, float grad_scale, float lr);

 private:
  std::vector<float> params_;
  std::vector<float> momentum_;
  // The candidate update, swapped in when it is finite; so Apply
  // allocates nothing and a refused update leaves no trace.
  std::vector<float> next_params_;
  std::vector<float> next_momentum_;
  std::vector<float> scratch_;  // g
  OptimizerConfig config_;
  int64_t updates_ = 0;
};

}  // namespace pstrain

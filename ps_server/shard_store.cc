#include "ps_server/shard_store.h"

#include <cfloat>
#include <cmath>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

using Vec = Eigen::Map<Eigen::VectorXf>;
using ConstVec = Eigen::Map<const Eigen::VectorXf>;

}  // namespace

bool IsFiniteInF32(absl::Span<const float> values) {
  // NaN and infinities propagate into the sum, which then fails the test.
  const double sum = Eigen::Map<const Eigen::VectorXf>(values.data(),
                                                       static_cast<Eigen::Index>(values.size()))
                         .cast<double>()
                         .squaredNorm();
  return sum < static_cast<double>(FLT_MAX);
}

absl::Status ValidateOptimizerConfig(const OptimizerConfig& config) {
  if (!(config.momentum >= 0.0 && config.momentum < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("momentum must be in [0, 1), got ", config.momentum));
  }
  if (!(config.weight_decay >= 0.0) || !std::isfinite(config.weight_decay)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_decay must be >= 0, got ", config.weight_decay));
  }
  if (config.nesterov && config.momentum == 0.0) {
    return absl::InvalidArgumentError("nesterov needs momentum > 0");
  }
  return absl::OkStatus();
}

ShardStore::ShardStore(std::vector<float> initial_params, const OptimizerConfig& config)
    : params_(std::move(initial_params)),
      momentum_(params_.size(), 0.0f),
      next_params_(params_.size(), 0.0f),
      next_momentum_(params_.size(), 0.0f),
      scratch_(params_.size(), 0.0f),
      config_(config) {
  CHECK(ValidateOptimizerConfig(config).ok());
}

ShardStore::ShardStore(std::vector<float> saved_params, std::vector<float> saved_momentum,
                       int64_t updates, const OptimizerConfig& config)
    : ShardStore(std::move(saved_params), config) {
  CHECK_EQ(saved_momentum.size(), params_.size());
  CHECK_GE(updates, 0);
  momentum_ = std::move(saved_momentum);
  updates_ = updates;
}

absl::Status ShardStore::Apply(absl::Span<const float> grad, float grad_scale, float lr) {
  CHECK_EQ(static_cast<int64_t>(grad.size()), size());
  const Eigen::Index n = size();
  ConstVec p(params_.data(), n);
  ConstVec buf(momentum_.data(), n);
  Vec next_p(next_params_.data(), n);
  Vec next_buf(next_momentum_.data(), n);
  Vec g(scratch_.data(), n);
  g = ConstVec(grad.data(), n) * grad_scale;
  if (config_.weight_decay != 0.0) g += static_cast<float>(config_.weight_decay) * p;
  const float mu = static_cast<float>(config_.momentum);
  if (mu != 0.0f) {
    if (updates_ == 0) {
      next_buf = g;
    } else {
      next_buf = mu * buf + g;
    }
    if (config_.nesterov) {
      g += mu * next_buf;
    } else {
      g = next_buf;
    }
  }
  next_p = p - lr * g;
  if (!IsFiniteInF32(next_params_) || (mu != 0.0f && !IsFiniteInF32(next_momentum_))) {
    return absl::FailedPreconditionError(
        "the update would make the shard non-finite in f32; not applied");
  }
  params_.swap(next_params_);
  if (mu != 0.0f) momentum_.swap(next_momentum_);
  ++updates_;
  return absl::OkStatus();
}

}  // namespace pstrain

#include "ps_server/shard_store.h"

#include <cfloat>
#include <cmath>

#include "Eigen/Core"
#include "glog/logging.h"

namespace pstrain {
namespace {

// The update kernels: one loop over the shard each, reading the gradient
// and the current state and writing the next state, so that nothing
// full-size is allocated and every input is read once (the finiteness
// check then reads the result). `__restrict` (the arrays never
// overlap: the two states are distinct buffers, the gradient a third)
// lets the compiler vectorise them without run-time alias checks, and
// this file is built with -fno-math-errno so that sqrt vectorises too.

// SGD without momentum: PyTorch keeps no buffer, and the step is g.
void PlainSgd(int64_t n, float scale, float wd, float lr, const float* __restrict grad,
              const float* __restrict p, float* __restrict next_p) {
  for (int64_t i = 0; i < n; ++i) next_p[i] = p[i] - lr * (grad[i] * scale + wd * p[i]);
}

struct MomentumScalars {
  float scale, wd, lr, mu;
  float keep;  // the old buffer's weight: mu, or 0 on the first update (buf = g)
  bool nesterov;
};

void MomentumSgd(const MomentumScalars& c, int64_t n, const float* __restrict grad,
                 const float* __restrict p, const float* __restrict buf, float* __restrict next_p,
                 float* __restrict next_buf) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * c.scale + c.wd * p[i];
    const float b = c.keep * buf[i] + g;
    next_buf[i] = b;
    next_p[i] = p[i] - c.lr * (c.nesterov ? g + c.mu * b : b);
  }
}

struct AdamScalars {
  float scale;
  float l2;     // adam: weight_decay, into the gradient; adamw: 0
  float decay;  // adamw: 1 - lr * weight_decay, applied to p first; adam: 1
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float eps;
};

void Adam(const AdamScalars& c, int64_t n, const float* __restrict grad, const float* __restrict p,
          const float* __restrict m, const float* __restrict v, float* __restrict next_p,
          float* __restrict next_m, float* __restrict next_v) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * c.scale + c.l2 * p[i];
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * g;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * g * g;
    next_m[i] = mi;
    next_v[i] = vi;
    next_p[i] = p[i] * c.decay - c.step_size * mi / (std::sqrt(vi) / c.bc2_sqrt + c.eps);
  }
}

struct AdagradScalars {
  float scale, wd;
  float clr;  // lr / (1 + (t - 1) * lr_decay)
  float eps;
};

void Adagrad(const AdagradScalars& c, int64_t n, const float* __restrict grad,
             const float* __restrict p, const float* __restrict sum, float* __restrict next_p,
             float* __restrict next_sum) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * c.scale + c.wd * p[i];
    const float s = sum[i] + g * g;
    next_sum[i] = s;
    next_p[i] = p[i] - c.clr * g / (std::sqrt(s) + c.eps);
  }
}

}  // namespace

bool IsFiniteInF32(absl::Span<const float> values) {
  // NaN and infinities propagate into the sum, which then fails the test.
  const double sum =
      Eigen::Map<const Eigen::VectorXf>(values.data(), static_cast<Eigen::Index>(values.size()))
          .cast<double>()
          .squaredNorm();
  return sum < static_cast<double>(FLT_MAX);
}

bool IsFiniteState(absl::Span<const float> state, int64_t num_params) {
  CHECK_GT(num_params, 0);
  CHECK_EQ(state.size() % static_cast<size_t>(num_params), 0u);
  for (size_t at = 0; at < state.size(); at += static_cast<size_t>(num_params)) {
    if (!IsFiniteInF32(state.subspan(at, static_cast<size_t>(num_params)))) return false;
  }
  return true;
}

ShardStore::ShardStore(absl::Span<const float> params, const OptimizerConfig& config)
    : ShardStore(InitialState(config, params), 0, config) {}

ShardStore::ShardStore(std::vector<float> state, int64_t updates, const OptimizerConfig& config)
    : config_(config),
      num_slots_(NumSlots(config)),
      size_(static_cast<int64_t>(state.size()) / (1 + num_slots_)),
      state_(std::move(state)),
      next_state_(state_),
      updates_(updates) {
  CHECK(ValidateOptimizerConfig(config).ok());
  CHECK_GT(size_, 0);
  CHECK_EQ(state_.size(), StateFloats(config_, static_cast<uint64_t>(size_)));
  CHECK_GE(updates, 0);
}

absl::Span<const float> ShardStore::slot(int k) const {
  CHECK(k >= 0 && k < num_slots_) << k;
  return state().subspan(Index((k + 1) * size_), Index(size_));
}

absl::Status ShardStore::Apply(absl::Span<const float> grad, float grad_scale, float lr) {
  CHECK_EQ(static_cast<int64_t>(grad.size()), size_);
  switch (config_.kind) {
    case proto::SGD:
      ApplySgd(grad.data(), grad_scale, lr);
      break;
    case proto::ADAM:
    case proto::ADAMW:
      ApplyAdam(grad.data(), grad_scale, lr);
      break;
    default:  // the constructor validated the config: adagrad
      ApplyAdagrad(grad.data(), grad_scale, lr);
      break;
  }
  if (!IsFiniteState(next_state_, size_)) {
    return absl::FailedPreconditionError(
        "the update would make the shard non-finite in f32; not applied");
  }
  state_.swap(next_state_);
  ++updates_;
  return absl::OkStatus();
}

void ShardStore::ApplySgd(const float* grad, float grad_scale, float lr) {
  const float wd = static_cast<float>(config_.weight_decay);
  const float* p = state_.data();
  float* next_p = next_state_.data();
  if (config_.momentum == 0.0) {
    PlainSgd(size_, grad_scale, wd, lr, grad, p, next_p);
    return;
  }
  const float mu = static_cast<float>(config_.momentum);
  const MomentumScalars c{grad_scale, wd, lr, mu, updates_ == 0 ? 0.0f : mu, config_.nesterov};
  MomentumSgd(c, size_, grad, p, p + size_, next_p, next_p + size_);
}

void ShardStore::ApplyAdam(const float* grad, float grad_scale, float lr) {
  const double t = static_cast<double>(updates_ + 1);
  const OptimizerConfig& o = config_;
  const bool adamw = o.kind == proto::ADAMW;
  AdamScalars c;
  c.scale = grad_scale;
  c.l2 = adamw ? 0.0f : static_cast<float>(o.weight_decay);
  c.decay = adamw ? static_cast<float>(1.0 - static_cast<double>(lr) * o.weight_decay) : 1.0f;
  c.beta1 = static_cast<float>(o.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  c.step_size = static_cast<float>(static_cast<double>(lr) / (1.0 - std::pow(o.beta1, t)));
  c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, t)));
  c.eps = static_cast<float>(o.eps);
  const float* s = state_.data();
  float* next = next_state_.data();
  Adam(c, size_, grad, s, s + size_, s + 2 * size_, next, next + size_, next + 2 * size_);
}

void ShardStore::ApplyAdagrad(const float* grad, float grad_scale, float lr) {
  const double t = static_cast<double>(updates_ + 1);
  const AdagradScalars c{grad_scale, static_cast<float>(config_.weight_decay),
                         static_cast<float>(lr / (1.0 + (t - 1.0) * config_.lr_decay)),
                         static_cast<float>(config_.eps)};
  const float* s = state_.data();
  float* next = next_state_.data();
  Adagrad(c, size_, grad, s, s + size_, next, next + size_);
}

}  // namespace pstrain

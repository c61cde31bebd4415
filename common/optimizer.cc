#include "common/optimizer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

absl::Status Bad(const OptimizerConfig& c, absl::string_view field, absl::string_view rule,
                 double value) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer ", OptimizerName(c.kind), ": ", field, " ", rule, ", got ", value));
}

bool InUnitInterval(double x) { return x >= 0.0 && x < 1.0; }
bool NonNegative(double x) { return x >= 0.0 && std::isfinite(x); }
bool Positive(double x) { return x > 0.0 && std::isfinite(x); }

absl::Status ValidateSgd(const OptimizerConfig& c) {
  if (!InUnitInterval(c.momentum)) return Bad(c, "momentum", "must be in [0, 1)", c.momentum);
  if (c.nesterov && c.momentum == 0.0) return Bad(c, "nesterov", "needs momentum > 0", c.momentum);
  return absl::OkStatus();
}

absl::Status ValidateAdam(const OptimizerConfig& c) {
  if (!InUnitInterval(c.beta1)) return Bad(c, "beta1", "must be in [0, 1)", c.beta1);
  if (!InUnitInterval(c.beta2)) return Bad(c, "beta2", "must be in [0, 1)", c.beta2);
  if (!Positive(c.eps)) return Bad(c, "eps", "must be > 0", c.eps);
  return absl::OkStatus();
}

absl::Status ValidateAdagrad(const OptimizerConfig& c) {
  if (!NonNegative(c.lr_decay)) return Bad(c, "adagrad_lr_decay", "must be >= 0", c.lr_decay);
  if (!NonNegative(c.initial_accumulator)) {
    return Bad(c, "adagrad_initial_accumulator", "must be >= 0", c.initial_accumulator);
  }
  if (!Positive(c.eps)) return Bad(c, "eps", "must be > 0", c.eps);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<proto::Optimizer> ParseOptimizer(const std::string& name) {
  if (name == "sgd") return proto::SGD;
  if (name == "adam") return proto::ADAM;
  if (name == "adamw") return proto::ADAMW;
  if (name == "adagrad") return proto::ADAGRAD;
  return absl::InvalidArgumentError(
      absl::StrCat("--optimizer: \"", name, "\" (expected sgd, adam, adamw or adagrad)"));
}

std::string OptimizerName(proto::Optimizer kind) {
  switch (kind) {
    case proto::SGD:
      return "sgd";
    case proto::ADAM:
      return "adam";
    case proto::ADAMW:
      return "adamw";
    case proto::ADAGRAD:
      return "adagrad";
    default:
      return "unknown";
  }
}

absl::Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  if (!NonNegative(c.weight_decay)) return Bad(c, "weight_decay", "must be >= 0", c.weight_decay);
  switch (c.kind) {
    case proto::SGD:
      return ValidateSgd(c);
    case proto::ADAM:
    case proto::ADAMW:
      return ValidateAdam(c);
    case proto::ADAGRAD:
      return ValidateAdagrad(c);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer ", static_cast<int>(c.kind),
                       ": not one this build knows (sgd, adam, adamw, "
                       "adagrad)"));
  }
}

absl::StatusOr<OptimizerConfig> OptimizerFromJob(const proto::JobConfig& job) {
  OptimizerConfig c;
  c.kind = job.optimizer();
  c.weight_decay = job.weight_decay();
  if (c.kind == proto::SGD) {
    c.momentum = job.momentum();
    c.nesterov = job.nesterov();
  } else if (c.kind == proto::ADAM || c.kind == proto::ADAMW) {
    c.beta1 = job.beta1();
    c.beta2 = job.beta2();
    c.eps = job.eps();
  } else if (c.kind == proto::ADAGRAD) {
    c.eps = job.eps();
    c.lr_decay = job.adagrad_lr_decay();
    c.initial_accumulator = job.adagrad_initial_accumulator();
  }
  if (absl::Status s = ValidateOptimizerConfig(c); !s.ok()) return s;
  return c;
}

bool SameOptimizer(const OptimizerConfig& a, const OptimizerConfig& b) {
  if (a.kind != b.kind || a.weight_decay != b.weight_decay) return false;
  switch (a.kind) {
    case proto::SGD:
      return a.momentum == b.momentum && a.nesterov == b.nesterov;
    case proto::ADAM:
    case proto::ADAMW:
      return a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps;
    case proto::ADAGRAD:
      return a.eps == b.eps && a.lr_decay == b.lr_decay &&
             a.initial_accumulator == b.initial_accumulator;
    default:
      return false;
  }
}

std::string DescribeOptimizer(const OptimizerConfig& c) {
  const std::string decay = absl::StrCat("weight decay ", c.weight_decay);
  switch (c.kind) {
    case proto::SGD:
      return absl::StrCat("sgd (momentum ", c.momentum, c.nesterov ? ", nesterov" : "", ", ", decay,
                          ")");
    case proto::ADAM:
    case proto::ADAMW:
      return absl::StrCat(OptimizerName(c.kind), " (betas ", c.beta1, ", ", c.beta2, ", eps ",
                          c.eps, ", ", decay, ")");
    case proto::ADAGRAD:
      return absl::StrCat("adagrad (lr decay ", c.lr_decay, ", initial accumulator ",
                          c.initial_accumulator, ", eps ", c.eps, ", ", decay, ")");
    default:
      return absl::StrCat("unknown optimizer ", static_cast<int>(c.kind));
  }
}

int NumSlots(const OptimizerConfig& c) {
  switch (c.kind) {
    case proto::SGD:
    case proto::ADAGRAD:
      return 1;
    case proto::ADAM:
    case proto::ADAMW:
      return 2;
    default:
      LOG(FATAL) << "NumSlots of an unvalidated optimizer " << static_cast<int>(c.kind);
  }
  return 0;
}

absl::Status ValidateSlotsOfSquares(const OptimizerConfig& c, absl::Span<const float> state,
                                    uint64_t num_params) {
  int slot = -1;
  if (c.kind == proto::ADAM || c.kind == proto::ADAMW) slot = 2;  // exp_avg_sq
  if (c.kind == proto::ADAGRAD) slot = 1;                         // sum
  if (slot < 0) return absl::OkStatus();
  const absl::Span<const float> squares = state.subspan(slot * num_params, num_params);
  for (size_t i = 0; i < squares.size(); ++i) {
    if (squares[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the optimizer state's ", c.kind == proto::ADAGRAD ? "sum" : "exp_avg_sq",
          " of parameter ", i, " of the shard is ", squares[i], "; a sum of squares is >= 0"));
    }
  }
  return absl::OkStatus();
}

std::vector<float> InitialState(const OptimizerConfig& c, absl::Span<const float> params) {
  const float slot_value =
      c.kind == proto::ADAGRAD ? static_cast<float>(c.initial_accumulator) : 0.0f;
  std::vector<float> state(StateFloats(c, params.size()), slot_value);
  std::copy(params.begin(), params.end(), state.begin());
  return state;
}

}  // namespace pstrain

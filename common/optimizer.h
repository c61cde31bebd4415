#pragma once

// The optimizers a ps applies, their hyperparameters as a JobConfig carries
// them, and the layout of a shard's state. The update rules, PyTorch's
// torch.optim definitions (amsgrad, maximize, foreach off), are written
// out and implemented in ps_server/shard_store.h; they are here as far as
// the worker needs them (the chief builds a shard's initial state).
//
// A shard's state is one flat f32 array: its n parameters, then the
// optimizer's slots, n floats each, in this order:
//   sgd       momentum_buffer                    (zeros)
//   adam      exp_avg, exp_avg_sq                (zeros)
//   adamw     exp_avg, exp_avg_sq                (zeros)
//   adagrad   sum                                (initial_accumulator)
// with each slot's initial value in parentheses, and the step count (the
// updates taken) kept beside it. Checkpoints (format version 2),
// REPLICATE, FETCH_REPLICA and RESTORE from_payload carry exactly this
// array; its size is n x (1 + NumSlots), and with embedding tables their
// bytes follow it, zero-padded to whole floats (TablesFloats).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// An optimizer and its hyperparameters, PyTorch's names and defaults.
// Each optimizer reads only its own fields; the others keep these
// defaults in a config made by OptimizerFromJob.
struct OptimizerConfig {
  proto::Optimizer kind = proto::SGD;
  double momentum = 0.0;             // sgd
  bool nesterov = false;             // sgd
  double weight_decay = 0.0;         // all (adamw: decoupled)
  double beta1 = 0.9;                // adam, adamw
  double beta2 = 0.999;              // adam, adamw
  double eps = 1e-8;                 // adam, adamw; adagrad's default is kAdagradEps
  double lr_decay = 0.0;             // adagrad
  double initial_accumulator = 0.0;  // adagrad: initial_accumulator_value
};

inline constexpr double kAdamEps = 1e-8;      // torch.optim.Adam(W)'s eps
inline constexpr double kAdagradEps = 1e-10;  // torch.optim.Adagrad's eps

// "sgd", "adam", "adamw", "adagrad" -> the enum; InvalidArgument naming
// the flag --optimizer otherwise.
absl::StatusOr<proto::Optimizer> ParseOptimizer(const std::string& name);
// The enum -> its name ("unknown" for a value this build does not know).
std::string OptimizerName(proto::Optimizer kind);

// InvalidArgument naming the field for a value PyTorch refuses or that
// cannot be run: an unknown optimizer; momentum outside [0, 1), nesterov
// without momentum (sgd); a beta outside [0, 1) (adam, adamw); eps <= 0
// (adam, adamw, adagrad: it keeps the division finite); a negative or
// non-finite weight_decay, lr_decay or initial_accumulator.
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

// The optimizer of `job`, validated (as above): what a ps runs. A message
// from the network never reaches a CHECK through it.
absl::StatusOr<OptimizerConfig> OptimizerFromJob(const proto::JobConfig& job);

// Whether two configs run the same optimizer with the same hyperparameters
// (the fields their optimizer reads; exact comparison).
bool SameOptimizer(const OptimizerConfig& a, const OptimizerConfig& b);

// "adam (betas 0.9, 0.999, eps 1e-08, weight decay 0)", for logs, errors
// and the run summary.
std::string DescribeOptimizer(const OptimizerConfig& config);

// The number of slots (above). REQUIRES: a valid config.kind (a config
// made by OptimizerFromJob, or validated).
int NumSlots(const OptimizerConfig& config);

// Floats in the state of a shard of `num_params` parameters.
// REQUIRES: as NumSlots.
inline uint64_t StateFloats(const OptimizerConfig& config, uint64_t num_params) {
  return num_params * static_cast<uint64_t>(1 + NumSlots(config));
}

// The floats `tables_bytes` of embedding tables take after a shard's state
// in a REPLICATE, FETCH_REPLICA or RESTORE from_payload (the last one
// zero-padded).
// A message claiming more bytes of tables than kMaxTablesBytes is refused.
inline constexpr uint64_t kMaxTablesBytes = uint64_t{1} << 46;
inline uint64_t TablesFloats(uint64_t tables_bytes) {
  return (tables_bytes + sizeof(float) - 1) / sizeof(float);
}
// The bytes of such a payload: `state_floats` floats of the state, then
// `tables_bytes` of tables.
inline uint64_t StateWithTablesBytes(uint64_t state_floats, uint64_t tables_bytes) {
  return (state_floats + TablesFloats(tables_bytes)) * sizeof(float);
}

// A fresh shard's state: `params`, then every slot at its initial value.
// REQUIRES: as NumSlots.
std::vector<float> InitialState(const OptimizerConfig& config, absl::Span<const float> params);

// InvalidArgument where a slot of squares (Adam's exp_avg_sq, Adagrad's
// sum) holds a negative value in `state`, a shard of `num_params`
// parameters' (every update would be refused as non-finite: the square
// root of it). REQUIRES: as NumSlots; state.size() == StateFloats.
absl::Status ValidateSlotsOfSquares(const OptimizerConfig& config, absl::Span<const float> state,
                                    uint64_t num_params);

}  // namespace pstrain

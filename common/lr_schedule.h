#pragma once

// The learning rate of each update, computed where updates are applied (on
// the ps, from the number of updates the shard has applied before: its
// version in sync, its update count in async), so that every shard and
// every worker count agree and a resumed run continues the schedule exactly
// (the count is in every checkpoint).
//
// With warm-up W (Goyal et al. 2017, for large global batches) update t
// (0-based) uses lr * (t + 1) / W while t < W; after it the schedule runs on
// u = t - W:
//   constant  lr
//   step      lr * gamma^floor(u / step_size)              (PyTorch's StepLR)
//   cosine    min_lr + (lr - min_lr) (1 + cos(pi u / T)) / 2 with
//             T = total - W, u capped at T              (CosineAnnealingLR)
// where total is the job's number of updates (JobConfig.schedule_updates).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

class LrSchedule {
 public:
  enum class Kind { kConstant, kStep, kCosine };

  // From the job's fields; InvalidArgument naming the field for an unknown
  // schedule or a value out of range (a message from the network never
  // reaches a CHECK).
  static absl::StatusOr<LrSchedule> FromJob(const proto::JobConfig& job);

  // The learning rate of update t (t >= 0: updates applied before it).
  double At(int64_t t) const;

  // "cosine, warm-up 100 updates", for logs and the summary.
  std::string Describe() const;

 private:
  Kind kind_ = Kind::kConstant;
  double lr_ = 0;
  int64_t warmup_ = 0;
  int64_t step_size_ = 1;
  double gamma_ = 1;
  double min_lr_ = 0;
  int64_t total_ = 0;
};

// "constant", "step", "cosine" ("" is constant); InvalidArgument otherwise.
absl::StatusOr<LrSchedule::Kind> ParseLrScheduleKind(const std::string& name);

}  // namespace pstrain

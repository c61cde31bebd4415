#pragma once

// Parameter groups and per-step optimizer settings, as a PyTorch script's
// optimizer has them (torch.optim's param_groups): each tensor of the
// layout belongs to one group (JobConfig.layout[t].group), and each push of
// such a script carries every group's settings for that step and the
// tensors that had no gradient (proto StepSettings). A ps applies them per
// tensor segment: the part of a tensor inside its shard (a tensor may be
// cut between two shards; both parts follow the same settings and take the
// same steps).
//
// torch.optim's rule, which the ps follows: a parameter whose .grad is None
// at step() is not touched (no update, no momentum, no weight decay, and
// its own step count, Adam's t, does not move). So every segment keeps its
// own step count (ShardStore::segment_updates).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/optimizer.h"
#include "common/shard_plan.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// A tensor's part of a shard: shard-local floats [begin, end).
struct TensorSegment {
  int64_t begin = 0;
  int64_t end = 0;
  int tensor = 0;  // index into the job's layout (-1: a job without one)
  int group = 0;
};

// The segments of the shard [range.begin, range.end) of `job`'s layout, in
// order; they cover the shard. A job without a layout (an older chief's)
// has one segment, the whole shard, of tensor -1 and group 0.
// REQUIRES: the layout covers the range (ValidateLayout).
std::vector<TensorSegment> SegmentsOf(const proto::JobConfig& job, const ShardRange& range);

// The job's number of groups: 1 + the highest TensorLayout.group (1
// without a layout).
int NumGroups(const proto::JobConfig& job);

// The most groups a job may have.
inline constexpr int kMaxGroups = 1024;

// InvalidArgument naming the tensor for a layout whose groups are outside
// [0, kMaxGroups), or whose sizes are not positive.
absl::Status ValidateLayoutGroups(const proto::JobConfig& job);

// One step's settings, checked: every group's optimizer (the job's kind
// with the group's hyperparameters) and learning rate, and the tensors
// without a gradient.
struct StepOptions {
  std::vector<OptimizerConfig> groups;
  std::vector<double> lrs;      // [group]
  std::vector<int32_t> absent;  // ascending layout indices
  bool Absent(int tensor) const;
};

// From a push's StepSettings: InvalidArgument naming the field for a group
// count other than the job's, a value the optimizer refuses
// (ValidateOptimizerConfig), an lr that is negative or not finite, or an
// absent index outside the layout or out of order. These bytes come from
// the network: nothing here aborts.
absl::StatusOr<StepOptions> StepOptionsFrom(const proto::StepSettings& settings,
                                            const proto::JobConfig& job,
                                            const OptimizerConfig& job_optimizer);

// How `a`'s hyperparameters differ from `b`'s, the first difference in
// group order ("group 0's lr 0.025 against 0.05"), or "" where every
// group's optimizer and lr are the same (the absent tensors are not
// compared). REQUIRES: the same number of groups.
std::string SettingsDifference(const StepOptions& a, const StepOptions& b);

// The absent tensors of `settings` alone (a REDUCE's), checked as above.
absl::StatusOr<std::vector<int32_t>> AbsentTensors(const proto::StepSettings& settings,
                                                   const proto::JobConfig& job);

}  // namespace pstrain

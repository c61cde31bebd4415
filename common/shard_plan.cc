#include "common/shard_plan.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace pstrain {
namespace {

std::vector<ShardRange> BalancedRanges(int64_t total, int num_ps) {
  std::vector<ShardRange> ranges(num_ps);
  for (int k = 0; k < num_ps; ++k) {
    ranges[k].begin = total * k / num_ps;
    ranges[k].end = total * (k + 1) / num_ps;
  }
  return ranges;
}

// Walks the tensors in order and closes shard k at the tensor boundary
// nearest to its ideal end (k+1)*total/num_ps, keeping at least one tensor
// for every shard still to come.
std::vector<ShardRange> TensorAlignedRanges(const std::vector<TensorSlot>& tensors,
                                            int64_t total, int num_ps) {
  std::vector<ShardRange> ranges;
  const int n = static_cast<int>(tensors.size());
  int64_t offset = 0;
  int t = 0;
  for (int k = 0; k < num_ps; ++k) {
    ShardRange r{offset, offset};
    const double ideal_end = static_cast<double>(total) * (k + 1) / num_ps;
    const int last_allowed = n - (num_ps - k);  // leave one tensor per later shard
    do {
      r.end += tensors[t].size;
      ++t;
    } while (t <= last_allowed &&
             (k == num_ps - 1 ||
              std::fabs(static_cast<double>(r.end + tensors[t].size) - ideal_end) <
                  std::fabs(static_cast<double>(r.end) - ideal_end)));
    offset = r.end;
    ranges.push_back(r);
  }
  return ranges;
}

}  // namespace

absl::StatusOr<ShardStrategy> ParseShardStrategy(const std::string& name) {
  if (name == "balanced") return ShardStrategy::kBalanced;
  if (name == "tensor_aligned") return ShardStrategy::kTensorAligned;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown shard strategy \"", name, "\" (expected balanced or tensor_aligned)"));
}

const char* ShardStrategyName(ShardStrategy strategy) {
  return strategy == ShardStrategy::kBalanced ? "balanced" : "tensor_aligned";
}

absl::StatusOr<ShardPlan> ShardPlan::Create(const std::string& model_name,
                                            const std::vector<TensorSlot>& tensors, int num_ps,
                                            ShardStrategy strategy) {
  if (num_ps < 1) return absl::InvalidArgumentError(absl::StrCat("num_ps must be >= 1, got ", num_ps));
  if (tensors.empty()) return absl::InvalidArgumentError("a shard plan needs at least one tensor");
  ShardPlan plan;
  plan.strategy_ = strategy;
  uint64_t h = Fnv1a64(absl::StrCat(model_name, "|", ShardStrategyName(strategy), "|", num_ps));
  for (const TensorSlot& t : tensors) {
    if (t.size <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " has size ", t.size));
    }
    plan.total_size_ += t.size;
    h = Fnv1a64(absl::StrCat("|", t.name, ":", t.size), h);
  }
  if (plan.total_size_ < num_ps) {
    return absl::InvalidArgumentError(absl::StrCat("cannot split ", plan.total_size_,
                                                   " parameters across ", num_ps, " ps tasks"));
  }
  if (strategy == ShardStrategy::kTensorAligned) {
    if (static_cast<int>(tensors.size()) < num_ps) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor_aligned sharding needs at least one tensor per ps: the model has ",
                       tensors.size(), " tensors for ", num_ps, " ps tasks"));
    }
    plan.ranges_ = TensorAlignedRanges(tensors, plan.total_size_, num_ps);
  } else {
    plan.ranges_ = BalancedRanges(plan.total_size_, num_ps);
  }
  for (const ShardRange& r : plan.ranges_) h = Fnv1a64(absl::StrCat("|", r.begin, "-", r.end), h);
  plan.fingerprint_ = h;
  return plan;
}

std::string ShardPlan::Summary() const {
  std::string out;
  for (const ShardRange& r : ranges_) {
    absl::StrAppend(&out, out.empty() ? "" : " ", "[", r.begin, ", ", r.end, ")");
  }
  return out;
}

std::string ShardPlan::DebugString() const {
  std::string out;
  for (int k = 0; k < num_shards(); ++k) {
    absl::StrAppend(&out, "shard ", k, ": [", ranges_[k].begin, ", ", ranges_[k].end, ") ",
                    ranges_[k].size(), " floats\n");
  }
  return out;
}

}  // namespace pstrain

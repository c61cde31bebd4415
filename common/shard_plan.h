#pragma once

// How the flat parameter vector is split across the ps tasks.
//
// A model's parameters live in one contiguous float buffer made of named
// tensors laid end to end. A ShardPlan cuts that buffer into one contiguous
// range per ps, so a push or pull to shard k is a single byte range: no
// per-tensor messages, no packing.
//
// The plan is a pure function of (model name, tensors, number of ps,
// strategy); its fingerprint travels in every request so that a worker built
// with another model or plan is refused.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

struct TensorSlot {
  std::string name;
  int64_t size = 0;  // number of floats
  int group = 0;     // its parameter group (common/param_groups.h); not in the plan
};

enum class ShardStrategy {
  // Equal numbers of floats per ps (tensors may be split), like ps-lite's
  // key ranges. The default: the best balance.
  kBalanced,
  // Whole tensors only: the tensor sequence is cut into contiguous groups,
  // greedily closing a group when it reaches its fair share. Keeps every
  // tensor on one ps at the price of balance.
  kTensorAligned,
};

// "balanced" / "tensor_aligned".
absl::StatusOr<ShardStrategy> ParseShardStrategy(const std::string& name);
const char* ShardStrategyName(ShardStrategy strategy);

struct ShardRange {
  int64_t begin = 0;  // first float of the shard in the flat vector
  int64_t end = 0;    // one past the last
  int64_t size() const { return end - begin; }
};

class ShardPlan {
 public:
  // InvalidArgument when there are no tensors, a tensor is empty, num_ps < 1,
  // or there are fewer floats (or, tensor-aligned, tensors) than ps tasks.
  static absl::StatusOr<ShardPlan> Create(const std::string& model_name,
                                          const std::vector<TensorSlot>& tensors, int num_ps,
                                          ShardStrategy strategy);

  int num_shards() const { return static_cast<int>(ranges_.size()); }
  const ShardRange& range(int shard) const { return ranges_.at(shard); }
  const std::vector<ShardRange>& ranges() const { return ranges_; }
  int64_t total_size() const { return total_size_; }
  uint64_t fingerprint() const { return fingerprint_; }
  ShardStrategy strategy() const { return strategy_; }

  // One line per shard: "shard 0: [0, 10920) 10920 floats".
  std::string DebugString() const;
  // All shards on one line: "[0, 10920) [10920, 21840)".
  std::string Summary() const;

 private:
  std::vector<ShardRange> ranges_;
  int64_t total_size_ = 0;
  uint64_t fingerprint_ = 0;
  ShardStrategy strategy_ = ShardStrategy::kBalanced;
};

}  // namespace pstrain

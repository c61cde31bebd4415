#include "common/shard_plan.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// The seed CNN's tensors, in flat-buffer order.
std::vector<TensorSlot> MnistCnn() {
  return {{"conv1.weight", 250}, {"conv1.bias", 10},  {"conv2.weight", 5000}, {"conv2.bias", 20},
          {"fc1.weight", 16000}, {"fc1.bias", 50},    {"fc2.weight", 500},    {"fc2.bias", 10}};
}

void ExpectContiguousCover(const ShardPlan& plan) {
  int64_t next = 0;
  for (const ShardRange& r : plan.ranges()) {
    EXPECT_EQ(r.begin, next);
    EXPECT_GT(r.size(), 0);
    next = r.end;
  }
  EXPECT_EQ(next, plan.total_size());
}

class BalancedPlan : public ::testing::TestWithParam<int> {};

TEST_P(BalancedPlan, SplitsIntoEqualContiguousRanges) {
  auto plan = ShardPlan::Create("mnist_cnn", MnistCnn(), GetParam(), ShardStrategy::kBalanced);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->total_size(), 21840);
  EXPECT_EQ(plan->num_shards(), GetParam());
  ExpectContiguousCover(*plan);
  for (const ShardRange& r : plan->ranges()) {
    EXPECT_LE(std::abs(r.size() - 21840 / GetParam()), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(ShardPlan, BalancedPlan, ::testing::Values(1, 2, 3, 4, 7, 8));

TEST(ShardPlan, TensorAlignedPlanCutsOnlyAtTensorBoundaries) {
  const auto tensors = MnistCnn();
  for (int num_ps : {1, 2, 3, 4, 8}) {
    auto plan = ShardPlan::Create("mnist_cnn", tensors, num_ps, ShardStrategy::kTensorAligned);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ExpectContiguousCover(*plan);
    std::vector<int64_t> boundaries = {0};
    for (const auto& t : tensors) boundaries.push_back(boundaries.back() + t.size);
    for (const ShardRange& r : plan->ranges()) {
      EXPECT_NE(std::find(boundaries.begin(), boundaries.end(), r.begin), boundaries.end());
    }
  }
}

TEST(ShardPlan, TensorAlignedPutsTheBigTensorAlone) {
  auto plan = ShardPlan::Create("mnist_cnn", MnistCnn(), 3, ShardStrategy::kTensorAligned);
  ASSERT_TRUE(plan.ok());
  // fc1.weight (16000 of 21840 floats) cannot share a shard without making
  // it heavier still.
  bool alone = false;
  for (const ShardRange& r : plan->ranges()) alone = alone || (r.begin == 5280 && r.end == 21280);
  EXPECT_TRUE(alone) << plan->DebugString();
}

TEST(ShardPlan, FingerprintIsAPureFunctionOfItsInputs) {
  auto a = ShardPlan::Create("mnist_cnn", MnistCnn(), 2, ShardStrategy::kBalanced);
  auto b = ShardPlan::Create("mnist_cnn", MnistCnn(), 2, ShardStrategy::kBalanced);
  auto other_ps = ShardPlan::Create("mnist_cnn", MnistCnn(), 3, ShardStrategy::kBalanced);
  auto other_strategy = ShardPlan::Create("mnist_cnn", MnistCnn(), 2, ShardStrategy::kTensorAligned);
  auto other_model = ShardPlan::Create("mlp", MnistCnn(), 2, ShardStrategy::kBalanced);
  auto tensors = MnistCnn();
  tensors[0].size += 1;
  auto other_shape = ShardPlan::Create("mnist_cnn", tensors, 2, ShardStrategy::kBalanced);
  ASSERT_TRUE(a.ok() && b.ok() && other_ps.ok() && other_strategy.ok() && other_model.ok() &&
              other_shape.ok());
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_NE(a->fingerprint(), other_ps->fingerprint());
  EXPECT_NE(a->fingerprint(), other_strategy->fingerprint());
  EXPECT_NE(a->fingerprint(), other_model->fingerprint());
  EXPECT_NE(a->fingerprint(), other_shape->fingerprint());
}

TEST(ShardPlan, RefusesImpossiblePlans) {
  EXPECT_FALSE(ShardPlan::Create("m", {}, 1, ShardStrategy::kBalanced).ok());
  EXPECT_FALSE(ShardPlan::Create("m", MnistCnn(), 0, ShardStrategy::kBalanced).ok());
  EXPECT_FALSE(ShardPlan::Create("m", {{"t", 3}}, 4, ShardStrategy::kBalanced).ok());
  EXPECT_FALSE(ShardPlan::Create("m", MnistCnn(), 9, ShardStrategy::kTensorAligned).ok());
  EXPECT_FALSE(ShardPlan::Create("m", {{"t", 0}}, 1, ShardStrategy::kBalanced).ok());
  EXPECT_FALSE(ParseShardStrategy("round_robin").ok());
}

}  // namespace
}  // namespace pstrain

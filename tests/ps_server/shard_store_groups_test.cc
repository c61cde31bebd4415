// ShardStore with a step's settings (ps_server/shard_store.h, parameter
// groups): each tensor segment follows its group's optimizer settings and
// keeps its own step count, and a segment whose tensor is absent is left
// exactly as it was, slots included, as torch.optim leaves a parameter
// whose .grad is None. And the arithmetic is torch.optim's CPU kernels':
// the multiply-adds PyTorch fuses are fused.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/pstrain.pb.h"
#include "ps_server/shard_store.h"
#include "ps_server/update_policy.h"

namespace pstrain {
namespace {

// Two tensors of 3 and 5 floats in groups 0 and 1, in one shard.
std::vector<TensorSegment> TwoTensors() { return {{0, 3, 0, 0}, {3, 8, 1, 1}}; }

StepOptions Settings(const OptimizerConfig& c, double lr0, double lr1,
                     std::vector<int32_t> absent = {}) {
  StepOptions s;
  s.groups = {c, c};
  s.lrs = {lr0, lr1};
  s.absent = std::move(absent);
  return s;
}

OptimizerConfig Adam() {
  OptimizerConfig c;
  c.kind = proto::ADAM;
  return c;
}

TEST(ShardStoreGroups, AnAbsentTensorKeepsItsValuesSlotsAndStepCount) {
  const std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  ShardStore store(params, Adam(), nullptr, TwoTensors());
  const std::vector<float> grad(8, 0.5f);
  ASSERT_TRUE(store.Apply(grad, 1.0f, 0.1f, false, nullptr).ok());
  const std::vector<float> before(store.state().begin(), store.state().end());
  const StepOptions second_absent = Settings(Adam(), 0.1, 0.1, {1});
  ASSERT_TRUE(store.Apply(grad, 1.0f, 0.0f, false, &second_absent).ok());
  // The first tensor moved (and its moments); the second, values and
  // both moments, did not.
  for (int k = 0; k < 3; ++k) {
    for (int i = 3; i < 8; ++i) EXPECT_EQ(store.state()[k * 8 + i], before[k * 8 + i]) << k << i;
    EXPECT_NE(store.state()[k * 8], before[k * 8]) << k;
  }
  EXPECT_EQ(store.updates(), 2);
  EXPECT_EQ(store.segment_updates(), (std::vector<int64_t>{2, 1}));
  EXPECT_FALSE(store.uniform());
}

TEST(ShardStoreGroups, EachSegmentTakesItsOwnStepCountAndGroup) {
  // The second tensor, absent at the first step, takes Adam's first step at
  // the second (bias corrections of t = 1), with group 1's lr: the same
  // update as a store of its own at its first step.
  const std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  ShardStore store(params, Adam(), nullptr, TwoTensors());
  const std::vector<float> grad = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f};
  const StepOptions first = Settings(Adam(), 0.1, 0.05, {1});
  ASSERT_TRUE(store.Apply(grad, 1.0f, 0.0f, false, &first).ok());
  const StepOptions both = Settings(Adam(), 0.1, 0.05);
  ASSERT_TRUE(store.Apply(grad, 1.0f, 0.0f, false, &both).ok());

  ShardStore alone(std::vector<float>(params.begin() + 3, params.end()), Adam());
  ASSERT_TRUE(alone.Apply(std::vector<float>(grad.begin() + 3, grad.end()), 1.0f, 0.05f).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(store.params()[3 + i], alone.params()[i]) << i;
  // The first tensor took two steps of group 0's lr.
  ShardStore first_alone(std::vector<float>(params.begin(), params.begin() + 3), Adam());
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(first_alone.Apply(std::vector<float>(grad.begin(), grad.begin() + 3), 1.0f, 0.1f).ok());
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(store.params()[i], first_alone.params()[i]) << i;
}

TEST(ShardStoreGroups, RestoredCountsGoOnWhereTheyWere) {
  const std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  ShardStore store(params, Adam(), nullptr, TwoTensors());
  const std::vector<float> grad(8, 0.25f);
  const StepOptions absent = Settings(Adam(), 0.1, 0.1, {0});
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(store.Apply(grad, 1.0f, 0.1f, false, &absent).ok());
  ShardStore restored(std::vector<float>(store.state().begin(), store.state().end()),
                      store.updates(), Adam(), nullptr, TwoTensors(), store.segment_updates());
  const StepOptions both = Settings(Adam(), 0.1, 0.1);
  ASSERT_TRUE(store.Apply(grad, 1.0f, 0.1f, false, &both).ok());
  ASSERT_TRUE(restored.Apply(grad, 1.0f, 0.1f, false, &both).ok());
  for (int i = 0; i < 24; ++i) EXPECT_EQ(store.state()[i], restored.state()[i]) << i;
  EXPECT_EQ(restored.segment_updates(), (std::vector<int64_t>{1, 4}));
}

TEST(ShardStoreGroups, SgdFusesTheMultiplyAddsPyTorchFuses) {
  // torch.optim.SGD(momentum, nesterov, weight_decay) on the CPU:
  // d = fma(p, wd, g); buf = mu * buf + d; p = fma(fma(buf, mu, d), -lr, p).
  OptimizerConfig c;
  c.momentum = 0.9;
  c.nesterov = true;
  c.weight_decay = 1e-3;
  std::vector<float> p(4096), g(4096);
  for (int i = 0; i < 4096; ++i) {
    p[i] = std::sin(0.37f * i);
    g[i] = 0.01f * std::cos(0.11f * i);
  }
  ShardStore store(p, c);
  std::vector<float> buf(4096, 0.0f), expect = p;
  const float lr = 0.05f, mu = 0.9f, wd = 1e-3f;
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(store.Apply(g, 1.0f, lr).ok());
    for (int i = 0; i < 4096; ++i) {
      const float d = std::fma(expect[i], wd, g[i]);
      buf[i] = step == 0 ? d : mu * buf[i] + d;
      expect[i] = std::fma(std::fma(buf[i], mu, d), -lr, expect[i]);
    }
  }
  int differ = 0;
  for (int i = 0; i < 4096; ++i) differ += store.params()[i] != expect[i];
  EXPECT_EQ(differ, 0);
}

TEST(ShardStoreGroups, WithoutSettingsEverySegmentTakesTheJobsOptimizer) {
  const std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  ShardStore segmented(params, Adam(), nullptr, TwoTensors());
  ShardStore whole(params, Adam());
  const std::vector<float> grad(8, 0.5f);
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(segmented.Apply(grad, 1.0f, 0.1f).ok());
    ASSERT_TRUE(whole.Apply(grad, 1.0f, 0.1f).ok());
  }
  for (int i = 0; i < 24; ++i) EXPECT_EQ(segmented.state()[i], whole.state()[i]) << i;
  EXPECT_TRUE(segmented.uniform());
}

// A job whose optimizer is SGD without momentum and a group with momentum
// (torch's SGD([{'params': a, 'momentum': 0.9}, {'params': b}])): its
// pushes with settings move group 0's buffer; a push without settings
// (the job's optimizer, which writes only the parameters) must leave that
// buffer as the last step left it, and so must a refused step, whether
// the update writes into the state's other buffer or into one that
// replies let go. The reference takes every step with settings, plain
// SGD for both groups in place of the step without; no refused step.
TEST(ShardStoreGroups, AStepWithoutSettingsKeepsWhatGroupsWithMomentumWrote) {
  const std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  OptimizerConfig plain;  // SGD, momentum 0
  OptimizerConfig momentum = plain;
  momentum.momentum = 0.9;
  StepOptions groups = Settings(plain, 0.1, 0.05);
  groups.groups[0] = momentum;
  const StepOptions both_plain = Settings(plain, 0.1, 0.1);
  const std::vector<float> grad = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f};
  const std::vector<float> huge(8, 3e38f);
  for (size_t in_flight = 0; in_flight <= 3; ++in_flight) {
    ShardStore store(params, plain, nullptr, TwoTensors());
    ShardStore reference(params, plain, nullptr, TwoTensors());
    std::vector<std::shared_ptr<PinnedFloats>> held;
    std::vector<zmq::message_t> frames;
    // Replies of the last `in_flight` versions still going out.
    const auto hold = [&] {
      if (in_flight == 0) return;
      held.push_back(store.pinned_state());
      frames.push_back(PinnedFloats::Frame(held.back(), 0, held.back()->data().size()));
      if (held.size() > in_flight) {
        held.erase(held.begin());
        frames.erase(frames.begin());
      }
    };
    // s: a step with settings; p: one without; r: a refused step with
    // settings (its values overflow, group 0's buffer among them).
    const std::string steps = "ssprppsspprspsrpprrpsppsspsrrppss";
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i] == 'r') {
        ASSERT_FALSE(store.Apply(huge, 1.0f, 0.0f, false, &groups).ok());
        continue;
      }
      if (steps[i] == 's') {
        ASSERT_TRUE(store.Apply(grad, 1.0f, 0.0f, false, &groups).ok());
        ASSERT_TRUE(reference.Apply(grad, 1.0f, 0.0f, false, &groups).ok());
      } else {
        ASSERT_TRUE(store.Apply(grad, 1.0f, 0.1f).ok());
        ASSERT_TRUE(reference.Apply(grad, 1.0f, 0.1f, false, &both_plain).ok());
      }
      hold();
      for (size_t f = 0; f < 16; ++f) {
        ASSERT_EQ(store.state()[f], reference.state()[f])
            << "step " << i << ", float " << f << ", " << in_flight << " in flight";
      }
    }
  }
}

// A sync version applies one set of settings, the lowest rank's that
// pushed, whichever arrives first; a push whose settings differ (a
// worker's scheduler stepped on its own loss) is counted, and the ps
// says so once (its log).
TEST(SyncPolicySettings, AVersionAppliesTheLowestRanksAndCountsTheOthers) {
  const std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> g0 = {0.5f, -1, 2, 0.25f, 1, -0.5f, 3, 1};
  const std::vector<float> g1 = {1.5f, 1, -2, 0.75f, 3, 0.5f, -1, 2};
  std::vector<float> average(8);
  for (size_t i = 0; i < 8; ++i) average[i] = (g0[i] + g1[i]) * 0.5f;
  OptimizerConfig sgd;
  sgd.momentum = 0.5;
  proto::JobConfig job;
  job.set_mode(proto::SYNC);
  job.set_num_workers(2);
  job.set_learning_rate(0.1);
  auto policy =
      CreateUpdatePolicy(job, std::make_unique<ShardStore>(params, sgd, nullptr, TwoTensors()));
  ASSERT_TRUE(policy.ok()) << policy.status();
  ShardStore reference(params, sgd, nullptr, TwoTensors());
  const StepOptions chief = Settings(sgd, 0.1, 0.05);
  // Rank 1's lr of group 0 differs at versions 0 and 2 (first to arrive
  // at 0, last at 2), not at 1.
  const StepOptions other[] = {Settings(sgd, 0.4, 0.05), chief, Settings(sgd, 0.2, 0.05)};
  const int64_t counted[] = {1, 1, 2};
  for (int version = 0; version < 3; ++version) {
    const StepOptions& mine = other[version];
    if (version == 0) {
      ASSERT_TRUE((*policy)->Push(1, version, version, g1, 16, &mine).ok());
      ASSERT_TRUE((*policy)->Push(0, version, version, g0, 16, &chief).ok());
    } else {
      ASSERT_TRUE((*policy)->Push(0, version, version, g0, 16, &chief).ok());
      ASSERT_TRUE((*policy)->Push(1, version, version, g1, 16, &mine).ok());
    }
    ASSERT_TRUE(reference.Apply(average, 1.0f, 0.0f, false, &chief).ok());
    EXPECT_EQ((*policy)->settings_differences(), counted[version]) << "version " << version;
    for (size_t f = 0; f < reference.state().size(); ++f) {
      ASSERT_EQ((*policy)->store().state()[f], reference.state()[f])
          << "version " << version << ", float " << f;
    }
  }
  EXPECT_EQ(SettingsDifference(other[0], chief), "group 0's lr 0.4 against 0.1");
  EXPECT_EQ(SettingsDifference(chief, chief), "");
}

}  // namespace
}  // namespace pstrain

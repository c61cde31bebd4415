// StepInFlight against real ps servers in this process: a step's shards go
// out as their tensors become final (overlap) or all at the end, the
// replies hold exactly what SGD makes of them, and the step's identity
// (number, versions computed on, examples) is what a resend uses.

#include "worker/step_in_flight.h"

#include <memory>
#include <vector>

#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "common/shard_plan.h"
#include "gtest/gtest.h"
#include "tests/test_util/live_shards.h"
#include "worker/ps_client.h"

namespace pstrain {
namespace {

constexpr float kLr = 0.5f;

class StepInFlightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(job_.shards != nullptr && job_.shards->ok());
    // 15 floats over 2 shards of 8 and 7: a, [0, 5), and c, [11, 15), in
    // one shard each; b, [5, 11), across both.
    auto plan = ShardPlan::Create("t", tensors_, 2, ShardStrategy::kBalanced);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = std::make_unique<ShardPlan>(*std::move(plan));
    PsClientOptions options;
    options.security = security_;
    auto client = PsClient::Create(spec_, {TaskType::kWorker, 0}, *plan_, options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    ASSERT_TRUE(client_->WaitForServers().ok());
    proto::JobConfig job;
    job.set_mode(proto::SYNC);
    job.set_num_workers(1);
    job.set_learning_rate(kLr);
    for (int i = 0; i < 15; ++i) params_[i] = static_cast<float>(i);
    ASSERT_TRUE(client_->Init(job, params_).ok());
    for (int i = 0; i < 15; ++i) grads_[i] = static_cast<float>(i % 4) - 1.5f;
    step_ = std::make_unique<StepInFlight>(WireEncoding(), *plan_, tensors_, grads_);
  }

  void TearDown() override {
    if (client_ != nullptr) {
      EXPECT_TRUE(client_->Shutdown().ok());
    }
  }

  // What SGD at kLr makes of the parameters after `steps` steps of grads_.
  std::vector<float> Expected(int steps) const {
    std::vector<float> out(params_.begin(), params_.end());
    for (int s = 0; s < steps; ++s) {
      for (int i = 0; i < 15; ++i) out[i] -= kLr * grads_[i];
    }
    return out;
  }

  const std::vector<TensorSlot> tensors_ = {{"a", 5}, {"b", 6}, {"c", 4}};
  LiveJob job_ = StartLiveJob(2, 1);
  const ClusterSpec& spec_ = job_.spec;
  const TransportSecurity& security_ = job_.security;
  std::unique_ptr<ShardPlan> plan_;
  std::unique_ptr<PsClient> client_;
  std::vector<float> params_ = std::vector<float>(15);
  std::vector<float> grads_ = std::vector<float>(15);
  std::unique_ptr<StepInFlight> step_;
};

TEST_F(StepInFlightTest, EachShardGoesOutWhenItsLastTensorIsFinal) {
  std::vector<float> got(15, -1.0f);
  const std::vector<int64_t> on = {0, 0};
  step_->Reset(0, on);
  EXPECT_EQ(step_->step(), 0);
  EXPECT_EQ(step_->computed_on(), on);
  step_->Start(client_.get(), /*num_examples=*/4, absl::MakeSpan(got));
  ASSERT_TRUE(step_->started());
  step_->TensorReady(2);  // c: shard 1 still waits for b
  EXPECT_EQ(step_->early_pushes(), 0);
  step_->TensorReady(1);  // b: shard 1 is whole, while a is not
  EXPECT_EQ(step_->early_pushes(), 1);
  step_->TensorReady(0);  // a: shard 0, the last
  EXPECT_EQ(step_->early_pushes(), 1);
  int64_t between_us = -1;
  std::vector<ShardReply> replies;
  ASSERT_TRUE(step_->Finish(client_.get(), 4, absl::MakeSpan(got), {}, &between_us, &replies).ok());
  EXPECT_EQ(between_us, 0);
  EXPECT_EQ(step_->num_examples(), 4);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].version, 1);
  EXPECT_EQ(replies[1].version, 1);
  EXPECT_EQ(got, Expected(1));
}

TEST_F(StepInFlightTest, WithoutStartFinishSendsEverythingAndRunsTheForwardAhead) {
  std::vector<float> got(15, -1.0f);
  std::vector<ShardReply> replies;
  for (int s = 0; s < 2; ++s) {
    const std::vector<int64_t> on = {s, s};
    step_->Reset(s, on);
    EXPECT_FALSE(step_->started());
    bool ran = false;
    const BetweenFn ahead = [&](const WaitParamsFn& wait, int64_t* us) {
      ran = true;
      *us = 7;
      return wait(15);  // every parameter in before the replies are taken
    };
    int64_t between_us = 0;
    ASSERT_TRUE(step_->Finish(client_.get(), 4, absl::MakeSpan(got), ahead, &between_us, &replies)
                    .ok());
    EXPECT_TRUE(ran);
    EXPECT_EQ(between_us, 7);
    EXPECT_EQ(replies[0].version, s + 1);
  }
  EXPECT_EQ(step_->early_pushes(), 0);
  EXPECT_EQ(got, Expected(2));
}

TEST_F(StepInFlightTest, AResendPullsTheVersionAfterTheStepItRemembers) {
  std::vector<float> got(15, -1.0f);
  std::vector<ShardReply> replies;
  int64_t between_us = 0;
  step_->Reset(0, std::vector<int64_t>{0, 0});
  ASSERT_TRUE(step_->Finish(client_.get(), 4, absl::MakeSpan(got), {}, &between_us, &replies).ok());
  // Every shard has the step: nothing is pushed again, and version 1 (the
  // step's computed_on + 1) is what comes back, on a fresh buffer.
  std::vector<float> again(15, -1.0f);
  ASSERT_TRUE(step_->Resend(client_.get(), {false, false}, absl::MakeSpan(again), &replies).ok());
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].version, 1);
  EXPECT_EQ(replies[1].version, 1);
  EXPECT_EQ(again, Expected(1));
}

}  // namespace
}  // namespace pstrain

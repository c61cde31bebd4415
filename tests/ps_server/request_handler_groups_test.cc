// What the ps does for PyTorch scripts (RequestHandler): pushes carrying
// their step's settings (parameter groups, absent tensors), REDUCE's
// averaged gradient, the optimizer's state read (OPTIMIZER_STATE) and
// given at INIT, and a worker that finishes early leaving the job. Bad
// settings from the network are refused, never applied.

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "request_handler_fixture.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

class GroupsTest : public RequestHandlerTest {
 protected:
  // A layout of two tensors of 2 floats in groups 0 and 1 (the shard's 4).
  std::vector<Reply> InitGroups(proto::UpdateMode mode, int workers, bool with_slots = false,
                                std::vector<int64_t> counts = {}, size_t payload = kSize) {
    spec_workers_ = workers;
    proto::Header h = Base(proto::INIT, 0);
    proto::JobConfig* job = h.mutable_job();
    job->set_mode(mode);
    job->set_num_workers(workers);
    job->set_learning_rate(0.5);
    for (int t = 0; t < 2; ++t) {
      proto::TensorLayout* l = job->add_layout();
      l->set_name(t == 0 ? "w" : "b");
      l->set_size(2);
      l->set_group(t);
    }
    h.set_with_slots(with_slots);
    *h.mutable_segment_updates() = {counts.begin(), counts.end()};
    std::vector<float> values(payload, 1.0f);
    for (size_t i = kSize; i < values.size(); ++i) values[i] = 0.25f;  // the momentum buffer
    return Send(0, MakeMessage(h, values));
  }

  proto::StepSettings Settings(double lr0, double lr1, std::vector<int32_t> absent = {}) {
    proto::StepSettings s;
    s.add_groups()->set_lr(lr0);
    s.add_groups()->set_lr(lr1);
    *s.mutable_absent() = {absent.begin(), absent.end()};
    return s;
  }

  std::vector<Reply> PushWith(int rank, int64_t version, float value,
                              const proto::StepSettings& settings) {
    proto::Header h = Base(proto::PUSH_PULL, rank);
    h.set_step(version);
    h.set_version(version);
    h.set_num_examples(1);
    *h.mutable_step_settings() = settings;
    return Send(rank, MakeMessage(h, std::vector<float>(kSize, value)));
  }

  std::vector<Reply> Reduce(int rank, int64_t version, std::vector<float> grad,
                            std::vector<int32_t> absent = {}, uint32_t round = 0) {
    proto::Header h = Base(proto::REDUCE, rank);
    h.set_step(version);
    h.set_version(version);
    h.set_num_examples(1);
    h.set_reduce_round(round);
    *h.mutable_step_settings()->mutable_absent() = {absent.begin(), absent.end()};
    return Send(rank, MakeMessage(h, grad));
  }

  std::vector<float> Params() { return {H().params().begin(), H().params().end()}; }
};

TEST_F(GroupsTest, EachGroupTakesItsLrAndAnAbsentTensorIsLeftAlone) {
  InitGroups(proto::ASYNC, 1);
  // Group 0 at lr 0.1, group 1 at 0.2: p = 1 - lr x 1.
  PushWith(0, 0, 1.0f, Settings(0.1, 0.2));
  EXPECT_THAT(Params(), testing::ElementsAre(0.9f, 0.9f, 0.8f, 0.8f));
  // The second tensor has no gradient: it stays.
  PushWith(0, 1, 1.0f, Settings(0.1, 0.2, {1}));
  EXPECT_THAT(Params(), testing::Each(testing::FloatEq(0.8f)));
}

TEST_F(GroupsTest, SyncLeavesAloneOnlyWhatEveryWorkerLacks) {
  InitGroups(proto::SYNC, 2);
  RegisterAll(2);
  // Rank 0 lacks tensor 1 (and pushes zeros for it), rank 1 lacks tensor
  // 0: both are updated, with the average (zeros counted), as DDP's.
  PushWith(0, 0, 1.0f, Settings(0.5, 0.5, {1}));
  PushWith(1, 0, 1.0f, Settings(0.5, 0.5, {0}));
  EXPECT_THAT(Params(), testing::ElementsAre(0.5f, 0.5f, 0.5f, 0.5f));
  // Both lack tensor 1: it stays.
  PushWith(0, 1, 1.0f, Settings(0.5, 0.5, {1}));
  PushWith(1, 1, 1.0f, Settings(0.5, 0.5, {1}));
  EXPECT_THAT(Params(), testing::ElementsAre(0.0f, 0.0f, 0.5f, 0.5f));
}

TEST_F(GroupsTest, TheJobsScheduleScalesEachGroupsLr) {
  // --lr_schedule=step, halving every update, over a job lr of 0.5: a
  // push's lr 0.1 is 0.1 at version 0, 0.05 at version 1.
  optimizer_.set_lr_schedule("step");
  optimizer_.set_lr_step_size(1);
  optimizer_.set_lr_gamma(0.5);
  Init(proto::ASYNC, 1);
  proto::StepSettings one;
  one.add_groups()->set_lr(0.1);
  PushWith(0, 0, 1.0f, one);
  EXPECT_THAT(Params(), testing::Each(testing::FloatEq(0.9f)));
  PushWith(0, 1, 1.0f, one);
  EXPECT_THAT(Params(), testing::Each(testing::FloatEq(0.85f)));
}

TEST_F(GroupsTest, SettingsTheJobCannotTakeAreRefusedAndNothingChanges) {
  InitGroups(proto::ASYNC, 1);
  proto::StepSettings one_group;
  one_group.add_groups()->set_lr(0.1);
  proto::StepSettings bad_momentum = Settings(0.1, 0.1);
  bad_momentum.mutable_groups(0)->set_momentum(2.0);
  for (const proto::StepSettings& s :
       {one_group, bad_momentum, Settings(0.1, 0.1, {1, 0}), Settings(0.1, 0.1, {7}),
        Settings(-0.1, 0.1)}) {
    std::vector<Reply> out = PushWith(0, 0, 1.0f, s);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(IsError(out[0]));
  }
  EXPECT_THAT(Params(), testing::ElementsAre(1.0f, 1.0f, 1.0f, 1.0f));
  EXPECT_EQ(H().version(), 0);
}

TEST_F(GroupsTest, ReduceAnswersTheAverageOnceEveryWorkerSentAndAppliesNothing) {
  InitGroups(proto::SYNC, 2);
  RegisterAll(2);
  EXPECT_TRUE(Reduce(0, 0, {1, 2, 3, 4}, {1}).empty());
  std::vector<Reply> out = Reduce(1, 0, {3, 2, 1, 0}, {1});
  ASSERT_EQ(out.size(), 2u);
  for (const Reply& r : out) {
    ASSERT_FALSE(IsError(r)) << r.header.error().message();
    ASSERT_NE(r.payload, nullptr);
    EXPECT_THAT(*r.payload, testing::ElementsAre(2.0f, 2.0f, 2.0f, 2.0f));
    EXPECT_THAT(r.header.step_settings().absent(), testing::ElementsAre(1));
  }
  EXPECT_THAT(Params(), testing::ElementsAre(1.0f, 1.0f, 1.0f, 1.0f));
  EXPECT_EQ(H().version(), 0);
  // A reduce of a version the job passed is answered as dropped, at once.
  Push(0, 0, 0, 1.0f);
  Push(1, 0, 0, 1.0f);
  out = Reduce(0, 0, {1, 1, 1, 1});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].header.dropped());
  EXPECT_EQ(out[0].payload, nullptr);
}

TEST_F(GroupsTest, ReduceIsRefusedOutsideSyncAndForAMalformedPayload) {
  InitGroups(proto::ASYNC, 2);
  RegisterAll(2);
  std::vector<Reply> out = Reduce(0, 0, {1, 1, 1, 1});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("sync jobs"));
  handler_.reset();
  InitGroups(proto::SYNC, 2);
  RegisterAll(2);
  out = Reduce(0, 0, {1, 1, 1});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("f32"));
  out = Reduce(0, 5, {1, 1, 1, 1});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("future"));
  out = Reduce(0, 0, {1, 1, 1, 1}, {3});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("absent tensor 3"));
}

TEST_F(GroupsTest, AWorkerThatDiesInAReduceIsNotWaitedFor) {
  InitGroups(proto::SYNC, 2);
  RegisterAll(2);
  EXPECT_TRUE(Reduce(0, 0, {2, 2, 2, 2}).empty());
  clock_.AdvanceMicros(10'000'000);
  Send(0, MakeMessage(Base(proto::HEARTBEAT, 0), {}));
  std::vector<Reply> out;
  EXPECT_EQ(H().DeclareSilentDead(5.0, &out), std::vector<int>{1});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_NE(out[0].payload, nullptr);
  EXPECT_THAT(*out[0].payload, testing::ElementsAre(2.0f, 2.0f, 2.0f, 2.0f));
}

TEST_F(GroupsTest, AWorkerThatFinishedEarlyLeavesTheSyncVersions) {
  InitGroups(proto::SYNC, 2, false, {}, kSize);
  RegisterAll(2);
  // Rank 1's loop is over: its final report.
  proto::Header done = Base(proto::BARRIER, 1);
  done.set_barrier_name("done");
  done.mutable_report()->set_rank(1);
  EXPECT_TRUE(Send(1, MakeMessage(done, {})).empty());
  // Rank 0 goes on alone: its push completes the version.
  std::vector<Reply> out = Push(0, 0, 0, 1.0f);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.version(), 1);
  EXPECT_EQ(H().version(), 1);
}

TEST_F(GroupsTest, InSspARankPastItsFinalReportPullsWithoutTheBound) {
  Init(proto::SSP, 3, /*staleness=*/1);
  RegisterAll(3);
  // Ranks 0 and 1 took 10 steps, rank 2 none (it is away): their pulls
  // for step 10 wait for it.
  for (int64_t step = 0; step < 10; ++step) {
    Push(0, step, H().version(), 0.01f, 1, /*then_pull=*/false);
    Push(1, step, H().version(), 0.01f, 1, /*then_pull=*/false);
  }
  EXPECT_TRUE(Pull(0, 10, 0).empty());
  EXPECT_TRUE(Pull(1, 10, 0).empty());
  // Rank 0's loop is over (its final report): its pull of the final
  // parameters is answered; rank 1, still training, still waits.
  proto::Header done = Base(proto::BARRIER, 0);
  done.set_barrier_name("done");
  done.mutable_report()->set_rank(0);
  std::vector<Reply> out = Send(0, MakeMessage(done, {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, Peer(0));
  EXPECT_TRUE(out[0].with_params);
  out = Pull(0, 10, 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].with_params);
  EXPECT_TRUE(Pull(1, 10, 0).empty());
}

TEST_F(GroupsTest, InitTakesTheScriptsOptimizerStateAndStateReadsItBack) {
  momentum_ = 0.9;
  optimizer_.set_momentum(0.9);
  std::vector<Reply> out = InitGroups(proto::SYNC, 1, true, {3, 0}, 2 * kSize);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  out = Send(0, MakeMessage(Base(proto::OPTIMIZER_STATE, 0), {}));
  ASSERT_EQ(out.size(), 1u);
  ASSERT_NE(out[0].payload, nullptr);
  EXPECT_THAT(*out[0].payload, testing::ElementsAre(0.25f, 0.25f, 0.25f, 0.25f));
  EXPECT_THAT(out[0].header.segment_updates(), testing::ElementsAre(3, 0));
}

TEST_F(GroupsTest, InitRefusesAStateThatDoesNotFitTheShard) {
  for (int variant = 0; variant < 3; ++variant) {
    handler_.reset();
    std::vector<Reply> out =
        variant == 0   ? InitGroups(proto::SYNC, 1, true, {1, 1}, kSize + 1)   // size
        : variant == 1 ? InitGroups(proto::SYNC, 1, true, {1}, 2 * kSize)      // counts
                       : InitGroups(proto::SYNC, 1, true, {-1, 2}, 2 * kSize); // negative
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(IsError(out[0])) << variant;
    EXPECT_FALSE(H().initialized());
  }
}

}  // namespace
}  // namespace pstrain

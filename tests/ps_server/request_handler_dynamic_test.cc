// Dynamic workers (a sparse TF_CONFIG) through the ps's request handler,
// without sockets: the job learnt from the chief's INIT, ranks not heard
// from never waited for, and the shard's updates those of the job.

#include "ps_server/request_handler.h"

#include "tests/ps_server/request_handler_fixture.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>

#include "common/file_util.h"
#include "common/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// Dynamic workers (a sparse TF_CONFIG): the ps learns the job from the
// chief's INIT, waits for no rank it has not heard from, and counts the
// ones that join.
class DynamicWorkersTest : public RequestHandlerTest {
 protected:
  void SetUp() override {
    dynamic_ = true;
    spec_workers_ = 8;  // the rank slots
    num_shards_ = 2;    // what the chief's requests say
  }

  std::vector<Reply> Barrier(int rank) {
    proto::Header b = Base(proto::BARRIER, rank);
    b.set_barrier_name("done");
    b.mutable_report()->set_images(1);
    return Send(rank, MakeMessage(b, {}));
  }
};

TEST_F(DynamicWorkersTest, TheJobIdAndShardCountComeFromTheChiefsInit) {
  std::vector<Reply> out = Init(proto::ASYNC, 8);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  EXPECT_EQ(out[0].header.job_id(), kJob);
  EXPECT_EQ(out[0].header.num_shards(), 2);
  // From then on, another job is refused as with a full spec.
  proto::Header h = Base(proto::PULL, 0);
  h.set_job_id(kJob + 1);
  out = Send(0, MakeMessage(h, {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("another cluster spec"));
}

TEST_F(DynamicWorkersTest, SyncIsRefusedSayingWhy) {
  std::vector<Reply> out = Init(proto::SYNC, 8);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(IsError(out[0]));
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("--mode=async"));
  EXPECT_FALSE(H().initialized());
}

TEST_F(DynamicWorkersTest, AFullSpecChiefIsRefused) {
  std::vector<Reply> out;
  proto::Header h = Base(proto::INIT, 0);
  h.mutable_job()->set_mode(proto::ASYNC);
  h.mutable_job()->set_num_workers(8);
  h.mutable_job()->set_learning_rate(0.5);
  out = Send(0, MakeMessage(h, {1.0f, 1.0f, 1.0f, 1.0f}));  // dynamic_workers unset
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("same kind of TF_CONFIG"));
}

TEST_F(DynamicWorkersTest, RanksNotHeardFromAreNotWaitedForAndJoinLater) {
  EXPECT_TRUE(Send(3, MakeMessage(Base(proto::REGISTER, 3), {})).empty());  // before INIT: parked
  ASSERT_EQ(Init(proto::ASYNC, 8).size(), 2u);
  EXPECT_FALSE(H().workers().dead(0));
  EXPECT_FALSE(H().workers().dead(3));
  for (int rank : {1, 2, 4, 5, 6, 7}) EXPECT_TRUE(H().workers().dead(rank)) << rank;
  EXPECT_EQ(H().Stats().workers_declared_dead(), 0);  // absent, not dead
  // The final barrier waits for the two present ranks only.
  EXPECT_TRUE(Barrier(0).empty());
  EXPECT_EQ(Barrier(3).size(), 2u);
  // Rank 5 joins: waited for from now on, and counted as a join.
  ASSERT_EQ(Send(5, MakeMessage(Base(proto::REGISTER, 5), {})).size(), 1u);
  EXPECT_FALSE(H().workers().dead(5));
  EXPECT_EQ(H().Stats().workers_joined(), 1);
  EXPECT_EQ(H().Stats().workers_rejoined(), 0);
  Push(5, 0, 0, 1.0f);
  EXPECT_EQ(H().Stats().pushes_by_rank(5), 1);
  // It leaves: silent past the peer timeout, it is declared dead...
  clock_.AdvanceSeconds(10);
  Send(0, MakeMessage(Base(proto::HEARTBEAT, 0), {}));
  Send(3, MakeMessage(Base(proto::HEARTBEAT, 3), {}));
  std::vector<Reply> out;
  EXPECT_EQ(H().DeclareSilentDead(5.0, &out), std::vector<int>{5});
  // ...and comes back as a rejoin.
  Send(5, MakeMessage(Base(proto::HEARTBEAT, 5), {}));
  EXPECT_EQ(H().Stats().workers_rejoined(), 1);
}

// The job is its number of updates (--max_steps), whoever pushes them:
// two workers pushing at once near the end would make one more each, so
// the pushes that cross the last update are dropped as late, in async and
// in ssp alike.
TEST_F(DynamicWorkersTest, TheShardAppliesExactlyTheJobsUpdates) {
  for (proto::UpdateMode mode : {proto::ASYNC, proto::SSP}) {
    handler_.reset();
    ASSERT_EQ(Init(mode, 8, /*staleness=*/100, 0, false, /*total_steps=*/5).size(), 1u);
    ASSERT_EQ(Send(3, MakeMessage(Base(proto::REGISTER, 3), {})).size(), 1u);
    for (int step = 0; step < 4; ++step) {
      // Both computed on the version before either push.
      const int64_t version = H().version();
      ASSERT_EQ(Push(0, step, version, 0.5f).size(), 1u) << step;
      ASSERT_EQ(Push(3, step, version, 0.5f).size(), 1u) << step;
    }
    const proto::ShardStats stats = H().Stats();
    EXPECT_EQ(stats.updates_applied(), 5) << proto::UpdateMode_Name(mode);
    EXPECT_EQ(stats.version(), 5);
    EXPECT_EQ(stats.late_gradients_dropped(), 3);
    EXPECT_EQ(stats.gradients_received(), 8);
  }
}

TEST_F(DynamicWorkersTest, AnSspWorkerJoinsAtTheSlowestLiveClock) {
  ASSERT_EQ(Init(proto::SSP, 8, /*staleness=*/1).size(), 1u);
  // The chief alone does 10 steps: nobody else holds it back.
  for (int step = 0; step < 10; ++step) {
    std::vector<Reply> out = Push(0, step, step, 0.0f);
      ASSERT_EQ(out.size(), 1u) << "step " << step;
  }
  // Rank 2 joins: it starts at the chief's clock, not at 0, so the chief
  // is not stopped for ten steps of the newcomer's.
  std::vector<Reply> reg = Send(2, MakeMessage(Base(proto::REGISTER, 2), {}));
  ASSERT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg[0].header.step(), 10);
  EXPECT_EQ(Push(0, 10, 10, 0.0f).size(), 1u);  // within the bound of 1
  EXPECT_TRUE(Push(0, 11, 11, 0.0f).empty());    // 12 > 10 + 1: waits for rank 2
  EXPECT_EQ(Push(2, 10, 11, 0.0f).size(), 2u);   // rank 2's step releases it
}

}  // namespace
}  // namespace pstrain

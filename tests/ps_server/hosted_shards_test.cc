// Failover on the ps, without sockets or processes: ps 1
// of 2 (HostedShards) is the standby of shard 0, whose primary is the
// fixture's handler (ps 0). The chief has it ADOPT shard 0 from the
// replica, it serves both shards, refuses the old primary's states, keeps
// workers alive on both from their heartbeats, and RELEASEs shard 0 back
// into its replica. Time is a FakeClock.

#include "ps_server/hosted_shards.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ps_server/request_handler_fixture.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

class HostedShardsTest : public RequestHandlerTest {
 protected:
  void SetUp() override {
    num_shards_ = 2;
    momentum_ = 0.5;
    // The primary of shard 0 (ps 0) at version 1.
    Init(proto::SYNC, 2);
    RegisterAll(2);
    Push(0, 0, 0, 0.1f);
    Push(1, 0, 0, 0.3f);
    ASSERT_EQ(H().version(), 1);
    RequestHandlerOptions o{kJob, 1, 2, 2, {}, &clock_, "", /*instance=*/0x77};
    ps1_ = std::make_unique<HostedShards>(o);
    // ps 1's own shard, then the primary's state as its standby.
    proto::Header init = Base(proto::INIT, 0);
    init.set_shard_index(1);
    *init.mutable_job() = H().job();
    ASSERT_FALSE(IsError(ToPs1(0, MakeMessage(init, std::vector<float>(kSize, 2.0f)))[0]));
    ASSERT_FALSE(IsError(ToPs1(0, ReplicateFromPs0())[0]));
  }

  // ps 0's REPLICATE of its state now.
  Message ReplicateFromPs0() {
    proto::Header h = H().ReplicateHeader(1);
    h.mutable_sender()->set_type(proto::PS);
    h.mutable_sender()->set_index(0);
    return MakeMessage(h, H().StateSnapshot());
  }

  std::vector<Reply> ToPs1(int rank, const Message& m) {
    std::vector<Reply> out;
    ps1_->Handle({Peer(rank), ""}, m, &out);
    return out;
  }

  std::vector<Reply> Placement(proto::MessageType type, int rank, int shard) {
    proto::Header h = Base(type, rank);
    h.set_shard_index(shard);
    return ToPs1(rank, MakeMessage(h, {}));
  }

  // A sync PUSH_PULL of version `v` of shard `shard`, sent to ps 1.
  std::vector<Reply> PushToPs1(int rank, int shard, int64_t v, float value) {
    proto::Header h = Base(proto::PUSH_PULL, rank);
    h.set_shard_index(shard);
    h.set_step(v);
    h.set_version(v);
    h.set_num_examples(1);
    return ToPs1(rank, MakeMessage(h, std::vector<float>(kSize, value)));
  }

  std::unique_ptr<HostedShards> ps1_;
};

TEST_F(HostedShardsTest, AdoptsItsPrimarysShardAndContinuesItExactly) {
  std::vector<Reply> out = Placement(proto::ADOPT, 0, 0);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  EXPECT_EQ(out[0].header.version(), 1);
  EXPECT_EQ(out[0].header.ps_instance(), 0x77u);
  ASSERT_NE(ps1_->Serving(0), nullptr);
  EXPECT_EQ(ps1_->own().Stats().adoptions(), 1);
  const std::vector<proto::ShardPlacement> placed = ps1_->Placements();
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_EQ(placed[0].shard(), 1);
  EXPECT_EQ(placed[0].term(), 0);
  EXPECT_EQ(placed[1].shard(), 0);
  EXPECT_EQ(placed[1].term(), 1);  // a moved shard's term grows
  // The next version, on the adopted shard and on the primary it came
  // from: the same state, bit for bit.
  for (int rank = 0; rank < 2; ++rank) {
    PushToPs1(rank, 0, 1, 0.7f + rank);
    Push(rank, 1, 1, 0.7f + rank);
  }
  EXPECT_EQ(ps1_->adopted()->version(), 2);
  EXPECT_EQ(ps1_->adopted()->StateSnapshot(), H().StateSnapshot());
  // A repeat of ADOPT is answered again; ps 1's own shard is untouched.
  out = Placement(proto::ADOPT, 0, 0);
  ASSERT_FALSE(IsError(out[0]));
  EXPECT_EQ(ps1_->own().version(), 0);
  EXPECT_EQ(ps1_->own().params()[0], 2.0f);
}

TEST_F(HostedShardsTest, OnlyTheChiefMovesShards) {
  for (proto::MessageType type : {proto::ADOPT, proto::RELEASE}) {
    std::vector<Reply> out = Placement(type, 1, 0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  }
  EXPECT_EQ(ps1_->adopted(), nullptr);
  EXPECT_EQ(ps1_->own().Stats().unauthorized_requests(), 2);
}

TEST_F(HostedShardsTest, AdoptsOnlyAShardItHoldsAReplicaOf) {
  std::vector<Reply> own = Placement(proto::ADOPT, 0, 1);  // its own shard
  EXPECT_EQ(own[0].header.error().code(), static_cast<int>(absl::StatusCode::kNotFound));
  std::vector<Reply> other = Placement(proto::ADOPT, 0, 5);
  EXPECT_EQ(other[0].header.error().code(), static_cast<int>(absl::StatusCode::kNotFound));
  std::vector<Reply> release = Placement(proto::RELEASE, 0, 0);  // not adopted
  EXPECT_EQ(release[0].header.error().code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ps1_->adopted(), nullptr);
}

TEST_F(HostedShardsTest, RefusesTheOldPrimarysStatesWhileItServesTheShard) {
  ASSERT_FALSE(IsError(Placement(proto::ADOPT, 0, 0)[0]));
  // ps 0 was frozen and wakes: its REPLICATE must not touch shard 0 here.
  std::vector<Reply> out = ToPs1(0, ReplicateFromPs0());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("served by this ps now"));
  EXPECT_EQ(ps1_->own().Stats().stale_replications_refused(), 1);
  // The answer to that very state (its seq), naming the term the shard is
  // served at here, newer than the state's: what deposes the old primary
  // (Replicator).
  EXPECT_EQ(out[0].header.replica().seq(), 1u);
  EXPECT_EQ(out[0].header.replica().term(), ps1_->adopted()->term());
  EXPECT_GT(out[0].header.replica().term(), H().term());
}

TEST_F(HostedShardsTest, ReleaseKeepsTheStateAsTheReplicaAndSendsWorkersHome) {
  ASSERT_FALSE(IsError(Placement(proto::ADOPT, 0, 0)[0]));
  // Rank 1's push for version 1 waits for rank 0's (sync).
  EXPECT_TRUE(PushToPs1(1, 0, 1, 0.5f).empty());
  std::vector<Reply> out = Placement(proto::RELEASE, 0, 0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].peer, Peer(1));  // the parked request: register again
  EXPECT_TRUE(out[0].header.rejoin()) << out[0].header.error().message();
  ASSERT_FALSE(IsError(out[1])) << out[1].header.error().message();
  EXPECT_EQ(out[1].header.replica().term(), 1);
  EXPECT_EQ(ps1_->adopted(), nullptr);
  EXPECT_EQ(ps1_->Serving(0), nullptr);
  const HeldReplica& replica = ps1_->own().replica();
  ASSERT_TRUE(replica.held());
  EXPECT_EQ(replica.header.shard_index(), 0);
  EXPECT_EQ(replica.header.replica().version(), 1);
  EXPECT_EQ(replica.header.replica().term(), 1);
  EXPECT_EQ(*replica.state, H().StateSnapshot());
  // A worker still routing shard 0 here is sent to where it is now.
  out = PushToPs1(0, 0, 1, 0.5f);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].header.rejoin());
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("went back to its own ps"));
  // A repeat of RELEASE is answered again; the old primary's term-0 state
  // is refused against the term-1 replica.
  EXPECT_FALSE(IsError(Placement(proto::RELEASE, 0, 0)[0]));
  out = ToPs1(0, ReplicateFromPs0());
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("older than the replica held"));
  EXPECT_EQ(ps1_->own().Stats().releases(), 1);
}

TEST_F(HostedShardsTest, HeartbeatsKeepWorkersAliveOnTheAdoptedShardToo) {
  ASSERT_FALSE(IsError(Placement(proto::ADOPT, 0, 0)[0]));
  for (int rank = 0; rank < 2; ++rank) {
    proto::Header reg = Base(proto::REGISTER, rank);
    reg.set_shard_index(0);
    ToPs1(rank, MakeMessage(reg, {}));
  }
  std::vector<Reply> out;
  for (int i = 0; i < 5; ++i) {
    clock_.AdvanceSeconds(2);
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<Reply> beat = Placement(proto::HEARTBEAT, rank, 0);
      ASSERT_EQ(beat.size(), 1u);  // one answer, from ps 1's own shard
      EXPECT_EQ(beat[0].header.shard_index(), 1);
    }
    EXPECT_TRUE(ps1_->adopted()->DeclareSilentDead(3.0, &out).empty());
  }
  clock_.AdvanceSeconds(4);  // silence
  EXPECT_EQ(ps1_->adopted()->DeclareSilentDead(3.0, &out).size(), 2u);
}

TEST_F(HostedShardsTest, ExitsOnlyOnceEveryShardItServesWasShutDown) {
  ASSERT_FALSE(IsError(Placement(proto::ADOPT, 0, 0)[0]));
  Placement(proto::SHUTDOWN, 0, 1);
  EXPECT_FALSE(ps1_->shutdown_requested());
  Placement(proto::SHUTDOWN, 0, 0);
  EXPECT_TRUE(ps1_->shutdown_requested());
}

}  // namespace
}  // namespace pstrain

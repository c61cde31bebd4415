// StandbyReplica: the copy of its primary's shard a ps keeps as standby.

#include "ps_server/standby_replica.h"

#include <limits>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// A REPLICATE of shard `shard` (2 floats, SGD: parameters and momentum) of
// a 3-ps job, at `term`.
Message Replicate(int shard, int64_t term, float value = 1.0f, int floats = 4) {
  proto::Header h;
  h.set_type(proto::REPLICATE);
  h.set_shard_index(shard);
  h.set_num_shards(3);
  h.set_range_begin(10);
  h.set_range_end(12);
  h.set_encoding(proto::F32);
  h.mutable_job()->set_num_workers(2);
  h.mutable_job()->set_momentum(0.5);
  h.mutable_replica()->set_version(5);
  h.mutable_replica()->set_term(term);
  return MakeMessage(std::move(h), std::vector<float>(static_cast<size_t>(floats), value));
}

const Principal kPs0{Role::kPs, -1, 0};

TEST(StandbyReplica, KeepsItsPrimarysStateAndOnlyThat) {
  StandbyReplica standby(/*shard_index=*/1, /*num_workers=*/2);  // the standby of shard 0
  EXPECT_FALSE(standby.held().held());
  ASSERT_TRUE(standby.Keep(kPs0, Replicate(0, 1, 2.5f), 3).ok());
  ASSERT_TRUE(standby.held().held());
  EXPECT_EQ(*standby.held().state, std::vector<float>(4, 2.5f));
  EXPECT_EQ(standby.held().header.replica().version(), 5);
  StandbyReplica::Refusal why;
  const Principal ps2{Role::kPs, -1, 2};
  EXPECT_FALSE(standby.Keep(ps2, Replicate(2, 1), 3, &why).ok());  // not its primary
  EXPECT_EQ(why, StandbyReplica::Refusal::kNotMyPrimary);
  EXPECT_FALSE(standby.Keep(kPs0, Replicate(2, 1), 3, &why).ok());  // another shard
  const Principal chief{Role::kChief, 0};
  EXPECT_FALSE(standby.Keep(chief, Replicate(0, 1), 3, &why).ok());
  EXPECT_FALSE(standby.Keep(kPs0, Replicate(0, 1), 4, &why).ok());  // another cluster size
  EXPECT_EQ(*standby.held().state, std::vector<float>(4, 2.5f));     // unchanged
}

TEST(StandbyReplica, NeverTakesAStateOfAnOlderTermThanTheOneHeld) {
  StandbyReplica standby(1, 2);
  ASSERT_TRUE(standby.Keep(kPs0, Replicate(0, /*term=*/3, 1.0f), 3).ok());
  StandbyReplica::Refusal why;
  const absl::Status s = standby.Keep(kPs0, Replicate(0, /*term=*/2, 9.0f), 3, &why);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(why, StandbyReplica::Refusal::kStaleTerm);
  EXPECT_THAT(std::string(s.message()), HasSubstr("older than the replica held"));
  EXPECT_EQ(*standby.held().state, std::vector<float>(4, 1.0f));
  EXPECT_TRUE(standby.Keep(kPs0, Replicate(0, 3, 2.0f), 3).ok());  // the same term goes on
}

TEST(StandbyReplica, RefusesAStateOfTheWrongSizeOrNotFinite) {
  StandbyReplica standby(1, 2);
  StandbyReplica::Refusal why;
  EXPECT_FALSE(standby.Keep(kPs0, Replicate(0, 1, 1.0f, /*floats=*/3), 3, &why).ok());
  EXPECT_EQ(why, StandbyReplica::Refusal::kBadState);
  EXPECT_FALSE(
      standby.Keep(kPs0, Replicate(0, 1, std::numeric_limits<float>::quiet_NaN()), 3, &why).ok());
  EXPECT_EQ(why, StandbyReplica::Refusal::kBadState);
  EXPECT_FALSE(standby.held().held());
}

TEST(StandbyReplica, AStateFromAPayloadBecomesACheckpointOfItsVersionAndClocks) {
  Message m = Replicate(0, 1, 3.0f);
  m.header.mutable_replica()->add_worker_clocks(4);
  m.header.mutable_replica()->add_worker_clocks(5);
  auto c = StateFromPayload(m, 2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->header.version(), 5);
  EXPECT_EQ(c->header.worker_clocks_size(), 2);
  EXPECT_EQ(c->state, std::vector<float>(4, 3.0f));
  m.header.mutable_replica()->add_worker_clocks(6);  // clocks for 3 ranks of a 2-rank job
  EXPECT_FALSE(StateFromPayload(m, 2).ok());
}

}  // namespace
}  // namespace pstrain

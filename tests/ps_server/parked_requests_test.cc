// ParkedRequests: what a ps answers later, and its bounds.

#include "ps_server/parked_requests.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

proto::Header Reply(int rank, uint64_t session, uint64_t id) {
  proto::Header h;
  h.set_rank(rank);
  h.set_session(session);
  h.set_request_id(id);
  return h;
}

TEST(ParkedRequests, ReleasesPullsInTheOrderTheyWereParkedOnceServable) {
  ParkedRequests parked;
  for (int rank = 0; rank < 3; ++rank) {
    Parked p{"peer" + std::to_string(rank), Reply(rank, 1, 10)};
    ASSERT_TRUE(parked.ParkPull(p, {rank, 0, /*min_version=*/rank + 1}, 100 * rank).ok());
  }
  EXPECT_EQ(parked.pulls(), 3u);
  // Version 2 is in: ranks 0 and 1 wanted 1 and 2.
  std::vector<ParkedPull> ready =
      parked.TakeServable([](const PullRequest& p) { return p.min_version <= 2; });
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].parked.peer, "peer0");
  EXPECT_EQ(ready[1].parked.peer, "peer1");
  EXPECT_EQ(ready[1].since_us, 100);
  EXPECT_EQ(parked.pulls(), 1u);
}

TEST(ParkedRequests, HoldsAtMostItsBoundOfPullsPerRankAndLeavesTheRefusedOneWhole) {
  ParkedRequests parked;
  for (int i = 0; i < ParkedRequests::kMaxPullsPerRank; ++i) {
    Parked p{"w1", Reply(1, 1, i)};
    ASSERT_TRUE(parked.ParkPull(p, {1, 0, 5}, 0).ok());
  }
  Parked one_more{"w1", Reply(1, 1, 99)};
  const absl::Status s = parked.ParkPull(one_more, {1, 0, 5}, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(one_more.peer, "w1");  // still whole, to be refused
  EXPECT_EQ(one_more.header.request_id(), 99u);
  Parked other_rank{"w2", Reply(2, 1, 1)};
  EXPECT_TRUE(parked.ParkPull(other_rank, {2, 0, 5}, 0).ok());
}

TEST(ParkedRequests, ABarrierOpensWhenEveryRankWaitedForHasArrived) {
  ParkedRequests parked;
  ASSERT_TRUE(parked.Arrive("epoch", 0, 3, {"w0", Reply(0, 1, 1)}).ok());
  EXPECT_EQ(parked.Arrive("epoch", 0, 3, {"w0", Reply(0, 1, 2)}).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(parked.Arrive("epoch", 2, 3, {"w2", Reply(2, 1, 1)}).ok());
  auto all_alive = [](int) { return true; };
  EXPECT_TRUE(parked.Release("epoch", all_alive).empty());  // rank 1 is missing
  // Rank 1 is dead: not waited for.
  std::vector<Parked> out = parked.Release("epoch", [](int rank) { return rank != 1; });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].peer, "w0");
  EXPECT_TRUE(parked.barrier_names().empty());
}

TEST(ParkedRequests, RefusesBadNamesRanksAndTooManyBarriers) {
  ParkedRequests parked;
  EXPECT_EQ(parked.Arrive("", 0, 2, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parked.Arrive(std::string(65, 'x'), 0, 2, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parked.Arrive("b", 2, 2, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(parked.barrier_names().empty());  // the refused one left nothing open
  for (size_t i = 0; i < ParkedRequests::kMaxBarriers; ++i) {
    ASSERT_TRUE(parked.Arrive("b" + std::to_string(i), 0, 2, {}).ok());
  }
  EXPECT_EQ(parked.Arrive("one more", 0, 2, {}).code(), absl::StatusCode::kResourceExhausted);
}

TEST(ParkedRequests, ARepeatMovesOnlyItsOwnRequestsAnswer) {
  ParkedRequests parked;
  Parked pull{"old-route", Reply(1, 0x5, 7)};
  ASSERT_TRUE(parked.ParkPull(pull, {1, 0, 3}, 0).ok());
  // Another session's request 7 of rank 1 is not this one.
  EXPECT_FALSE(parked.Reroute(Reply(1, 0x52, 7), "elsewhere"));
  EXPECT_TRUE(parked.Reroute(Reply(1, 0x5, 7), "new-route"));
  std::vector<Parked> all = parked.TakeAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].peer, "new-route");
}

TEST(ParkedRequests, ForgettingARankDropsItsPullsAndItsPlaceInBarriers) {
  ParkedRequests parked;
  Parked p1{"w1", Reply(1, 1, 1)};
  Parked p2{"w2", Reply(2, 1, 1)};
  ASSERT_TRUE(parked.ParkPull(p1, {1, 0, 3}, 0).ok());
  ASSERT_TRUE(parked.ParkPull(p2, {2, 0, 3}, 0).ok());
  ASSERT_TRUE(parked.Arrive("done", 1, 3, {"w1", Reply(1, 1, 2)}).ok());
  ASSERT_TRUE(parked.ParkRegister("w0", Reply(0, 1, 1)).ok());
  parked.ForgetRank(1);
  EXPECT_EQ(parked.pulls(), 1u);
  // Rank 1 may arrive again, as a new client.
  EXPECT_TRUE(parked.Arrive("done", 1, 3, {"w1b", Reply(1, 2, 1)}).ok());
  std::vector<Parked> all = parked.TakeAll();
  EXPECT_EQ(all.size(), 3u);  // the register, rank 2's pull, rank 1's new place
  EXPECT_TRUE(parked.TakeAll().empty());
}

TEST(ParkedRequests, HoldsAtMostItsBoundOfRegistersBeforeInit) {
  ParkedRequests parked;
  for (size_t i = 0; i < ParkedRequests::kMaxRegisters; ++i) {
    ASSERT_TRUE(parked.ParkRegister("w", Reply(1, i, 1)).ok());
  }
  EXPECT_EQ(parked.ParkRegister("w", Reply(1, 0, 2)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(parked.TakeRegisters().size(), ParkedRequests::kMaxRegisters);
  EXPECT_TRUE(parked.TakeRegisters().empty());
}

}  // namespace
}  // namespace pstrain

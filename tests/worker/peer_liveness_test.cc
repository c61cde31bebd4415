// PeerLiveness: the worker's verdicts on its ps tasks (worker/heartbeat.h),
// driven message by message on a FakeClock: no sockets, no sleeping.

#include "worker/peer_liveness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/rejoin.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr double kTimeoutS = 10.0;

proto::Header Reply(uint64_t instance) {
  proto::Header h;
  h.set_is_reply(true);
  h.set_type(proto::HEARTBEAT);
  h.set_ps_instance(instance);
  return h;
}

class PeerLivenessTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  PeerLiveness live_{{"ps:0 (a:1)", "ps:1 (b:2)"}, kTimeoutS, &clock_};
};

TEST_F(PeerLivenessTest, NamesTheTargetsThatHaveNotAnsweredYet) {
  EXPECT_THAT(live_.Unanswered(), ElementsAre("ps:0 (a:1)", "ps:1 (b:2)"));
  live_.OnReply(1, Reply(7));
  EXPECT_THAT(live_.Unanswered(), ElementsAre("ps:0 (a:1)"));
  live_.OnReply(0, Reply(8));
  EXPECT_THAT(live_.Unanswered(), IsEmpty());
  EXPECT_TRUE(live_.status().ok());
}

TEST_F(PeerLivenessTest, APsThatNeverAnsweredIsNotJudgedHere) {
  clock_.AdvanceSeconds(10 * kTimeoutS);
  EXPECT_FALSE(live_.CheckSilence());
  EXPECT_FALSE(live_.OnDisconnected(0));  // a connection attempt that failed
  EXPECT_TRUE(live_.status().ok());
}

// A job that ends normally: the chief shuts the ps tasks down and they
// close their connections, which is neither a verdict nor a warning.
TEST_F(PeerLivenessTest, APsClosingAtTheJobsEndIsNoFailure) {
  live_.OnReply(0, Reply(7));
  live_.OnReply(1, Reply(8));
  live_.StopJudging();
  EXPECT_FALSE(live_.OnDisconnected(0));
  clock_.AdvanceSeconds(10 * kTimeoutS);
  EXPECT_FALSE(live_.CheckSilence());
  EXPECT_FALSE(live_.OnReply(1, Reply(9)));  // a new instance, too
  EXPECT_TRUE(live_.status().ok()) << live_.status();
  // A ps's error still counts: that is what it said, not how it left.
  proto::Header failed = Reply(8);
  failed.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kAborted));
  failed.mutable_error()->set_message("the job failed");
  EXPECT_TRUE(live_.OnReply(1, failed));
  EXPECT_THAT(live_.status().message(), HasSubstr("the job failed"));
}

TEST_F(PeerLivenessTest, SilenceJustPastTheTimeoutIsARejoinNamingThePs) {
  live_.OnReply(0, Reply(7));
  live_.OnReply(1, Reply(8));
  clock_.AdvanceSeconds(kTimeoutS - 1);
  live_.OnReply(0, Reply(7));  // ps:0 keeps answering, ps:1 falls silent
  clock_.AdvanceSeconds(1);
  EXPECT_FALSE(live_.CheckSilence());  // exactly the timeout: not yet
  clock_.AdvanceMicros(1);
  EXPECT_TRUE(live_.CheckSilence());
  EXPECT_TRUE(IsRejoin(live_.status()));
  EXPECT_THAT(std::string(live_.status().message()),
              HasSubstr("ps:1 (b:2) stopped answering (no heartbeat reply for 10 s)"));
}

TEST_F(PeerLivenessTest, AnswersKeepAPsAliveForever) {
  live_.OnReply(0, Reply(7));
  for (int i = 0; i < 100; ++i) {
    clock_.AdvanceSeconds(kTimeoutS * 0.9);
    live_.OnReply(0, Reply(7));
    EXPECT_FALSE(live_.CheckSilence());
  }
  EXPECT_TRUE(live_.status().ok());
}

TEST_F(PeerLivenessTest, AClosedConnectionAfterAnAnswerIsARejoin) {
  live_.OnReply(1, Reply(8));
  EXPECT_TRUE(live_.OnDisconnected(1));
  EXPECT_TRUE(IsRejoin(live_.status()));
  EXPECT_THAT(std::string(live_.status().message()), HasSubstr("ps:1 (b:2) closed its connection"));
}

TEST_F(PeerLivenessTest, AReplyFromANewInstanceIsARejoin) {
  live_.OnReply(0, Reply(7));
  live_.OnReply(0, Reply(0));  // no instance (an old ps): no verdict
  EXPECT_TRUE(live_.status().ok());
  EXPECT_TRUE(live_.OnReply(0, Reply(9)));
  EXPECT_TRUE(IsRejoin(live_.status()));
  EXPECT_THAT(std::string(live_.status().message()), HasSubstr("ps:0 (a:1) restarted"));
}

TEST_F(PeerLivenessTest, AnErrorInAReplyIsLatchedAsThePsGaveIt) {
  proto::Header h = Reply(7);
  h.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kAborted));
  h.mutable_error()->set_message("the job failed: ps:0 lost every worker");
  EXPECT_TRUE(live_.OnReply(0, h));
  EXPECT_TRUE(absl::IsAborted(live_.status()));
  EXPECT_FALSE(IsRejoin(live_.status()));
  EXPECT_EQ(live_.status().message(), "ps:0 (a:1): the job failed: ps:0 lost every worker");
}

TEST_F(PeerLivenessTest, TheFirstVerdictIsKept) {
  live_.OnReply(0, Reply(7));
  live_.OnReply(1, Reply(8));
  ASSERT_TRUE(live_.OnDisconnected(0));
  const absl::Status first = live_.status();
  EXPECT_FALSE(live_.OnReply(1, Reply(99)));
  clock_.AdvanceSeconds(2 * kTimeoutS);
  EXPECT_FALSE(live_.CheckSilence());
  EXPECT_FALSE(live_.Latch(absl::InternalError("later")));
  EXPECT_EQ(live_.status(), first);
}

TEST_F(PeerLivenessTest, AnOutOfRangeTargetIsIgnored) {
  EXPECT_FALSE(live_.OnReply(2, Reply(7)));
  EXPECT_FALSE(live_.OnDisconnected(5));
  EXPECT_TRUE(live_.status().ok());
}

}  // namespace
}  // namespace pstrain

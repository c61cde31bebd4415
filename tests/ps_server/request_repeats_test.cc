// RequestRepeats: which requests a ps has seen, per rank and session.

#include "ps_server/request_repeats.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

using Seen = RequestRepeats::Seen;

proto::Header ReplyTo(uint64_t session, uint64_t id) {
  proto::Header h;
  h.set_session(session);
  h.set_request_id(id);
  h.set_is_reply(true);
  return h;
}

TEST(RequestRepeats, ANewIdIsNewAndAnIdAtOrBelowTheHighestIsARepeat) {
  RequestRepeats r(2);
  const RecordedReply* recorded = nullptr;
  EXPECT_EQ(r.Classify(1, 0xA, 1, &recorded), Seen::kNew);
  EXPECT_EQ(r.Classify(1, 0xA, 3, &recorded), Seen::kNew);
  r.Record(1, 0xA, 3, ReplyTo(0xA, 3), /*with_params=*/true);
  EXPECT_EQ(r.Classify(1, 0xA, 3, &recorded), Seen::kCompleted);
  ASSERT_NE(recorded, nullptr);
  EXPECT_EQ(recorded->request_id, 3u);
  EXPECT_TRUE(recorded->with_params);
  EXPECT_EQ(r.Classify(1, 0xA, 2, &recorded), Seen::kRepeat);  // never seen, but below 3
  EXPECT_EQ(r.Classify(1, 0xA, 1, &recorded), Seen::kRepeat);  // seen, reply not kept
  // Rank 0 is apart from rank 1.
  EXPECT_EQ(r.Classify(0, 0xA, 3, &recorded), Seen::kNew);
}

TEST(RequestRepeats, RemembersTheLastRepliesOfASession) {
  RequestRepeats r(1);
  const RecordedReply* recorded = nullptr;
  const uint64_t n = RequestRepeats::kRememberedReplies + 3;
  for (uint64_t id = 1; id <= n; ++id) {
    ASSERT_EQ(r.Classify(0, 0xA, id, &recorded), Seen::kNew);
    r.Record(0, 0xA, id, ReplyTo(0xA, id), false);
  }
  EXPECT_EQ(r.Classify(0, 0xA, n, &recorded), Seen::kCompleted);
  EXPECT_EQ(r.Classify(0, 0xA, n - RequestRepeats::kRememberedReplies + 1, &recorded),
            Seen::kCompleted);
  EXPECT_EQ(r.Classify(0, 0xA, n - RequestRepeats::kRememberedReplies, &recorded), Seen::kRepeat);
}

// The hole this class closes: a repeat from a session after another
// session of the same rank has spoken is still a repeat, and the older
// session's new requests are refused.
TEST(RequestRepeats, ARepeatStaysARepeatWhenAnotherSessionOfTheRankSpokeInBetween) {
  RequestRepeats r(2);
  const RecordedReply* recorded = nullptr;
  ASSERT_EQ(r.Classify(1, 0x5, 7, &recorded), Seen::kNew);
  r.Record(1, 0x5, 7, ReplyTo(0x5, 7), false);
  ASSERT_EQ(r.Classify(1, 0x52, 1, &recorded), Seen::kNew);  // a second client of rank 1
  EXPECT_EQ(r.current(1), 0x52u);
  EXPECT_TRUE(r.retired(1, 0x5));
  EXPECT_FALSE(r.retired(1, 0x52));
  EXPECT_FALSE(r.retired(1, 0x99));                               // never seen: not retired
  EXPECT_EQ(r.Classify(1, 0x5, 7, &recorded), Seen::kCompleted);  // answered again
  EXPECT_EQ(r.Classify(1, 0x5, 6, &recorded), Seen::kRepeat);
  EXPECT_EQ(r.Classify(1, 0x5, 8, &recorded), Seen::kRetired);  // new, of a retired client
  EXPECT_EQ(r.Classify(1, 0x52, 2, &recorded), Seen::kNew);
  EXPECT_EQ(r.sessions(1), 2u);
}

TEST(RequestRepeats, ASessionLetGoOfIsStillRetired) {
  RequestRepeats r(1);
  const RecordedReply* recorded = nullptr;
  ASSERT_EQ(r.Classify(0, 1000, 7, &recorded), Seen::kNew);
  r.Record(0, 1000, 7, ReplyTo(1000, 7), false);
  // Enough later sessions that 1000's details are let go of.
  for (uint64_t s = 1; s <= RequestRepeats::kRecentSessions; ++s) {
    ASSERT_EQ(r.Classify(0, s, 1, &recorded), Seen::kNew);
  }
  // Its repeat is no longer answered, and still never applied.
  EXPECT_EQ(r.Classify(0, 1000, 7, &recorded), Seen::kRetired);
  EXPECT_EQ(r.Classify(0, 1000, 1, &recorded), Seen::kRetired);
  EXPECT_EQ(r.Classify(0, 1000, 100, &recorded), Seen::kRetired);
  // Recording for it keeps nothing.
  r.Record(0, 1000, 100, ReplyTo(1000, 100), false);
  EXPECT_EQ(r.Classify(0, 1000, 100, &recorded), Seen::kRetired);
}

TEST(RequestRepeats, RefusesSessionsPastItsBound) {
  RequestRepeats r(1);
  const RecordedReply* recorded = nullptr;
  for (uint64_t s = 1; s <= RequestRepeats::kMaxSessions; ++s) {
    ASSERT_EQ(r.Classify(0, s, 1, &recorded), Seen::kNew) << s;
  }
  EXPECT_EQ(r.Classify(0, RequestRepeats::kMaxSessions + 1, 1, &recorded), Seen::kTooManySessions);
  EXPECT_EQ(r.sessions(0), RequestRepeats::kMaxSessions);
  // The current one goes on.
  EXPECT_EQ(r.Classify(0, RequestRepeats::kMaxSessions, 2, &recorded), Seen::kNew);
}

}  // namespace
}  // namespace pstrain

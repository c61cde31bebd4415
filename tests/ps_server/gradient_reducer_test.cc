// REDUCE's rounds (ps_server/gradient_reducer.h): the workers' weighted
// average of a version's gradient, summed in rank order whatever order
// they come in, answered once every live rank's is in; a dead rank is not
// waited for; stale and overtaken contributions are answered without it.

#include "ps_server/gradient_reducer.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

Parked Answer(int rank) { return {"peer" + std::to_string(rank), proto::Header()}; }

TEST(GradientReducer, AnswersEveryRankWithTheWeightedAverageOnceAllAreIn) {
  GradientReducer r(3, 2);
  EXPECT_EQ(r.Add(2, 0, 0, std::vector<float>{3, 6}, 1, {}, Answer(2)),
            GradientReducer::Added::kWaiting);
  EXPECT_EQ(r.Add(0, 0, 0, std::vector<float>{1, 2}, 2, {}, Answer(0)),
            GradientReducer::Added::kWaiting);
  EXPECT_TRUE(r.TakeAnswers().empty());  // not complete: nothing to answer yet
  EXPECT_EQ(r.Add(1, 0, 0, std::vector<float>{1, 1}, 1, {}, Answer(1)),
            GradientReducer::Added::kComplete);
  ASSERT_TRUE(r.complete());
  // (2 x [1, 2] + [1, 1] + [3, 6]) / 4.
  EXPECT_EQ(*r.average(), (std::vector<float>{1.5f, 2.75f}));
  EXPECT_EQ(r.TakeAnswers().size(), 3u);
  EXPECT_TRUE(r.TakeAnswers().empty());
}

TEST(GradientReducer, TheAverageOfEqualBatchesIsTheSumOverTheWorkers) {
  // One worker's average is its gradient, and two of the same examples'
  // is (g0 + g1) x 0.5 (DDP's), for any batch: 10 x g / 10 would round.
  const std::vector<float> g0 = {0.1f, 1.0f / 3.0f, -7.3e-5f, 12345.678f};
  const std::vector<float> g1 = {0.7f, -2.0f / 3.0f, 1e-9f, 0.001f};
  std::vector<float> half_sum(g0.size());
  for (size_t i = 0; i < g0.size(); ++i) half_sum[i] = (g0[i] + g1[i]) * 0.5f;
  for (const int examples : {10, 100, 7}) {
    GradientReducer one(1, static_cast<int64_t>(g0.size()));
    one.Add(0, 0, 0, g0, examples, {}, Answer(0));
    ASSERT_TRUE(one.complete());
    EXPECT_EQ(*one.average(), g0) << examples;
    GradientReducer two(2, static_cast<int64_t>(g0.size()));
    two.Add(1, 0, 0, g1, examples, {}, Answer(1));
    two.Add(0, 0, 0, g0, examples, {}, Answer(0));
    ASSERT_TRUE(two.complete());
    EXPECT_EQ(*two.average(), half_sum) << examples;
  }
}

TEST(GradientReducer, SumsInRankOrderWhateverTheArrivalOrder) {
  // Floating-point addition is not associative: the same three gradients
  // in two orders give one average, bit for bit.
  const std::vector<std::vector<float>> g = {{1e8f}, {1.0f}, {-1e8f}};
  std::vector<float> averages;
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, std::vector<int>{2, 1, 0}}) {
    GradientReducer r(3, 1);
    for (int rank : order) r.Add(rank, 0, 0, g[rank], 1, {}, Answer(rank));
    ASSERT_TRUE(r.complete());
    averages.push_back((*r.average())[0]);
  }
  EXPECT_EQ(averages[0], averages[1]);
}

TEST(GradientReducer, ATensorIsAbsentWhenEveryContributionSaysSo) {
  GradientReducer r(2, 1);
  r.Add(0, 0, 0, std::vector<float>{1}, 1, std::vector<int32_t>{1, 3, 4}, Answer(0));
  r.Add(1, 0, 0, std::vector<float>{1}, 1, std::vector<int32_t>{3, 5}, Answer(1));
  EXPECT_EQ(r.absent(), (std::vector<int32_t>{3}));
}

TEST(GradientReducer, AContributionOfNoExamplesIsWaitedForAndAddsNothing) {
  // A worker that called step() without backward(): the round waits for
  // it, and its buffer (an inf left from an earlier step here: 0 x inf
  // would be a NaN) is not in the average.
  GradientReducer r(2, 2);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(r.Add(1, 0, 0, std::vector<float>{inf, 7}, 0, std::vector<int32_t>{0}, Answer(1)),
            GradientReducer::Added::kWaiting);
  EXPECT_EQ(r.Add(0, 0, 0, std::vector<float>{2, 4}, 3, {}, Answer(0)),
            GradientReducer::Added::kComplete);
  EXPECT_EQ(*r.average(), (std::vector<float>{2, 4}));
  EXPECT_EQ(r.TakeAnswers().size(), 2u);
}

TEST(GradientReducer, AContributionOfNoExamplesSaysNothingOfTheAbsentTensors) {
  // Rank 1 had no gradient (0 examples) and sent its buffer with nothing
  // absent: tensor 1, which rank 0's examples lacked, stays absent.
  GradientReducer r(2, 1);
  r.Add(0, 0, 0, std::vector<float>{1}, 2, std::vector<int32_t>{1}, Answer(0));
  r.Add(1, 0, 0, std::vector<float>{5}, 0, {}, Answer(1));
  EXPECT_EQ(r.absent(), (std::vector<int32_t>{1}));
  EXPECT_EQ(*r.average(), (std::vector<float>{1}));
  // Where no contribution has examples, every one votes.
  GradientReducer none(2, 1);
  none.Add(0, 0, 0, std::vector<float>{0}, 0, std::vector<int32_t>{0, 1}, Answer(0));
  none.Add(1, 0, 0, std::vector<float>{0}, 0, std::vector<int32_t>{0}, Answer(1));
  EXPECT_EQ(none.absent(), (std::vector<int32_t>{0}));
}

TEST(GradientReducer, ARepeatOfNoExamplesLeavesNothingOfTheFirstInTheSum) {
  GradientReducer r(2, 1);
  r.Add(0, 0, 0, std::vector<float>{100}, 2, {}, Answer(0));
  r.Add(0, 0, 0, std::vector<float>{5}, 0, {}, Answer(0));  // the rank's repeat
  r.Add(1, 0, 0, std::vector<float>{3}, 1, {}, Answer(1));
  ASSERT_TRUE(r.complete());
  EXPECT_EQ(*r.average(), (std::vector<float>{3}));
}

TEST(GradientReducer, ARoundOutOfOrderIsStaleAndOvertakesNothing) {
  // A worker's rounds go 0, 1, 2...: one that skips ahead (an insider's)
  // cannot end the round the others wait in.
  GradientReducer r(2, 1);
  EXPECT_EQ(r.Add(0, 3, 0, std::vector<float>{1}, 1, {}, Answer(0)),
            GradientReducer::Added::kWaiting);
  EXPECT_EQ(r.Add(1, 3, 1, std::vector<float>{9}, 1, {}, Answer(1)),
            GradientReducer::Added::kStale);  // round 0 is not complete
  EXPECT_EQ(r.Add(1, 3, 2, std::vector<float>{9}, 1, {}, Answer(1)),
            GradientReducer::Added::kStale);
  EXPECT_EQ(r.Add(1, 4, 1, std::vector<float>{9}, 1, {}, Answer(1)),
            GradientReducer::Added::kStale);  // a new version begins at round 0
  EXPECT_TRUE(r.TakeOvertaken().empty());
  EXPECT_EQ(r.Add(1, 3, 0, std::vector<float>{3}, 1, {}, Answer(1)),
            GradientReducer::Added::kComplete);
  EXPECT_EQ(*r.average(), (std::vector<float>{2}));
  // The next round is in order.
  EXPECT_EQ(r.Add(1, 3, 1, std::vector<float>{3}, 1, {}, Answer(1)),
            GradientReducer::Added::kWaiting);
}

TEST(GradientReducer, ARankThatPushedTheVersionIsNotWaitedFor) {
  // Rank 1 made one averaging pass in the step and pushed; rank 0 makes a
  // second: its round completes without rank 1, before or after the push.
  GradientReducer r(2, 1);
  r.Add(0, 3, 0, std::vector<float>{2}, 1, {}, Answer(0));
  r.Add(1, 3, 0, std::vector<float>{4}, 1, {}, Answer(1));
  ASSERT_TRUE(r.complete());
  EXPECT_EQ(r.TakeAnswers().size(), 2u);
  EXPECT_EQ(r.Add(0, 3, 1, std::vector<float>{6}, 1, {}, Answer(0)),
            GradientReducer::Added::kWaiting);
  EXPECT_TRUE(r.Pushed(1, 3));  // completes round 1 of version 3
  EXPECT_EQ(*r.average(), (std::vector<float>{6}));
  EXPECT_EQ(r.Add(0, 3, 2, std::vector<float>{8}, 1, {}, Answer(0)),
            GradientReducer::Added::kComplete);  // rank 1 pushed 3 already
  // A push of another version leaves this one's rounds waiting for it.
  EXPECT_EQ(r.Add(0, 4, 0, std::vector<float>{1}, 1, {}, Answer(0)),
            GradientReducer::Added::kWaiting);
  EXPECT_FALSE(r.Pushed(1, 3));
  // After a rollback the versions may repeat: the pushes are forgotten.
  (void)r.TakeAll();
  EXPECT_EQ(r.Add(0, 3, 0, std::vector<float>{1}, 1, {}, Answer(0)),
            GradientReducer::Added::kWaiting);
}

TEST(GradientReducer, ADeadRankIsNotWaitedFor) {
  GradientReducer r(2, 1);
  EXPECT_EQ(r.Add(0, 4, 0, std::vector<float>{2}, 1, {}, Answer(0)),
            GradientReducer::Added::kWaiting);
  EXPECT_TRUE(r.SetActive(1, false));
  ASSERT_TRUE(r.complete());
  EXPECT_EQ(*r.average(), (std::vector<float>{2}));
  EXPECT_EQ(r.TakeAnswers().size(), 1u);
}

TEST(GradientReducer, NonFiniteGradientsReachTheAverage) {
  // A GradScaler on every worker must see one worker's overflow.
  GradientReducer r(2, 1);
  r.Add(0, 0, 0, std::vector<float>{1}, 1, {}, Answer(0));
  r.Add(1, 0, 0, std::vector<float>{std::numeric_limits<float>::infinity()}, 1, {}, Answer(1));
  EXPECT_TRUE(std::isinf((*r.average())[0]));
}

TEST(GradientReducer, RoundsFollowVersionsThenRoundsAndOldOnesAreStale) {
  GradientReducer r(2, 1);
  r.Add(0, 3, 0, std::vector<float>{1}, 1, {}, Answer(0));
  r.Add(1, 3, 0, std::vector<float>{3}, 1, {}, Answer(1));
  r.TakeAnswers();
  // A second backward of the same step: round 1 of version 3.
  EXPECT_EQ(r.Add(0, 3, 1, std::vector<float>{5}, 1, {}, Answer(0)),
            GradientReducer::Added::kWaiting);
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.Add(1, 3, 0, std::vector<float>{7}, 1, {}, Answer(1)),
            GradientReducer::Added::kStale);
  EXPECT_EQ(r.Add(1, 2, 5, std::vector<float>{7}, 1, {}, Answer(1)),
            GradientReducer::Added::kStale);
  // A later version overtakes the waiting round: its answer is stale.
  EXPECT_EQ(r.Add(1, 4, 0, std::vector<float>{9}, 1, {}, Answer(1)),
            GradientReducer::Added::kWaiting);
  EXPECT_EQ(r.TakeOvertaken().size(), 1u);
}

TEST(GradientReducer, ARepeatTakesThePlaceOfTheFirstAndIsAnsweredOnceComplete) {
  GradientReducer r(2, 1);
  r.Add(0, 0, 0, std::vector<float>{100}, 1, {}, Answer(0));
  r.Add(0, 0, 0, std::vector<float>{1}, 1, {}, {"peer0-again", proto::Header()});
  EXPECT_EQ(r.Add(1, 0, 0, std::vector<float>{3}, 1, {}, Answer(1)),
            GradientReducer::Added::kComplete);
  EXPECT_EQ(*r.average(), (std::vector<float>{2}));
  const std::vector<Parked> answers = r.TakeAnswers();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].peer, "peer0-again");
  // After the round, a repeat is answered at once with its average.
  EXPECT_EQ(r.Add(1, 0, 0, std::vector<float>{3}, 1, {}, Answer(1)),
            GradientReducer::Added::kComplete);
  EXPECT_EQ(r.TakeAnswers().size(), 1u);
}

TEST(GradientReducer, TakeAllEmptiesTheRound) {
  GradientReducer r(2, 1);
  r.Add(0, 0, 0, std::vector<float>{1}, 1, {}, Answer(0));
  EXPECT_EQ(r.TakeAll().size(), 1u);
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.version(), -1);
}

}  // namespace
}  // namespace pstrain

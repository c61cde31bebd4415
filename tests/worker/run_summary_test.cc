// summary.json's results from the evaluations and the shards' counters
// (worker/run_summary.h).

#include "worker/run_summary.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

proto::ShardStats Shard(int index, int64_t updates, int64_t malformed, int64_t unordered) {
  proto::ShardStats s;
  s.set_shard_index(index);
  s.set_updates_applied(updates);
  s.set_gradients_received(2 * updates);
  s.set_malformed_requests(malformed);
  s.set_unordered_sums(unordered);
  return s;
}

TEST(FillSummaryResults, TakesTheMaxOfProgressCountersAndSumsWhatWentWrong) {
  proto::RunSummary summary;
  FillSummaryResults({}, {Shard(0, 100, 1, 2), Shard(1, 98, 3, 0), Shard(2, 100, 0, 5)}, 0,
                     &summary);
  EXPECT_EQ(summary.updates_applied(), 100);
  EXPECT_EQ(summary.gradients_received(), 200);
  EXPECT_EQ(summary.malformed_requests(), 4);
  EXPECT_EQ(summary.unordered_sums(), 7);
  ASSERT_EQ(summary.shards_size(), 3);
  EXPECT_EQ(summary.shards(0).unordered_sums(), 2);
  EXPECT_EQ(summary.shards(1).unordered_sums(), 0);
  EXPECT_EQ(summary.shards(1).updates_applied(), 98);
  EXPECT_EQ(summary.shards(2).unordered_sums(), 5);
}

TEST(FillSummaryResults, AWorkerThatTookNoStepOfItsOwnLeavesTheTrainingWindowAlone) {
  proto::ShardStats shard = Shard(0, 25, 0, 0);
  auto report = [&](int rank, int64_t first_us, int64_t last_us, int64_t images) {
    proto::WorkerReport* w = shard.add_workers();
    w->set_rank(rank);
    w->set_steps(25);
    w->set_images(images);
    w->set_first_step_unix_us(first_us);
    w->set_last_step_unix_us(last_us);
  };
  report(0, 1'000'000, 3'000'000, 400);
  report(1, 0, 0, 0);  // registered after the last version: "continuing from step 25 of 25"
  report(2, 1'500'000, 3'000'000, 400);
  proto::RunSummary summary;
  FillSummaryResults({}, {shard}, 0, &summary);
  EXPECT_DOUBLE_EQ(summary.train_seconds(), 2.0);
  EXPECT_DOUBLE_EQ(summary.train_images_per_sec(), 400.0);
}

TEST(FillSummaryResults, TimeToAccuracyIsTheFirstEvaluationAtOrAboveIt) {
  proto::RunSummary summary;
  FillSummaryResults({{10, 1.0, 0.94, 0.3}, {20, 2.0, 0.975, 0.1}, {30, 3.0, 0.97, 0.1}}, {}, 0,
                     &summary);
  EXPECT_DOUBLE_EQ(summary.seconds_to_95(), 2.0);
  EXPECT_DOUBLE_EQ(summary.seconds_to_97(), 2.0);
  EXPECT_DOUBLE_EQ(summary.seconds_to_98(), -1.0);
  EXPECT_DOUBLE_EQ(summary.final_test_accuracy(), 0.97);
}

TEST(HistogramQuantile, IsTheFirstBucketReachingTheShare) {
  EXPECT_EQ(HistogramQuantile({}, 0.99), 0);
  EXPECT_EQ(HistogramQuantile({90, 9, 1}, 0.5), 0);
  EXPECT_EQ(HistogramQuantile({90, 9, 1}, 0.99), 1);
  EXPECT_EQ(HistogramQuantile({90, 9, 1}, 1.0), 2);
}

}  // namespace
}  // namespace pstrain

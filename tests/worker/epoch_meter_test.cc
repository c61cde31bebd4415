// EpochMeter: an epoch's books and the line that closes it, as the C++
// trainer and a script's worker both keep them.

#include "worker/epoch_meter.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

EvalPoint Eval(double accuracy, double loss, double train_seconds) {
  EvalPoint e;
  e.accuracy = accuracy;
  e.loss = loss;
  e.train_seconds = train_seconds;
  return e;
}

TEST(EpochMeter, AnEpochsRowAndLineCountWhatHappenedSinceItBegan) {
  EpochMeter meter;
  meter.Begin({/*step=*/10, /*version=*/10, /*train_seconds=*/4.0});
  meter.AddStep(64, 0.5);
  meter.AddStep(64, 0.25);
  EXPECT_EQ(meter.examples(), 128);
  const ClosedEpoch closed =
      meter.End(2, 3, /*workers=*/4, {12, 12, 6.0}, Eval(0.9, 0.3, 5.5), /*images=*/512);
  EXPECT_EQ(closed.record.epoch, 2);
  EXPECT_EQ(closed.record.step, 12);
  EXPECT_EQ(closed.record.steps, 2);
  EXPECT_EQ(closed.record.train_seconds, 5.5);  // the evaluation's
  EXPECT_EQ(closed.record.train_loss, 0.375);
  EXPECT_EQ(closed.record.test_loss, 0.3);
  EXPECT_EQ(closed.record.test_accuracy, 0.9);
  EXPECT_EQ(closed.record.images_per_sec, 256);  // 512 images in 2 s
  EXPECT_EQ(closed.line,
            "epoch 2/3 done: test accuracy 0.9000, test loss 0.3000, train loss 0.3750, "
            "256 images/s (all 4 workers), 2.0 s");
}

TEST(EpochMeter, TheNextEpochBeginsWhereTheLastEnded) {
  EpochMeter meter;
  meter.Begin({0, 0, 0.0});
  meter.AddStep(10, 1.0);
  (void)meter.End(1, 2, 1, {5, 5, 1.0}, Eval(0.5, 1, 1), 50);
  EXPECT_EQ(meter.start().step, 5);
  EXPECT_EQ(meter.start().train_seconds, 1.0);
  EXPECT_EQ(meter.examples(), 0);
  meter.AddStep(10, 3.0);
  const ClosedEpoch second = meter.End(2, 2, 1, {10, 10, 3.0}, Eval(0.6, 1, 3), 50);
  EXPECT_EQ(second.record.steps, 5);
  EXPECT_EQ(second.record.train_loss, 3.0);  // the first epoch's loss is gone
  EXPECT_EQ(second.record.images_per_sec, 25);
}

TEST(EpochMeter, StepsWithoutExamplesOrLossLeaveTheMeanAlone) {
  EpochMeter meter;
  meter.Begin({0, 0, 0.0});
  meter.AddStep(0, 9.0);           // an empty batch: a zero gradient of weight 0
  meter.AddStep(32, std::nullopt);  // a script that passed no loss
  meter.AddStep(32, 2.0);
  EXPECT_EQ(meter.examples(), 64);
  EXPECT_EQ(meter.End(1, 1, 1, {3, 3, 1.0}, Eval(0, 0, 1), 64).record.train_loss, 2.0);
}

TEST(EpochMeter, ADivergedLossShowsInTheMean) {
  EpochMeter meter;
  meter.Begin({0, 0, 0.0});
  meter.AddStep(8, 1.0);
  meter.AddStep(8, std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(meter.End(1, 1, 1, {2, 2, 1.0}, Eval(0, 0, 1), 16).record.train_loss));
}

TEST(EpochMeter, NoTimeNoRateAndDynamicWorkersAreNotCounted) {
  EpochMeter meter;
  meter.Begin({0, 0, 2.0});
  const ClosedEpoch closed = meter.End(1, 1, /*workers=*/0, {0, 0, 2.0}, Eval(0, 0, 0), 100);
  EXPECT_EQ(closed.record.train_loss, 0);
  EXPECT_EQ(closed.record.images_per_sec, 0);
  EXPECT_NE(closed.line.find("(all the workers), 0.0 s"), std::string::npos) << closed.line;
}

}  // namespace
}  // namespace pstrain

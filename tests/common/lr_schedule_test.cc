// Each schedule against values computed by hand from PyTorch's definitions
// (StepLR, CosineAnnealingLR's closed form) and Goyal et al.'s linear
// warm-up; and what a job from the network may not ask for.

#include "common/lr_schedule.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

proto::JobConfig Job(const std::string& kind, double lr, int64_t warmup = 0) {
  proto::JobConfig job;
  job.set_learning_rate(lr);
  job.set_lr_schedule(kind);
  job.set_warmup_steps(warmup);
  return job;
}

TEST(LrSchedule, ConstantIsTheLearningRate) {
  auto s = LrSchedule::FromJob(Job("", 0.1));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->At(0), 0.1);
  EXPECT_DOUBLE_EQ(s->At(1'000'000), 0.1);
}

TEST(LrSchedule, StepDecaysByGammaEveryStepSize) {
  proto::JobConfig job = Job("step", 0.1);
  job.set_lr_step_size(30);
  job.set_lr_gamma(0.1);
  auto s = LrSchedule::FromJob(job);
  ASSERT_TRUE(s.ok()) << s.status();
  // StepLR(step_size=30, gamma=0.1): 0.1 for 0..29, 0.01 for 30..59, ...
  EXPECT_DOUBLE_EQ(s->At(0), 0.1);
  EXPECT_DOUBLE_EQ(s->At(29), 0.1);
  EXPECT_NEAR(s->At(30), 0.01, 1e-15);
  EXPECT_NEAR(s->At(59), 0.01, 1e-15);
  EXPECT_NEAR(s->At(60), 0.001, 1e-15);
}

TEST(LrSchedule, CosineFollowsTheClosedForm) {
  proto::JobConfig job = Job("cosine", 0.2);
  job.set_min_lr(0.02);
  job.set_schedule_updates(100);
  auto s = LrSchedule::FromJob(job);
  ASSERT_TRUE(s.ok()) << s.status();
  // eta_min + (lr - eta_min)(1 + cos(pi t / T)) / 2
  EXPECT_DOUBLE_EQ(s->At(0), 0.2);
  EXPECT_NEAR(s->At(50), 0.02 + 0.18 * 0.5, 1e-15);       // cos(pi/2) = 0
  EXPECT_NEAR(s->At(25), 0.02 + 0.18 * (1 + 0.70710678118654752) / 2, 1e-12);
  EXPECT_NEAR(s->At(100), 0.02, 1e-15);
  EXPECT_NEAR(s->At(150), 0.02, 1e-15);  // past the end: stays at min_lr
}

TEST(LrSchedule, WarmUpRampsLinearlyThenTheScheduleStartsFromZero) {
  proto::JobConfig job = Job("cosine", 0.4, /*warmup=*/4);
  job.set_schedule_updates(104);
  auto s = LrSchedule::FromJob(job);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->At(0), 0.1);
  EXPECT_DOUBLE_EQ(s->At(1), 0.2);
  EXPECT_DOUBLE_EQ(s->At(3), 0.4);
  EXPECT_DOUBLE_EQ(s->At(4), 0.4);                 // cosine's u = 0
  EXPECT_NEAR(s->At(54), 0.2, 1e-15);              // u = 50 of T = 100
  EXPECT_THAT(s->Describe(), ::testing::HasSubstr("warm-up 4 updates"));
}

TEST(LrSchedule, RefusesWhatAJobMayNotAskFor) {
  proto::JobConfig unknown = Job("exponential", 0.1);
  EXPECT_FALSE(LrSchedule::FromJob(unknown).ok());
  proto::JobConfig no_step = Job("step", 0.1);
  EXPECT_FALSE(LrSchedule::FromJob(no_step).ok());
  proto::JobConfig bad_gamma = Job("step", 0.1);
  bad_gamma.set_lr_step_size(10);
  bad_gamma.set_lr_gamma(-1);
  EXPECT_FALSE(LrSchedule::FromJob(bad_gamma).ok());
  proto::JobConfig no_total = Job("cosine", 0.1);
  EXPECT_FALSE(LrSchedule::FromJob(no_total).ok());
  proto::JobConfig min_above = Job("cosine", 0.1);
  min_above.set_schedule_updates(10);
  min_above.set_min_lr(0.5);
  EXPECT_FALSE(LrSchedule::FromJob(min_above).ok());
  EXPECT_FALSE(LrSchedule::FromJob(Job("", 0.1, -3)).ok());
  EXPECT_FALSE(LrSchedule::FromJob(Job("", 0.0)).ok());
}

}  // namespace
}  // namespace pstrain

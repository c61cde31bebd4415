// Parameter groups and a step's settings (common/param_groups.h): a shard
// cut into its tensors' segments, and the settings a push carries checked
// as bytes from the network are.

#include "common/param_groups.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

proto::JobConfig Layout(std::vector<std::pair<int64_t, int>> tensors) {
  proto::JobConfig job;
  int i = 0;
  for (const auto& [size, group] : tensors) {
    proto::TensorLayout* t = job.add_layout();
    t->set_name("t" + std::to_string(i++));
    t->set_size(size);
    t->set_group(group);
  }
  return job;
}

TEST(SegmentsOf, CutsTheShardAtItsTensorsWithTheirGroups) {
  // Tensors of 3, 4 and 2 floats; the shard [2, 8) holds the first's last
  // float, all of the second and the third's first.
  const std::vector<TensorSegment> s = SegmentsOf(Layout({{3, 0}, {4, 1}, {2, 0}}), {2, 8});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].begin, 0);
  EXPECT_EQ(s[0].end, 1);
  EXPECT_EQ(s[0].tensor, 0);
  EXPECT_EQ(s[1].begin, 1);
  EXPECT_EQ(s[1].end, 5);
  EXPECT_EQ(s[1].tensor, 1);
  EXPECT_EQ(s[1].group, 1);
  EXPECT_EQ(s[2].begin, 5);
  EXPECT_EQ(s[2].end, 6);
  EXPECT_EQ(s[2].tensor, 2);
  EXPECT_EQ(NumGroups(Layout({{3, 0}, {4, 1}, {2, 0}})), 2);
}

TEST(SegmentsOf, AJobWithoutALayoutIsOneSegment) {
  const std::vector<TensorSegment> s = SegmentsOf(proto::JobConfig(), {10, 20});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].begin, 0);
  EXPECT_EQ(s[0].end, 10);
  EXPECT_EQ(s[0].tensor, -1);
  EXPECT_EQ(NumGroups(proto::JobConfig()), 1);
}

proto::StepSettings Settings(int groups, std::vector<int32_t> absent = {}) {
  proto::StepSettings s;
  for (int g = 0; g < groups; ++g) {
    proto::GroupSettings* gs = s.add_groups();
    gs->set_lr(0.1 * (g + 1));
    gs->set_momentum(0.9);
  }
  *s.mutable_absent() = {absent.begin(), absent.end()};
  return s;
}

TEST(StepOptionsFrom, TakesEachGroupsSettingsAndTheAbsentTensors) {
  const proto::JobConfig job = Layout({{3, 0}, {4, 1}, {2, 0}});
  OptimizerConfig sgd;
  auto options = StepOptionsFrom(Settings(2, {0, 2}), job, sgd);
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_EQ(options->groups.size(), 2u);
  EXPECT_DOUBLE_EQ(options->lrs[1], 0.2);
  EXPECT_DOUBLE_EQ(options->groups[1].momentum, 0.9);
  EXPECT_TRUE(options->Absent(2));
  EXPECT_FALSE(options->Absent(1));
  // A warm-up's first lr is 0.
  proto::StepSettings zero = Settings(2);
  zero.mutable_groups(0)->set_lr(0.0);
  EXPECT_TRUE(StepOptionsFrom(zero, job, sgd).ok());
}

TEST(StepOptionsFrom, RefusesWhatTheOptimizerCannotRunNamingTheGroup) {
  const proto::JobConfig job = Layout({{3, 0}, {4, 1}});
  OptimizerConfig sgd;
  EXPECT_THAT(StepOptionsFrom(Settings(1), job, sgd).status().message(),
              HasSubstr("1 parameter groups; the job has 2"));
  proto::StepSettings bad = Settings(2);
  bad.mutable_groups(1)->set_momentum(1.5);
  EXPECT_THAT(StepOptionsFrom(bad, job, sgd).status().message(),
              HasSubstr("parameter group 1: optimizer sgd: momentum"));
  bad = Settings(2);
  bad.mutable_groups(0)->set_lr(-1);
  EXPECT_THAT(StepOptionsFrom(bad, job, sgd).status().message(), HasSubstr("lr -1"));
  bad.mutable_groups(0)->set_lr(std::nan(""));
  EXPECT_FALSE(StepOptionsFrom(bad, job, sgd).ok());
  for (const std::vector<int32_t>& absent : {std::vector<int32_t>{1, 0},
                                             std::vector<int32_t>{2}, std::vector<int32_t>{-1},
                                             std::vector<int32_t>{0, 0}}) {
    EXPECT_THAT(StepOptionsFrom(Settings(2, absent), job, sgd).status().message(),
                HasSubstr("absent tensor"));
  }
  EXPECT_FALSE(AbsentTensors(Settings(0, {5}), job).ok());
}

TEST(ValidateLayoutGroups, RefusesAGroupOutOfRangeOrAnEmptyTensor) {
  EXPECT_TRUE(ValidateLayoutGroups(Layout({{3, 0}, {4, 1}})).ok());
  EXPECT_THAT(ValidateLayoutGroups(Layout({{3, kMaxGroups}})).message(), HasSubstr("group"));
  EXPECT_THAT(ValidateLayoutGroups(Layout({{3, -1}})).message(), HasSubstr("group"));
  EXPECT_THAT(ValidateLayoutGroups(Layout({{0, 0}})).message(), HasSubstr("size 0"));
}

}  // namespace
}  // namespace pstrain

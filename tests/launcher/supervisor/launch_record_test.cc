// RUN_DIR/launch.json and `pstrain launch --resume`: recorded flags come
// back when the command line leaves them out, a flag given again must agree
// (after parsing), and only the run's length and its output may change.

#include "launcher/supervisor/launch_record.h"

#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "common/file_util.h"
#include "flags/task_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"
#include "worker/train_flags.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::set<std::string> Given(std::vector<std::string> args) {
  std::vector<char*> argv = {const_cast<char*>("pstrain")};
  for (std::string& a : args) argv.push_back(a.data());
  return FlagsOnCommandLine(static_cast<int>(argv.size()), argv.data());
}

class LaunchRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("record");
    ASSERT_TRUE(WriteLaunchRecord(dir_, {"--mode=async", "--lr=0.1", "--max_steps=20", "--seed=7",
                                          "--wire=topk:0.05"},
                                  "pstrain launch ...", {}).ok());
  }
  absl::FlagSaver saver_;  // each test's flag changes are undone
  std::string dir_;
};

TEST(FlagsOnCommandLine, NamesEveryFlagGivenInAnyForm) {
  EXPECT_THAT(Given({"launch", "--lr=0.1", "-seed", "3", "--nonesterov", "--", "--mode=async"}),
              UnorderedElementsAre("lr", "seed", "nesterov"));
}

TEST_F(LaunchRecordTest, RecordedFlagsComeBackWhenNotGiven) {
  ASSERT_TRUE(ApplyLaunchRecord(dir_, Given({"launch"})).ok());
  auto o = TrainOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->mode, proto::ASYNC);
  EXPECT_EQ(o->lr, 0.1);
  EXPECT_EQ(o->max_steps, 20);
  EXPECT_EQ(o->seed, 7u);
  EXPECT_EQ(o->wire, "topk:0.05");
}

TEST_F(LaunchRecordTest, AGivenFlagMustAgreeButTheRunMayGrowLonger) {
  absl::FindCommandLineFlag("lr")->ParseFrom("0.10", nullptr);  // as parsed from argv
  absl::FindCommandLineFlag("max_steps")->ParseFrom("40", nullptr);
  ASSERT_TRUE(ApplyLaunchRecord(dir_, Given({"--lr=0.10", "--max_steps=40"})).ok());
  EXPECT_EQ(TrainOptionsFromFlags()->max_steps, 40);

  absl::FindCommandLineFlag("mode")->ParseFrom("sync", nullptr);
  const absl::Status s = ApplyLaunchRecord(dir_, Given({"--mode=sync"})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--mode=sync disagrees"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--mode=async"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(LaunchRecordPath(dir_)));

  // The push encoding is part of the run: resumed as it was recorded.
  absl::FindCommandLineFlag("wire")->ParseFrom("bf16", nullptr);
  EXPECT_THAT(std::string(ApplyLaunchRecord(dir_, Given({"--wire=bf16"})).status().message()),
              HasSubstr("--wire=bf16 disagrees"));
}

TEST_F(LaunchRecordTest, AJobOfTheWorkerBinaryResumesWithIt) {
  auto recorded = ApplyLaunchRecord(dir_, Given({"launch"}));
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  auto command = CommandToResume(*recorded, dir_);
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_TRUE(command->argv.empty());
}

TEST_F(LaunchRecordTest, AScriptsJobResumesWithItsCommandInItsDirectory) {
  ASSERT_TRUE(WriteLaunchRecord(dir_, {"--mode=sync"}, "pstrain launch ... -- ./train.sh --epochs=2",
                                {{"./train.sh", "--epochs=2"}, "/home/u/job"})
                  .ok());
  auto recorded = ApplyLaunchRecord(dir_, Given({"launch"}));
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_THAT(recorded->command.argv, ::testing::ElementsAre("./train.sh", "--epochs=2"));
  auto command = CommandToResume(*recorded, dir_);
  ASSERT_TRUE(command.ok()) << command.status();
  // The program by its path from the recorded directory; the arguments as
  // they were (the command runs there).
  EXPECT_THAT(command->argv, ::testing::ElementsAre("/home/u/job/./train.sh", "--epochs=2"));
  EXPECT_EQ(command->working_dir, "/home/u/job");
}

TEST_F(LaunchRecordTest, ACommandThatCannotRunAgainAsItDidIsRefusedSayingWhatToDo) {
  // Without an absolute directory.
  for (const char* dir : {"", "job"}) {
    ASSERT_TRUE(WriteLaunchRecord(dir_, {}, "pstrain launch -- train.py", {{"train.py"}, dir}).ok());
    auto recorded = ApplyLaunchRecord(dir_, {});
    ASSERT_TRUE(recorded.ok()) << recorded.status();  // a command given again replaces it
    const absl::Status damaged = CommandToResume(*recorded, dir_).status();
    EXPECT_EQ(damaged.code(), absl::StatusCode::kDataLoss) << dir;
    EXPECT_THAT(std::string(damaged.message()), HasSubstr("give the command again after --"));
  }
  // A script's job recorded by a pstrain that kept no command: never the
  // C++ worker in its place.
  ASSERT_TRUE(WriteLaunchRecord(dir_, {}, "pstrain launch --cluster_spec=s.json -- python3 t.py", {})
                  .ok());
  auto recorded = ApplyLaunchRecord(dir_, {});
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  const absl::Status older = CommandToResume(*recorded, dir_).status();
  EXPECT_EQ(older.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(older.message()), HasSubstr("give the command again after --"));
}

TEST_F(LaunchRecordTest, AMissingOrDamagedRecordIsRefusedNamingTheFile) {
  const absl::Status missing = ApplyLaunchRecord(dir_ + "/nothing", {}).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("launch.json"));
  ASSERT_TRUE(WriteFileAtomic(LaunchRecordPath(dir_), "{\"flags\": [\"--lr\"]}").ok());
  const absl::Status damaged = ApplyLaunchRecord(dir_, {}).status();
  EXPECT_EQ(damaged.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(damaged.message()), HasSubstr(LaunchRecordPath(dir_)));
  ASSERT_TRUE(WriteFileAtomic(LaunchRecordPath(dir_), "{\"flags\": [\"--no_such_flag=1\"]}").ok());
  EXPECT_THAT(std::string(ApplyLaunchRecord(dir_, {}).status().message()), HasSubstr("--no_such_flag"));
}

}  // namespace
}  // namespace pstrain

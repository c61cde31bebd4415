// --preset expands into the training flags, and a flag on the command line
// wins over the preset's value.

#include "worker/presets.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "flags/task_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/train_flags.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// Parses `args` as this process's command line, expands the preset, and
// returns the training options. Flags the test does not give are reset.
absl::StatusOr<TrainOptions> Parse(const std::vector<std::string>& args) {
  absl::FlagSaver restore_after;
  std::vector<std::string> all = {"presets_test"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  if (absl::Status s = ApplyPresetFlag(FlagsOnCommandLine(static_cast<int>(argv.size()), argv.data()));
      !s.ok()) {
    return s;
  }
  return TrainOptionsFromFlags();
}

TEST(Presets, Mnist99SetsTheModelOptimizerScheduleBatchAndEpochs) {
  auto o = Parse({"--preset=mnist_99"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->model, "cnn_large");
  EXPECT_EQ(o->optimizer, proto::ADAM);
  EXPECT_EQ(o->lr_schedule, "cosine");
  EXPECT_EQ(o->mode, proto::SYNC);
  EXPECT_GT(o->batch_size, 0);
  EXPECT_GT(o->epochs, 0);
}

TEST(Presets, AFlagOnTheCommandLineWinsOverThePreset) {
  auto o = Parse({"--preset=mnist_99", "--epochs=5", "--batch_size", "32"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->model, "cnn_large");
  EXPECT_EQ(o->epochs, 5);
  EXPECT_EQ(o->batch_size, 32);
}

TEST(Presets, AnUnknownPresetIsRefusedNamingTheKnownOnes) {
  auto o = Parse({"--preset=mnist_100"});
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status().message(), HasSubstr("--preset=mnist_100: no such preset (known: mnist_99"));
}

TEST(Presets, EveryPresetNamesOnlyTrainingFlagsThatParse) {
  for (const Preset& p : Presets()) {
    auto o = Parse({"--preset=" + p.name});
    EXPECT_TRUE(o.ok()) << p.name << ": " << o.status();
  }
}

}  // namespace
}  // namespace pstrain

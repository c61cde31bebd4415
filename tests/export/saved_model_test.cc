// LoadSavedModel: final_params.f32 and checkpoints read back from run
// directories written here, and every damaged or missing piece refused
// naming the file.

#include "export/saved_model.h"

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/shard_checkpoint.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/checkpoint.pb.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMnistCnnParams = 21840;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> Ramp(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

void WriteLaunchJson(const std::string& run_dir, const std::vector<std::string>& flags) {
  proto::LaunchRecord r;
  for (const std::string& f : flags) r.add_flags(f);
  ASSERT_TRUE(WriteFileAtomic(run_dir + "/launch.json", ToJson(r)).ok());
}

// Checkpoint `step` of `dir` with the model split at `split` into two
// Adam shards; returns the parameters.
std::vector<float> WriteCheckpoint(const std::string& dir, int64_t step, uint64_t split,
                                   float start) {
  const std::vector<float> params = Ramp(kMnistCnnParams, start);
  proto::CheckpointManifest m;
  m.set_format_version(proto::CHECKPOINT_FORMAT_V1);
  m.set_step(step);
  m.set_num_params(kMnistCnnParams);
  m.add_flags("--model=mnist_cnn");
  m.add_flags("--dataset=mnist");
  const uint64_t bounds[3] = {0, split, static_cast<uint64_t>(kMnistCnnParams)};
  for (int k = 0; k < 2; ++k) {
    ShardCheckpoint c;
    c.header.set_step(step);
    c.header.set_shard_index(k);
    c.header.set_num_shards(2);
    c.header.set_range_begin(bounds[k]);
    c.header.set_range_end(bounds[k + 1]);
    // An Adam shard: the parameters, then two slots that export must skip.
    c.header.mutable_job()->set_optimizer(proto::ADAM);
    c.header.mutable_job()->set_beta1(0.9);
    c.header.mutable_job()->set_beta2(0.999);
    c.header.mutable_job()->set_eps(1e-8);
    c.state.assign(params.begin() + static_cast<std::ptrdiff_t>(bounds[k]),
                   params.begin() + static_cast<std::ptrdiff_t>(bounds[k + 1]));
    c.state.resize(3 * (bounds[k + 1] - bounds[k]), 7.0f);
    const std::string file = ShardFileName(step, k, 2);
    EXPECT_TRUE(WriteShardCheckpoint(absl::StrCat(dir, "/", file), &c).ok());
    proto::SavedShard* s = m.add_shards();
    s->set_shard_index(k);
    s->set_file(file);
    s->set_checksum(c.header.payload_checksum());
  }
  EXPECT_TRUE(WriteFileAtomic(absl::StrCat(dir, "/", ManifestFileName(step)), ToJson(m)).ok());
  return params;
}

class SavedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = testing::MakeTempDir("saved_model");
    WriteLaunchJson(run_,
                    {"--model=mnist_cnn", "--dataset=fashion_mnist", "--data_dir=data/fashion"});
  }
  std::string run_;
};

TEST_F(SavedModelTest, ReadsTheFinalParametersAndWhatTheRunRecorded) {
  const std::vector<float> params = Ramp(kMnistCnnParams, 1.0f);
  ASSERT_TRUE(WriteFileAtomic(run_ + "/final_params.f32", Bytes(params)).ok());
  auto m = LoadSavedModel(run_, "");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->model, "mnist_cnn");
  EXPECT_EQ(m->dataset, "fashion_mnist");
  EXPECT_EQ(m->data_dir, "data/fashion");
  EXPECT_EQ(m->params, params);
  EXPECT_EQ(m->step, -1);
  EXPECT_EQ(m->source, run_ + "/final_params.f32");
  EXPECT_EQ(m->recorded_accuracy, -1);  // no summary.json
}

TEST_F(SavedModelTest, ARunStartedByHandIsKnownByItsSummary) {
  const std::string dir = testing::MakeTempDir("by_hand");
  proto::RunSummary summary;
  summary.set_model("cnn_large");
  summary.set_final_test_accuracy(0.75);
  ASSERT_TRUE(WriteFileAtomic(dir + "/summary.json", ToJson(summary)).ok());
  auto m = LoadSavedModel(dir, "");
  EXPECT_TRUE(absl::IsNotFound(m.status())) << m.status();  // no final_params.f32 yet
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("--checkpoint=latest"));
  ASSERT_TRUE(WriteFileAtomic(dir + "/final_params.f32", Bytes(Ramp(1199882, 0))).ok());
  m = LoadSavedModel(dir, "");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->model, "cnn_large");
  EXPECT_EQ(m->recorded_accuracy, 0.75);
}

TEST_F(SavedModelTest, AFinalParametersFileOfTheWrongSizeIsRefusedNamingIt) {
  ASSERT_TRUE(
      WriteFileAtomic(run_ + "/final_params.f32", Bytes(Ramp(kMnistCnnParams - 1, 0))).ok());
  auto m = LoadSavedModel(run_, "");
  EXPECT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(run_ + "/final_params.f32"));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("21840 parameters"));
}

TEST_F(SavedModelTest, MissingRunDirectoryOrUnknownModelIsBadInput) {
  EXPECT_TRUE(absl::IsNotFound(LoadSavedModel(run_ + "/nope", "").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(LoadSavedModel("", "").status()));
  const std::string dir = testing::MakeTempDir("no_record");
  ASSERT_TRUE(WriteFileAtomic(dir + "/final_params.f32", "1234").ok());
  auto m = LoadSavedModel(dir, "");
  EXPECT_TRUE(absl::IsInvalidArgument(m.status()));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("which model"));
}

TEST_F(SavedModelTest, PutsACheckpointsShardsTogetherByTheirRanges) {
  const std::string dir = run_ + "/checkpoints";
  const std::vector<float> at7 = WriteCheckpoint(dir, 7, 1000, 3.0f);
  const std::vector<float> at9 = WriteCheckpoint(dir, 9, 20000, 5.0f);
  for (const std::string& which : std::vector<std::string>{"7", "ckpt-7", dir + "/ckpt-7"}) {
    auto m = LoadSavedModel(run_, which);
    ASSERT_TRUE(m.ok()) << which << ": " << m.status();
    EXPECT_EQ(m->params, at7) << which;
    EXPECT_EQ(m->step, 7);
    EXPECT_EQ(m->model, "mnist_cnn");
    EXPECT_EQ(m->dataset, "mnist");  // the manifest's flags, not launch.json's
  }
  auto latest = LoadSavedModel(run_, "latest");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 9);
  EXPECT_EQ(latest->params, at9);
  // The newest with a damaged manifest: latest is the one before.
  ASSERT_TRUE(WriteFileAtomic(absl::StrCat(dir, "/", ManifestFileName(9)), "{ not json").ok());
  latest = LoadSavedModel(run_, "latest");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 7);
  auto named = LoadSavedModel(run_, "ckpt-9");
  EXPECT_TRUE(absl::IsInvalidArgument(named.status())) << named.status();
  EXPECT_THAT(std::string(named.status().message()), HasSubstr("manifest.json"));
}

TEST_F(SavedModelTest, ADamagedShardIsRefusedNamingTheFile) {
  const std::string dir = run_ + "/checkpoints";
  WriteCheckpoint(dir, 7, 1000, 3.0f);
  const std::string shard = absl::StrCat(dir, "/", ShardFileName(7, 1, 2));
  std::string bytes = *ReadFileToString(shard);
  bytes[bytes.size() - 5] ^= 0x40;
  ASSERT_TRUE(WriteFileAtomic(shard, bytes).ok());
  auto m = LoadSavedModel(run_, "7");
  EXPECT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(shard));
  std::remove(shard.c_str());
  m = LoadSavedModel(run_, "7");
  EXPECT_TRUE(absl::IsNotFound(m.status())) << m.status();
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(shard));
}

TEST_F(SavedModelTest, ShardsThatDoNotCoverTheModelAreRefused) {
  const std::string dir = run_ + "/checkpoints";
  WriteCheckpoint(dir, 7, 1000, 3.0f);
  // The manifest names shard 0 twice: [0, 1000) covered twice, the rest not.
  proto::CheckpointManifest m;
  ASSERT_TRUE(
      ParseJsonMessage(*ReadFileToString(absl::StrCat(dir, "/", ManifestFileName(7))), "m", &m)
          .ok());
  *m.mutable_shards(1) = m.shards(0);
  ASSERT_TRUE(WriteFileAtomic(absl::StrCat(dir, "/", ManifestFileName(7)), ToJson(m)).ok());
  auto s = LoadSavedModel(run_, "7");
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("do not cover the model"));
  // A file name that leaves the checkpoint directory.
  m.mutable_shards(1)->set_file("../../../etc/passwd");
  ASSERT_TRUE(WriteFileAtomic(absl::StrCat(dir, "/", ManifestFileName(7)), ToJson(m)).ok());
  s = LoadSavedModel(run_, "7");
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("bad shard file name"));
}

TEST_F(SavedModelTest, ACheckpointThatIsNotThereOrNotACheckpointNameIsBadInput) {
  EXPECT_TRUE(absl::IsNotFound(LoadSavedModel(run_, "latest").status()));
  EXPECT_TRUE(absl::IsNotFound(LoadSavedModel(run_, "ckpt-3").status()));
  auto m = LoadSavedModel(run_, "yesterday");
  EXPECT_TRUE(absl::IsInvalidArgument(m.status()));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("expected latest, ckpt-<step>"));
}

}  // namespace
}  // namespace pstrain

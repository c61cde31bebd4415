// The chief's side of checkpoints without a cluster: when a save is due,
// and which manifests it refuses (damaged, or of another job), each time
// naming the file.

#include "worker/checkpointer.h"

#include <string>

#include "common/checkpoint_dir.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  std::string pattern = ::testing::TempDir() + "/manifestXXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

CheckpointerOptions Job() {
  CheckpointerOptions o;
  o.job.set_mode(proto::SYNC);
  o.job.set_num_workers(2);
  o.job.set_learning_rate(0.02);
  o.job.set_momentum(0.5);
  o.job.set_seed(1);
  o.job.set_batch_size(128);
  o.job.set_steps_per_epoch(235);
  o.plan_fingerprint = 0xabc;
  o.num_params = 21840;
  o.num_shards = 2;
  return o;
}

proto::CheckpointManifest Manifest(int64_t step, const CheckpointerOptions& o) {
  proto::CheckpointManifest m;
  m.set_format_version(proto::CHECKPOINT_FORMAT_V1);
  m.set_step(step);
  m.set_plan_fingerprint(o.plan_fingerprint);
  m.set_num_params(o.num_params);
  *m.mutable_job() = o.job;
  for (int k = 0; k < o.num_shards; ++k) m.add_shards()->set_shard_index(k);
  for (int r = 0; r < o.job.num_workers(); ++r) m.add_workers()->set_rank(r);
  return m;
}

std::string Write(const std::string& dir, int64_t step, const std::string& text) {
  EXPECT_TRUE(MakeDirs(CheckpointPath(dir, step)).ok());
  const std::string path = dir + "/" + ManifestFileName(step);
  EXPECT_TRUE(WriteFileAtomic(path, text).ok());
  return path;
}

TEST(Checkpointer, SavesEveryNStepsAndOnceAtTheEnd) {
  CheckpointerOptions o = Job();
  o.every_steps = 10;
  Checkpointer c(o, nullptr);
  EXPECT_FALSE(c.Due(5, false));
  EXPECT_TRUE(c.Due(10, false));
  EXPECT_TRUE(c.Due(20, false));
  EXPECT_TRUE(c.Due(23, /*done=*/true));
  Checkpointer off(Job(), nullptr);
  EXPECT_FALSE(off.Due(10, false));
  EXPECT_FALSE(off.Due(10, true));
}

TEST(Checkpointer, SavesEveryTSecondsOfTheClock) {
  FakeClock clock;
  CheckpointerOptions o = Job();
  o.every_s = 30;
  o.clock = &clock;
  Checkpointer c(o, nullptr);
  EXPECT_FALSE(c.Due(7, false));
  clock.AdvanceSeconds(29.9);
  EXPECT_FALSE(c.Due(8, false));
  clock.AdvanceSeconds(0.1);
  EXPECT_TRUE(c.Due(9, false));
}

TEST(Checkpointer, AManifestReadsBackAndMatchesItsJob) {
  const std::string dir = TempDir();
  const CheckpointerOptions o = Job();
  const std::string path = Write(dir, 20, ToJson(Manifest(20, o)));
  auto m = ReadManifest(dir, 20);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(CheckManifest(*m, o, path).ok());
}

TEST(Checkpointer, ADamagedManifestIsRefusedNamingTheFile) {
  const std::string dir = TempDir();
  const std::string full = ToJson(Manifest(20, Job()));
  for (const std::string& bad : {full.substr(0, full.size() / 2), std::string("garbage"),
                                 ToJson(Manifest(30, Job()))}) {
    const std::string path = Write(dir, 20, bad);
    auto m = ReadManifest(dir, 20);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(path));
  }
  EXPECT_EQ(ReadManifest(dir, 40).status().code(), absl::StatusCode::kNotFound);
}

TEST(Checkpointer, AManifestOfAnotherJobIsRefusedNamingTheFieldAndTheFile) {
  const CheckpointerOptions o = Job();
  struct Case {
    const char* field;
    proto::CheckpointManifest m;
  };
  std::vector<Case> cases = {{"the plan", Manifest(20, o)},      {"the number of workers", Manifest(20, o)},
                             {"the mode", Manifest(20, o)},      {"the seed", Manifest(20, o)},
                             {"the optimizer", Manifest(20, o)}, {"the batch size", Manifest(20, o)},
                             {"the optimizer is lr 0.02, adam (betas 0.9", Manifest(20, o)}};
  cases[0].m.set_plan_fingerprint(0xdef);
  cases[1].m.mutable_job()->set_num_workers(3);
  cases[2].m.mutable_job()->set_mode(proto::ASYNC);
  cases[3].m.mutable_job()->set_seed(2);
  cases[4].m.mutable_job()->set_learning_rate(0.1);
  cases[5].m.mutable_job()->set_batch_size(64);
  // An Adam run's checkpoint for an SGD job (the optimizer, not only its
  // hyperparameters).
  proto::JobConfig* adam = cases[6].m.mutable_job();
  adam->set_optimizer(proto::ADAM);
  adam->set_beta1(0.9);
  adam->set_beta2(0.999);
  adam->set_eps(1e-8);
  for (const Case& k : cases) {
    const absl::Status s = CheckManifest(k.m, o, "ckpt-20/manifest.json");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << k.field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.field));
    EXPECT_THAT(std::string(s.message()), HasSubstr("ckpt-20/manifest.json"));
  }
  proto::CheckpointManifest missing_shard = Manifest(20, o);
  missing_shard.mutable_shards()->RemoveLast();
  EXPECT_EQ(CheckManifest(missing_shard, o, "m").code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pstrain

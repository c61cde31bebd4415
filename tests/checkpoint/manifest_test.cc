// The checkpoint manifest: it reads back, and a damaged one or one of
// another job is refused naming the file (and the field).

#include "checkpoint/manifest.h"

#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
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

CheckpointJob Job() {
  CheckpointJob o;
  o.config.set_mode(proto::SYNC);
  o.config.set_num_workers(2);
  o.config.set_learning_rate(0.02);
  o.config.set_momentum(0.5);
  o.config.set_seed(1);
  o.config.set_batch_size(128);
  o.config.set_steps_per_epoch(235);
  o.plan_fingerprint = 0xabc;
  o.num_params = 21840;
  o.num_shards = 2;
  return o;
}

proto::CheckpointManifest Manifest(int64_t step, const CheckpointJob& o) {
  proto::CheckpointManifest m;
  m.set_format_version(proto::CHECKPOINT_FORMAT_V1);
  m.set_step(step);
  m.set_plan_fingerprint(o.plan_fingerprint);
  m.set_num_params(o.num_params);
  *m.mutable_job() = o.config;
  for (int k = 0; k < o.num_shards; ++k) m.add_shards()->set_shard_index(k);
  for (int r = 0; r < o.config.num_workers(); ++r) m.add_workers()->set_rank(r);
  return m;
}

std::string Write(const std::string& dir, int64_t step, const std::string& text) {
  EXPECT_TRUE(MakeDirs(CheckpointPath(dir, step)).ok());
  const std::string path = dir + "/" + ManifestFileName(step);
  EXPECT_TRUE(WriteFileAtomic(path, text).ok());
  return path;
}

TEST(Manifest, AManifestReadsBackAndMatchesItsJob) {
  const std::string dir = TempDir();
  const CheckpointJob o = Job();
  const std::string path = Write(dir, 20, ToJson(Manifest(20, o)));
  auto m = ReadManifest(dir, 20);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(CheckManifest(*m, o, path).ok());
}

TEST(Manifest, AWrittenManifestRecordsTheJobAndReadsBackEqual) {
  const std::string dir = TempDir();
  CheckpointJob job = Job();
  job.config.set_mode(proto::ASYNC);
  job.flags = {"--mode=async", "--seed=1"};
  std::vector<proto::SavedShard> shards(2);
  for (int k = 0; k < 2; ++k) {
    shards[k].set_shard_index(k);
    shards[k].set_checksum(100 + k);
    // Rank 1 finished 250 steps on shard 0 and 240 on shard 1.
    shards[k].add_worker_steps(260);
    shards[k].add_worker_steps(250 - 10 * k);
  }
  const proto::CheckpointManifest m = MakeManifest(job, 260, shards, "2026-01-01T00:00:00Z");
  ASSERT_EQ(m.workers_size(), 2);
  EXPECT_EQ(m.workers(0).step(), 260);  // the chief: its own step
  EXPECT_EQ(m.workers(1).step(), 240);  // async: the smallest over the shards
  EXPECT_EQ(m.workers(1).epoch(), 1);
  EXPECT_EQ(m.workers(1).step_in_epoch(), 5);
  EXPECT_EQ(m.mode(), "async");
  ASSERT_TRUE(WriteManifest(dir, m).ok());
  auto back = ReadManifest(dir, 260);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), ToJson(m));
  EXPECT_TRUE(CheckManifest(*back, job, "m").ok());
}

TEST(Manifest, ADamagedManifestIsRefusedNamingTheFile) {
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

TEST(Manifest, AManifestOfAnotherJobIsRefusedNamingTheFieldAndTheFile) {
  const CheckpointJob o = Job();
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

TEST(RecordedFlag, TakesTheLastValueOfTheNamedFlag) {
  EXPECT_EQ(RecordedFlag({"--model=a", "--models=b", "--model=c"}, "model"), "c");
  EXPECT_EQ(RecordedFlag({"--modelx=a"}, "model"), "");
  EXPECT_EQ(RecordedFlag({"--data_dir="}, "data_dir"), "");
}

}  // namespace
}  // namespace pstrain

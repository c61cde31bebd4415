// CheckpointStore: SAVE's and RESTORE's files of one shard, on disk.

#include "ps_server/checkpoint_store.h"

#include <limits>
#include <string>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// Shard 1 of 2, floats [4, 8), SGD with momentum: parameters then the buffer.
ShardCheckpoint At(int64_t step, float value) {
  ShardCheckpoint c;
  proto::ShardCheckpointHeader& h = c.header;
  h.set_step(step);
  h.set_shard_index(1);
  h.set_num_shards(2);
  h.set_range_begin(4);
  h.set_range_end(8);
  h.set_version(step);
  h.set_updates(step);
  h.set_plan_fingerprint(0xF00D);
  h.mutable_job()->set_mode(proto::SYNC);
  h.mutable_job()->set_num_workers(2);
  h.mutable_job()->set_momentum(0.5);
  c.state.assign(8, value);
  return c;
}

// The RESTORE the chief sends for checkpoint `step`.
proto::Header RestoreOf(int64_t step, uint64_t checksum = 0) {
  proto::Header h;
  h.set_range_begin(4);
  h.set_range_end(8);
  h.set_plan_fingerprint(0xF00D);
  h.mutable_job()->set_mode(proto::SYNC);
  h.mutable_job()->set_num_workers(2);
  h.mutable_job()->set_momentum(0.5);
  h.mutable_restore()->set_step(step);
  h.mutable_restore()->set_checksum(checksum);
  return h;
}

TEST(CheckpointStore, ReadsBackWhatItSavedAndRemovesWhatTheChiefKeepsNoMore) {
  const std::string dir = testing::MakeTempDir("store");
  const CheckpointStore store(dir, /*shard_index=*/1);
  ASSERT_TRUE(store.enabled());
  uint64_t checksum = 0;
  for (int64_t step : {10, 20, 30}) {
    ShardCheckpoint c = At(step, static_cast<float>(step));
    // The chief keeps 2: at 30, from 20 on.
    auto saved = store.Save(&c, /*num_shards=*/2, /*keep_from_step=*/step == 30 ? 20 : 0);
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(saved->file(), "ckpt-" + std::to_string(step) + "/shard-1-of-2.ckpt");
    EXPECT_EQ(saved->version(), step);
    checksum = saved->checksum();
  }
  EXPECT_FALSE(FileExists(dir + "/ckpt-10/shard-1-of-2.ckpt"));  // pruned
  EXPECT_TRUE(FileExists(dir + "/ckpt-20/shard-1-of-2.ckpt"));
  auto loaded = store.Load(RestoreOf(30, checksum), 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->header.version(), 30);
  EXPECT_EQ(loaded->state, std::vector<float>(8, 30.0f));
}

TEST(CheckpointStore, RefusesAFileThatIsNotTheOneTheChiefNamesSayingWhich) {
  const std::string dir = testing::MakeTempDir("store");
  const CheckpointStore store(dir, 1);
  ShardCheckpoint c = At(20, 1.0f);
  auto saved = store.Save(&c, 2, 3);
  ASSERT_TRUE(saved.ok()) << saved.status();
  // Another checksum than the manifest's.
  auto wrong_sum = store.Load(RestoreOf(20, saved->checksum() + 1), 2);
  ASSERT_FALSE(wrong_sum.ok());
  EXPECT_THAT(std::string(wrong_sum.status().message()), HasSubstr("shard-1-of-2.ckpt"));
  // Another plan.
  proto::Header other_plan = RestoreOf(20);
  other_plan.set_plan_fingerprint(1);
  EXPECT_FALSE(store.Load(other_plan, 2).ok());
  // A checkpoint that is not there.
  auto missing = store.Load(RestoreOf(40), 2);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointStore, RefusesAFileWhoseValuesAreNotFinite) {
  const std::string dir = testing::MakeTempDir("store");
  const CheckpointStore store(dir, 1);
  ShardCheckpoint c = At(20, 1.0f);
  c.state[2] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(store.Save(&c, 2, 3).ok());
  auto loaded = store.Load(RestoreOf(20), 2);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointStore, WithoutADirectoryIsDisabled) {
  EXPECT_FALSE(CheckpointStore("", 0).enabled());
}

}  // namespace
}  // namespace pstrain

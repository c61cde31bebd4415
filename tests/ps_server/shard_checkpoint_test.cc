// A ps shard's checkpoint file: it reads back exactly what was written, and
// every kind of damage or mismatch is refused with an error that names the
// file (never a crash, never a silently wrong shard).

#include "ps_server/shard_checkpoint.h"

#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

ShardCheckpoint Sample() {
  ShardCheckpoint c;
  proto::ShardCheckpointHeader& h = c.header;
  h.set_step(20);
  h.set_shard_index(1);
  h.set_num_shards(2);
  h.set_range_begin(100);
  h.set_range_end(104);
  h.set_version(20);
  h.set_updates(19);
  h.set_plan_fingerprint(0xabc);
  h.set_job_id(0x10b);
  h.mutable_job()->set_mode(proto::SYNC);
  h.mutable_job()->set_num_workers(2);
  h.mutable_job()->set_momentum(0.5);
  h.mutable_stats()->set_gradients_received(40);
  h.add_worker_clocks(20);
  h.add_worker_clocks(20);
  c.params = {1.5f, -2.0f, 3.25f, 0.0f};
  c.momentum = {0.1f, 0.2f, -0.3f, 1e-30f};
  return c;
}

ShardCheckpointExpectation Expected(const ShardCheckpoint& c) {
  return {1, 2, 100, 104, 0xabc, c.header.payload_checksum(), &c.header.job()};
}

std::string Written(const std::string& name) {
  const std::string path = testing::MakeTempDir("ckpt") + "/" + name;
  ShardCheckpoint c = Sample();
  EXPECT_TRUE(WriteShardCheckpoint(path, &c).ok());
  return path;
}

// The file with byte `at` (from the end when negative) flipped.
std::string Damage(const std::string& path, long at) {
  std::string bytes = *ReadFileToString(path);
  const size_t i = at >= 0 ? static_cast<size_t>(at) : bytes.size() - static_cast<size_t>(-at);
  bytes[i] = static_cast<char>(bytes[i] ^ 0x40);
  EXPECT_TRUE(WriteFileAtomic(path, bytes).ok());
  return path;
}

TEST(ShardCheckpoint, ReadsBackExactlyWhatWasWritten) {
  const std::string path = testing::MakeTempDir("ckpt") + "/ckpt-20/shard-1-of-2.ckpt";
  ShardCheckpoint written = Sample();
  ASSERT_TRUE(WriteShardCheckpoint(path, &written).ok());  // makes ckpt-20/
  auto read = ReadShardCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->params, written.params);
  EXPECT_EQ(read->momentum, written.momentum);
  EXPECT_EQ(read->header.SerializeAsString(), written.header.SerializeAsString());
  EXPECT_EQ(read->header.format_version(), proto::CHECKPOINT_FORMAT_V1);
  EXPECT_EQ(read->header.payload_bytes(), 2 * 4 * sizeof(float));
  EXPECT_EQ(read->header.payload_checksum(), PayloadChecksum(written.params, written.momentum));
  EXPECT_TRUE(CheckShardCheckpoint(*read, Expected(*read), path).ok());
}

TEST(ShardCheckpoint, ADamagedPayloadIsRefusedNamingTheFile) {
  const std::string path = Damage(Written("p.ckpt"), -3);
  auto read = ReadShardCheckpoint(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("payload checksum"));
}

TEST(ShardCheckpoint, ADamagedHeaderIsRefusedNamingTheFile) {
  const std::string path = Damage(Written("h.ckpt"), 24);
  auto read = ReadShardCheckpoint(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("header checksum"));
}

TEST(ShardCheckpoint, TruncatedEmptyOrForeignFilesAreRefused) {
  const std::string path = Written("t.ckpt");
  const std::string bytes = *ReadFileToString(path);
  for (const std::string& bad : {bytes.substr(0, bytes.size() - 1), bytes.substr(0, 30),
                                 std::string(), std::string("{\"step\": 20}"), bytes + "x"}) {
    ASSERT_TRUE(WriteFileAtomic(path, bad).ok());
    auto read = ReadShardCheckpoint(path);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << bad.size();
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
  }
  EXPECT_EQ(ReadShardCheckpoint(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

void PutLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

TEST(ShardCheckpoint, AWellFormedFileOfAFutureFormatIsRefused) {
  ShardCheckpoint c = Sample();
  const std::string good = EncodeShardCheckpoint(&c);
  c.header.set_format_version(2);
  const std::string header = c.header.SerializeAsString();
  std::string bytes = "PSTRCKPT";
  PutLittleEndian(header.size(), 4, &bytes);
  PutLittleEndian(Fnv1a64(header), 8, &bytes);
  bytes += header;
  bytes += good.substr(good.size() - c.header.payload_bytes());
  auto decoded = DecodeShardCheckpoint(bytes, "future.ckpt");
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("future.ckpt"));
  EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("format version 2"));
}

TEST(ShardCheckpoint, AMismatchedPlanRangeShardOrOptimizerIsRefusedNamingTheFile) {
  const std::string path = Written("m.ckpt");
  auto c = ReadShardCheckpoint(path);
  ASSERT_TRUE(c.ok());
  struct Case {
    const char* field;
    ShardCheckpointExpectation e;
  };
  proto::JobConfig other_momentum = c->header.job();
  other_momentum.set_momentum(0.9);
  proto::JobConfig other_mode = c->header.job();
  other_mode.set_mode(proto::ASYNC);
  std::vector<Case> cases = {
      {"plan fingerprint", Expected(*c)}, {"range", Expected(*c)},   {"shard", Expected(*c)},
      {"optimizer", Expected(*c)},        {"mode", Expected(*c)},
  };
  cases[0].e.plan_fingerprint = 0xdef;
  cases[1].e.range_end = 105;
  cases[2].e.shard_index = 0;
  cases[3].e.job = &other_momentum;
  cases[4].e.job = &other_mode;
  for (const Case& k : cases) {
    const absl::Status s = CheckShardCheckpoint(*c, k.e, path);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << k.field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(path)) << k.field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.field));
  }
  ShardCheckpointExpectation other_save = Expected(*c);
  other_save.payload_checksum ^= 1;
  const absl::Status s = CheckShardCheckpoint(*c, other_save, path);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("manifest"));
}

}  // namespace
}  // namespace pstrain

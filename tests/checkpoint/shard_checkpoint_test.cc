// A ps shard's checkpoint file: it reads back exactly what was written, and
// every kind of damage or mismatch is refused with an error that names the
// file (never a crash, never a silently wrong shard).

#include "checkpoint/shard_checkpoint.h"

#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/hash.h"
#include "common/optimizer.h"
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
  c.state = {1.5f, -2.0f, 3.25f, 0.0f,     // parameters
             0.1f, 0.2f, -0.3f, 1e-30f};  // momentum buffer
  return c;
}

// The sample as an Adam (or AdamW) shard: parameters, exp_avg, exp_avg_sq.
ShardCheckpoint AdamSample(proto::Optimizer kind = proto::ADAM) {
  ShardCheckpoint c = Sample();
  proto::JobConfig* job = c.header.mutable_job();
  job->set_optimizer(kind);
  job->set_beta1(0.9);
  job->set_beta2(0.999);
  job->set_eps(1e-8);
  c.state.insert(c.state.end(), {4e-6f, 1e-5f, 0.0f, 2.5f});
  return c;
}

void PutLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// A file's bytes for `header` and `payload`, framed by hand as
// proto/checkpoint.proto lays it out (not by the code under test).
std::string Frame(const proto::ShardCheckpointHeader& header, const std::vector<float>& payload) {
  const std::string h = header.SerializeAsString();
  std::string bytes = "PSTRCKPT";
  PutLittleEndian(h.size(), 4, &bytes);
  PutLittleEndian(Fnv1a64(h), 8, &bytes);
  bytes += h;
  bytes.append(reinterpret_cast<const char*>(payload.data()), payload.size() * sizeof(float));
  return bytes;
}

// A format version 1 file, as the builds before optimizers wrote it: an
// SGD job, the payload the parameters then the momentum buffer.
std::string FormatOneFile() {
  ShardCheckpoint c = Sample();
  proto::ShardCheckpointHeader h = c.header;
  h.set_format_version(proto::CHECKPOINT_FORMAT_V1);
  h.set_encoding(proto::F32);
  h.set_payload_bytes(c.state.size() * sizeof(float));
  h.set_payload_checksum(Fnv1a64(absl::string_view(reinterpret_cast<const char*>(c.state.data()),
                                                   c.state.size() * sizeof(float))));
  return Frame(h, c.state);
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
  EXPECT_EQ(read->state, written.state);
  EXPECT_EQ(read->header.SerializeAsString(), written.header.SerializeAsString());
  EXPECT_EQ(read->header.format_version(), proto::CHECKPOINT_FORMAT_V2);
  EXPECT_EQ(read->header.payload_bytes(), 2 * 4 * sizeof(float));
  EXPECT_EQ(read->header.payload_checksum(), PayloadChecksum(written.state));
  EXPECT_TRUE(CheckShardCheckpoint(*read, Expected(*read), path).ok());
}

TEST(ShardCheckpoint, EveryOptimizersStateReadsBackExactly) {
  ShardCheckpoint adagrad = Sample();
  adagrad.header.mutable_job()->set_optimizer(proto::ADAGRAD);
  adagrad.header.mutable_job()->set_eps(1e-10);
  for (ShardCheckpoint written : {AdamSample(), AdamSample(proto::ADAMW), adagrad}) {
    const std::string name = OptimizerName(written.header.job().optimizer());
    const std::string path = testing::MakeTempDir("ckpt") + "/" + name + ".ckpt";
    ASSERT_TRUE(WriteShardCheckpoint(path, &written).ok()) << name;
    auto read = ReadShardCheckpoint(path);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->state, written.state) << name;
    EXPECT_EQ(read->header.payload_bytes(), written.state.size() * sizeof(float)) << name;
    EXPECT_EQ(read->header.job().optimizer(), written.header.job().optimizer());
    EXPECT_TRUE(CheckShardCheckpoint(*read, Expected(*read), path).ok()) << name;
  }
  // Adam's state is parameters, exp_avg, exp_avg_sq: 3 x 4 floats.
  EXPECT_EQ(AdamSample().state.size(), 12u);
}

TEST(ShardCheckpoint, AFormatOneFileReadsAsSgdWithItsMomentum) {
  const std::string path = testing::MakeTempDir("ckpt") + "/v1.ckpt";
  ASSERT_TRUE(WriteFileAtomic(path, FormatOneFile()).ok());
  auto read = ReadShardCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->header.format_version(), proto::CHECKPOINT_FORMAT_V1);
  EXPECT_EQ(read->state, Sample().state);
  // It restores an SGD job as before, and its checksum is what a format 2
  // file of the same state has (a manifest written before still matches).
  EXPECT_TRUE(CheckShardCheckpoint(*read, Expected(*read), path).ok());
  ShardCheckpoint v2 = Sample();
  EncodeShardCheckpoint(&v2);
  EXPECT_EQ(read->header.payload_checksum(), v2.header.payload_checksum());
  proto::JobConfig adam = read->header.job();
  adam.set_optimizer(proto::ADAM);
  adam.set_beta2(0.999);
  adam.set_eps(1e-8);
  const absl::Status s = CheckShardCheckpoint(*read, {1, 2, 100, 104, 0xabc, 0, &adam}, path);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_THAT(std::string(s.message()), HasSubstr("the optimizer is sgd (momentum 0.5"));
}

TEST(ShardCheckpoint, AFormatOneFileOfAnotherOptimizerOrAnUnknownOptimizerIsRefused) {
  // Version 1 knew SGD only: one that says otherwise is damaged.
  ShardCheckpoint c = AdamSample();
  proto::ShardCheckpointHeader h = c.header;
  h.set_format_version(proto::CHECKPOINT_FORMAT_V1);
  h.set_encoding(proto::F32);
  h.set_payload_bytes(c.state.size() * sizeof(float));
  h.set_payload_checksum(PayloadChecksum(c.state));
  auto v1 = DecodeShardCheckpoint(Frame(h, c.state), "v1-adam.ckpt");
  EXPECT_EQ(v1.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(v1.status().message()), HasSubstr("v1-adam.ckpt"));
  // A later build's optimizer: this one cannot say how large its state is.
  h.set_format_version(proto::CHECKPOINT_FORMAT_V2);
  h.mutable_job()->set_optimizer(static_cast<proto::Optimizer>(9));
  auto unknown = DecodeShardCheckpoint(Frame(h, c.state), "later.ckpt");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("later.ckpt"));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("optimizer"));
}

TEST(ShardCheckpoint, AStateOfTheWrongSizeForItsOptimizerIsDamage) {
  // An Adam header over an SGD-sized payload (a slot missing).
  ShardCheckpoint c = AdamSample();
  proto::ShardCheckpointHeader h = c.header;
  h.set_format_version(proto::CHECKPOINT_FORMAT_V2);
  h.set_encoding(proto::F32);
  const std::vector<float> short_state(c.state.begin(), c.state.begin() + 8);
  h.set_payload_bytes(short_state.size() * sizeof(float));
  h.set_payload_checksum(PayloadChecksum(short_state));
  auto read = DecodeShardCheckpoint(Frame(h, short_state), "short.ckpt");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("short.ckpt"));
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

TEST(ShardCheckpoint, AWellFormedFileOfAFutureFormatIsRefused) {
  ShardCheckpoint c = Sample();
  EncodeShardCheckpoint(&c);
  c.header.set_format_version(3);
  auto decoded = DecodeShardCheckpoint(Frame(c.header, c.state), "future.ckpt");
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("future.ckpt"));
  EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("format version 3"));
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
  proto::JobConfig adagrad = c->header.job();
  adagrad.set_optimizer(proto::ADAGRAD);  // one slot, as SGD's
  adagrad.set_eps(1e-10);
  std::vector<Case> cases = {
      {"plan fingerprint", Expected(*c)}, {"range", Expected(*c)},     {"shard", Expected(*c)},
      {"optimizer", Expected(*c)},        {"mode", Expected(*c)},      {"optimizer", Expected(*c)},
  };
  cases[0].e.plan_fingerprint = 0xdef;
  cases[1].e.range_end = 105;
  cases[2].e.shard_index = 0;
  cases[3].e.job = &other_momentum;
  cases[4].e.job = &other_mode;
  cases[5].e.job = &adagrad;
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

TEST(ShardCheckpoint, AnAdamCheckpointIsRefusedForAnAdamwJobAndOtherBetas) {
  const std::string path = testing::MakeTempDir("ckpt") + "/adam.ckpt";
  ShardCheckpoint written = AdamSample();
  ASSERT_TRUE(WriteShardCheckpoint(path, &written).ok());
  auto c = ReadShardCheckpoint(path);
  ASSERT_TRUE(c.ok()) << c.status();
  proto::JobConfig adamw = c->header.job();
  adamw.set_optimizer(proto::ADAMW);
  proto::JobConfig other_beta2 = c->header.job();
  other_beta2.set_beta2(0.99);
  for (const proto::JobConfig* job : {&adamw, &other_beta2}) {
    ShardCheckpointExpectation e = Expected(*c);
    e.job = job;
    const absl::Status s = CheckShardCheckpoint(*c, e, path);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(s.message()), HasSubstr(path));
    EXPECT_THAT(std::string(s.message()), HasSubstr("the optimizer is adam (betas 0.9, 0.999"));
  }
}

}  // namespace
}  // namespace pstrain

// The ps's SAVE and RESTORE through its request handler, without sockets:
// a shard saved and restored exactly, for every optimizer and an older
// format, and what is refused (another optimizer's file, a damaged one, a
// save by anyone but the chief).

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_server/request_handler.h"
#include "tests/ps_server/request_handler_fixture.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST_F(CheckpointRequestTest, SaveWritesTheShardAndRestoreContinuesFromItExactly) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Version(0, 1.0f);
  Version(1, 3.0f);
  std::vector<Reply> out = Save(0, 2);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  const proto::SavedShard saved = out[0].header.saved();
  EXPECT_EQ(saved.file(), "ckpt-2/shard-0-of-1.ckpt");
  EXPECT_EQ(saved.version(), 2);
  EXPECT_THAT(saved.worker_steps(), ::testing::ElementsAre(2, 2));
  const std::vector<float> at_save = Params();
  Version(2, -2.0f);
  const std::vector<float> uninterrupted = Params();

  handler_.reset();  // a new ps process, same checkpoint directory
  out = Restore(2, saved.checksum(), /*verify_only=*/true);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(IsError(out[0])) << out[0].header.error().message();
  EXPECT_FALSE(H().initialized());
  out = Restore(2, saved.checksum(), /*verify_only=*/false);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  EXPECT_EQ(H().version(), 2);
  EXPECT_EQ(Params(), at_save);
  out = Send(1, MakeMessage(Base(proto::REGISTER, 1), {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.step(), 2);  // where worker 1 continues
  Version(2, -2.0f);
  EXPECT_EQ(Params(), uninterrupted);  // momentum and update count came back too
  EXPECT_EQ(H().Stats().gradients_received(), 6);  // counters go on
}

// A shard's placement term never goes back: after a give-back at term 2
// (RESTORE from a standby's state), a rollback to a checkpoint keeps it.
// Back at 0 it would tie with a woken ps's stale copy (workers routing the
// shard there), and the standby, holding a term-2 replica, would refuse
// every state after it.
TEST_F(CheckpointRequestTest, ARollbackToACheckpointKeepsTheShardsTerm) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Version(0, 1.0f);
  std::vector<Reply> out = Save(0, 1);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  const uint64_t checksum = out[0].header.saved().checksum();
  Version(1, 3.0f);
  proto::ReplicaState replica = H().ReplicaStateNow();
  replica.set_term(1);  // the adopter's
  proto::Header r = Base(proto::RESTORE, 0);
  r.mutable_job()->set_mode(proto::SYNC);
  r.mutable_job()->set_num_workers(2);
  r.mutable_job()->set_learning_rate(0.5);
  r.mutable_job()->set_momentum(momentum_);
  r.mutable_restore()->set_from_payload(true);
  r.mutable_restore()->set_rollback(true);
  *r.mutable_replica() = replica;
  out = Send(0, MakeMessage(r, H().StateSnapshot()));
  ASSERT_FALSE(IsError(out.back())) << out.back().header.error().message();
  ASSERT_EQ(H().Stats().term(), 2);
  out = Restore(1, checksum, /*verify_only=*/false, /*rollback=*/true);
  ASSERT_FALSE(IsError(out.back())) << out.back().header.error().message();
  EXPECT_EQ(H().version(), 1);
  EXPECT_EQ(H().Stats().term(), 2);
}

// The counters come back trimmed (Stats drops empty staleness buckets):
// a staleness past the restored histogram's end is counted, not written
// past it (a heap corruption that killed restarted async ps tasks).
TEST_F(CheckpointRequestTest, ACounterPastTheRestoredHistogramIsCountedInBounds) {
  Init(proto::ASYNC, 2);
  RegisterAll(2);
  Push(0, 0, 0, 0.1f);  // staleness 0: the histogram is one bucket long in the file
  std::vector<Reply> out = Save(0, 1);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  const uint64_t checksum = out[0].header.saved().checksum();
  handler_.reset();
  proto::Header h = Base(proto::RESTORE, 0);
  h.mutable_job()->set_mode(proto::ASYNC);
  h.mutable_job()->set_num_workers(2);
  h.mutable_job()->set_learning_rate(0.5);
  h.mutable_job()->set_momentum(momentum_);
  h.mutable_restore()->set_step(1);
  h.mutable_restore()->set_checksum(checksum);
  out = Send(0, MakeMessage(h, {}));
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  ASSERT_EQ(H().Stats().staleness_histogram_size(), 1);
  for (int v = 1; v <= 6; ++v) Push(1, v, 1, 0.1f);  // staleness 0, 1, ..., 5
  const proto::ShardStats s = H().Stats();
  ASSERT_EQ(s.staleness_histogram_size(), 6);
  EXPECT_EQ(s.staleness_histogram(0), 2);
  EXPECT_EQ(s.staleness_histogram(5), 1);
  EXPECT_EQ(s.max_staleness(), 5);
}

// Each optimizer's whole state comes back: the same next versions give
// the same parameters and slots, so the step count (Adam's bias
// corrections, Adagrad's lr decay) came back too.
TEST_F(CheckpointRequestTest, EveryOptimizersStateComesBackExactly) {
  proto::JobConfig adagrad;
  adagrad.set_optimizer(proto::ADAGRAD);
  adagrad.set_eps(1e-10);
  adagrad.set_adagrad_lr_decay(0.1);
  adagrad.set_adagrad_initial_accumulator(0.1);
  for (const proto::JobConfig& optimizer : {AdamJob(), AdamJob(proto::ADAMW), adagrad}) {
    const std::string name = proto::Optimizer_Name(optimizer.optimizer());
    handler_.reset();
    optimizer_ = optimizer;
    optimizer_.set_weight_decay(0.01);
    Init(proto::SYNC, 2);
    RegisterAll(2);
    Version(0, 1.0f);
    Version(1, 3.0f);
    const proto::SavedShard saved = Save(0, 2)[0].header.saved();
    EXPECT_EQ(saved.payload_bytes(), (adagrad.optimizer() == optimizer.optimizer() ? 2u : 3u) *
                                         kSize * sizeof(float)) << name;
    Version(2, -2.0f);
    const std::vector<float> uninterrupted = H().StateSnapshot();
    handler_.reset();
    std::vector<Reply> out = Restore(2, saved.checksum(), /*verify_only=*/false);
    ASSERT_FALSE(IsError(out[0])) << name << ": " << out[0].header.error().message();
    RegisterAll(2);
    Version(2, -2.0f);
    EXPECT_EQ(H().StateSnapshot(), uninterrupted) << name;
  }
}

TEST_F(CheckpointRequestTest, ACheckpointOfAnotherOptimizerIsRefusedNamingTheFile) {
  optimizer_ = AdamJob();
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Version(0, 1.0f);
  const proto::SavedShard saved = Save(0, 1)[0].header.saved();
  for (const proto::JobConfig& other : {proto::JobConfig(), AdamJob(proto::ADAMW)}) {
    handler_.reset();
    optimizer_ = other;  // sgd (momentum 0.5), then adamw: the same slots, another rule
    for (bool verify_only : {true, false}) {
      std::vector<Reply> out = Restore(1, saved.checksum(), verify_only);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].header.error().code(),
                static_cast<int>(absl::StatusCode::kFailedPrecondition));
      EXPECT_THAT(out[0].header.error().message(), HasSubstr(checkpoint_dir_ + "/" + saved.file()));
      EXPECT_THAT(out[0].header.error().message(), HasSubstr("the optimizer is adam ("));
    }
    EXPECT_FALSE(H().initialized());
  }
}

// A shard file of format version 1 (what builds before optimizers wrote:
// SGD, parameters then momentum) still restores an SGD shard exactly. It
// is made here from a version 2 file of the same state, whose bytes differ
// only in the header's format_version (proto/checkpoint.proto).
TEST_F(CheckpointRequestTest, AFormatOneCheckpointRestoresAnSgdShardExactly) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Version(0, 1.0f);
  Version(1, 3.0f);
  const proto::SavedShard saved = Save(0, 2)[0].header.saved();
  Version(2, -2.0f);
  const std::vector<float> uninterrupted = H().StateSnapshot();
  const std::string path = checkpoint_dir_ + "/" + saved.file();
  auto c = ReadShardCheckpoint(path);
  ASSERT_TRUE(c.ok()) << c.status();
  std::string bytes = EncodeShardCheckpoint(&*c);
  const size_t header_bytes = bytes.size() - 20 - c->header.payload_bytes();
  proto::ShardCheckpointHeader h = c->header;
  h.set_format_version(proto::CHECKPOINT_FORMAT_V1);
  std::string header = h.SerializeAsString();
  ASSERT_EQ(header.size(), header_bytes);  // a varint 1 for a varint 2
  uint64_t sum = Fnv1a64(header);
  for (int i = 0; i < 8; ++i) bytes[12 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  bytes.replace(20, header.size(), header);
  ASSERT_TRUE(WriteFileAtomic(path, bytes).ok());
  ASSERT_EQ(ReadShardCheckpoint(path)->header.format_version(), proto::CHECKPOINT_FORMAT_V1);

  handler_.reset();
  std::vector<Reply> out = Restore(2, saved.checksum(), /*verify_only=*/false);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  RegisterAll(2);
  Version(2, -2.0f);
  EXPECT_EQ(H().StateSnapshot(), uninterrupted);
}

TEST_F(CheckpointRequestTest, OnlyTheChiefSavesAndOnlyIntoACheckpointDir) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  std::vector<Reply> out = Save(1, 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  handler_.reset();
  checkpoint_dir_.clear();
  Init(proto::SYNC, 2);
  out = Save(0, 0);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("--checkpoint_dir"));
}

// A chief's SAVE (an insider's) whose keep numbers no ps could honour is
// refused, not a crash; one in range removes only older files.
TEST_F(CheckpointRequestTest, KeepNumbersOutOfRangeAreRefused) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  for (const auto& [keep, keep_from] : std::vector<std::pair<int, int64_t>>{
           {0, 0}, {-1, 0}, {kMaxKeepCheckpoints + 1, 0}, {1 << 30, 0}, {3, -1}, {3, 6}}) {
    proto::Header h = Base(proto::SAVE, 0);
    h.set_step(5);
    h.set_keep_checkpoints(keep);
    h.set_keep_from_step(keep_from);
    const std::vector<Reply> out = Send(0, MakeMessage(h, {}));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kInvalidArgument))
        << keep << " " << keep_from;
  }
  for (int64_t step : {1, 2, 3}) ASSERT_FALSE(IsError(Save(0, step)[0]));
  proto::Header h = Base(proto::SAVE, 0);
  h.set_step(4);
  h.set_keep_checkpoints(3);
  h.set_keep_from_step(3);
  ASSERT_FALSE(IsError(Send(0, MakeMessage(h, {}))[0]));
  EXPECT_THAT(*ListCheckpointSteps(checkpoint_dir_), ::testing::ElementsAre(3, 4));
}

TEST_F(CheckpointRequestTest, ADamagedShardFileIsRefusedNamingItAndTheShardStaysFree) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Version(0, 1.0f);
  const proto::SavedShard saved = Save(0, 1)[0].header.saved();
  const std::string path = checkpoint_dir_ + "/" + saved.file();
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, -2, SEEK_END);
  std::fputc('!', f);
  std::fclose(f);
  handler_.reset();
  for (bool verify_only : {true, false}) {
    std::vector<Reply> out = Restore(1, saved.checksum(), verify_only);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kDataLoss));
    EXPECT_THAT(out[0].header.error().message(), HasSubstr(path));
  }
  EXPECT_FALSE(H().initialized());
  EXPECT_FALSE(IsError(Init(proto::SYNC, 2)[0]));  // an older checkpoint, or INIT, may follow
}

}  // namespace
}  // namespace pstrain

// Embedding tables through the request handler: EMBEDDING_PULL and
// EMBEDDING_PUSH in sync (a version's pushes averaged once its dense
// version is applied) and async (on arrival), and every malformed request
// refused with nothing applied.

#include <algorithm>
#include <cstring>
#include <map>

#include "checkpoint/embedding_checkpoint.h"
#include "common/embedding.h"
#include "common/file_util.h"
#include "fuzz/request_frames.h"
#include "tests/ps_server/request_handler_fixture.h"

namespace pstrain {
namespace {

class EmbeddingRequestTest : public RequestHandlerTest {
 protected:
  void SetUp() override {
    num_shards_ = 2;  // this handler is ps 0 of 2: it holds half of the ids
    proto::EmbeddingTableConfig* t = optimizer_.add_tables();
    t->set_name("users");
    t->set_dim(2);
    t->set_optimizer(proto::ROW_SGD);
    t->set_lr(1.0);
    t->set_init_std(1.0);
    t->set_num_embeddings(1000);
    for (int64_t id = 0; static_cast<int>(mine_.size()) < 4; ++id) {
      if (EmbeddingShardOf(id, 2) == 0) mine_.push_back(id);
      if (EmbeddingShardOf(id, 2) == 1 && theirs_ < 0) theirs_ = id;
    }
  }

  // A payload of `ids` then `floats`, as bytes inside a float vector.
  static std::vector<float> Payload(const std::vector<int64_t>& ids,
                                    const std::vector<float>& floats = {}) {
    std::vector<float> out(ids.size() * 2 + floats.size());
    if (!ids.empty()) std::memcpy(out.data(), ids.data(), ids.size() * sizeof(int64_t));
    std::copy(floats.begin(), floats.end(), out.begin() + static_cast<std::ptrdiff_t>(ids.size() * 2));
    return out;
  }

  std::vector<Reply> EmbeddingPull(int rank, const std::vector<int64_t>& ids, int table = 0) {
    proto::Header h = Base(proto::EMBEDDING_PULL, rank);
    proto::EmbeddingSlice* s = h.mutable_embedding()->add_slices();
    s->set_table(table);
    s->set_num_ids(static_cast<int64_t>(ids.size()));
    return Send(rank, MakeMessage(h, Payload(ids)));
  }

  std::vector<Reply> EmbeddingPush(int rank, int64_t version, const std::vector<int64_t>& ids,
                                   const std::vector<float>& grads, int n = 1,
                                   bool has_grad = true) {
    proto::Header h = Base(proto::EMBEDDING_PUSH, rank);
    h.set_step(version);
    h.set_version(version);
    h.set_num_examples(n);
    proto::EmbeddingSlice* s = h.mutable_embedding()->add_slices();
    s->set_table(0);
    s->set_num_ids(static_cast<int64_t>(ids.size()));
    s->set_has_grad(has_grad);
    return Send(rank, MakeMessage(h, Payload(ids, grads)));
  }

  std::vector<float> Rows(const std::vector<int64_t>& ids) {
    const std::vector<Reply> out = EmbeddingPull(0, ids);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_FALSE(IsError(out[0])) << out[0].header.error().message();
    return out[0].payload == nullptr ? std::vector<float>() : *out[0].payload;
  }

  std::vector<float> InitialRows(const std::vector<int64_t>& ids) {
    std::vector<float> rows;
    for (int64_t id : ids) {
      std::vector<float> row(2);
      InitialRow(optimizer_.tables(0), 0, 0, id, absl::MakeSpan(row));
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return rows;
  }

  std::vector<int64_t> mine_;
  int64_t theirs_ = -1;
};

TEST_F(EmbeddingRequestTest, SyncAveragesAVersionsRowsOnceTheVersionIsApplied) {
  ASSERT_FALSE(IsError(Init(proto::SYNC, 2)[0]));
  RegisterAll(2);
  const std::vector<int64_t> a = {mine_[0], mine_[1]}, b = {mine_[1], mine_[2]};
  const std::vector<float> before = Rows({mine_[0], mine_[1], mine_[2]});
  ASSERT_FALSE(IsError(EmbeddingPush(0, 0, a, {1, 1, 2, 2}, /*n=*/1)[0]));
  ASSERT_FALSE(IsError(EmbeddingPush(1, 0, b, {4, 4, 8, 8}, /*n=*/3)[0]));
  Push(0, 0, 0, 0.0f);
  EXPECT_EQ(Rows({mine_[0]}), std::vector<float>(before.begin(), before.begin() + 2))
      << "applied before the version";
  Push(1, 0, 0, 0.0f);
  ASSERT_EQ(H().version(), 1);
  // Weighted by examples (1 and 3 of 4), rows a worker lacks count as zeros; lr 1.
  const std::vector<float> after = Rows({mine_[0], mine_[1], mine_[2]});
  const float w0 = 0.25f, w1 = 0.75f;
  EXPECT_FLOAT_EQ(after[0], before[0] - w0 * 1);
  EXPECT_FLOAT_EQ(after[2], before[2] - (w0 * 2 + w1 * 4));
  EXPECT_FLOAT_EQ(after[4], before[4] - w1 * 8);
  // A second push of rank 0 for version 1, and one for the passed version 0.
  ASSERT_FALSE(IsError(EmbeddingPush(0, 1, a, {1, 1, 1, 1})[0]));
  const std::vector<Reply> again = EmbeddingPush(0, 1, a, {1, 1, 1, 1});
  EXPECT_TRUE(again[0].header.dropped());
  const std::vector<Reply> stale = EmbeddingPush(1, 0, a, {1, 1, 1, 1});
  EXPECT_TRUE(stale[0].header.dropped());
  const proto::ShardStats s = H().Stats();
  ASSERT_EQ(s.tables_size(), 1);
  EXPECT_EQ(s.tables(0).updates(), 1);
  EXPECT_EQ(s.tables(0).rows(), 3);
  EXPECT_EQ(s.tables(0).row_updates(), 3);
}

TEST_F(EmbeddingRequestTest, RowsOfARankThatDiesBeforeItsDenseGradientAreDropped) {
  ASSERT_FALSE(IsError(Init(proto::SYNC, 2)[0]));
  RegisterAll(2);
  const std::vector<float> before = Rows({mine_[0], mine_[1]});
  ASSERT_FALSE(IsError(EmbeddingPush(0, 0, {mine_[0]}, {1, 1})[0]));
  ASSERT_FALSE(IsError(EmbeddingPush(1, 0, {mine_[1]}, {1, 1})[0]));
  Push(0, 0, 0, 0.0f);
  // Rank 1 goes silent before its dense push: declared dead, the version
  // completes with rank 0 alone, and rank 1's rows go with its gradient.
  clock_.AdvanceSeconds(20);
  Send(0, MakeMessage(Base(proto::HEARTBEAT, 0), {}));
  std::vector<Reply> out;
  EXPECT_EQ(H().DeclareSilentDead(10.0, &out), std::vector<int>{1});
  ASSERT_EQ(H().version(), 1);
  const std::vector<float> after = Rows({mine_[0], mine_[1]});
  EXPECT_FLOAT_EQ(after[0], before[0] - 1.0f);  // rank 0's alone: weight 1
  EXPECT_EQ(after[2], before[2]);
  EXPECT_EQ(after[3], before[3]);
}

TEST_F(EmbeddingRequestTest, WithBackupWorkersALateRanksRowsGoWithItsDroppedGradient) {
  // 3 workers, 1 backup: a version is the first 2 dense gradients, and
  // only their ranks' rows.
  ASSERT_FALSE(IsError(Init(proto::SYNC, 3, /*staleness=*/0, /*backup=*/1)[0]));
  RegisterAll(3);
  const std::vector<float> before = Rows({mine_[0], mine_[1], mine_[2]});
  // Rank 2's rows come first, its dense gradient last: late.
  ASSERT_FALSE(IsError(EmbeddingPush(2, 0, {mine_[2]}, {5, 5})[0]));
  ASSERT_FALSE(IsError(EmbeddingPush(0, 0, {mine_[0]}, {1, 1})[0]));
  ASSERT_FALSE(IsError(EmbeddingPush(1, 0, {mine_[0], mine_[1]}, {3, 3, 2, 2})[0]));
  Push(0, 0, 0, 0.0f);
  Push(1, 0, 0, 0.0f);
  ASSERT_EQ(H().version(), 1);
  const std::vector<Reply> late = Push(2, 0, 0, 0.0f);
  ASSERT_FALSE(late.empty());
  EXPECT_TRUE(late[0].header.dropped());
  // A later version does not bring rank 2's rows back.
  ASSERT_FALSE(IsError(EmbeddingPush(0, 1, {mine_[1]}, {0, 0})[0]));
  ASSERT_FALSE(IsError(EmbeddingPush(1, 1, {mine_[1]}, {0, 0})[0]));
  Push(0, 1, 1, 0.0f);
  Push(1, 1, 1, 0.0f);
  ASSERT_EQ(H().version(), 2);
  const std::vector<float> after = Rows({mine_[0], mine_[1], mine_[2]});
  EXPECT_FLOAT_EQ(after[0], before[0] - (0.5f * 1 + 0.5f * 3));  // ranks 0 and 1, 1 example each
  EXPECT_FLOAT_EQ(after[2], before[2] - 0.5f * 2);
  EXPECT_EQ(after[4], before[4]);  // rank 2's alone: never applied
  EXPECT_EQ(after[5], before[5]);
  EXPECT_EQ(H().Stats().tables(0).updates(), 2);
}

TEST_F(EmbeddingRequestTest, AsyncAppliesARanksRowsWithItsDenseGradient) {
  ASSERT_FALSE(IsError(Init(proto::ASYNC, 2)[0]));
  RegisterAll(2);
  const std::vector<float> before = Rows({mine_[0]});
  ASSERT_FALSE(IsError(EmbeddingPush(1, 0, {mine_[0]}, {0.5f, -0.5f})[0]));
  EXPECT_EQ(Rows({mine_[0]}), before) << "applied before its dense gradient";
  Push(0, 0, 0, 0.0f);  // another rank's gradient does not take them in
  EXPECT_EQ(Rows({mine_[0]}), before);
  Push(1, 0, 0, 0.0f);
  const std::vector<float> after = Rows({mine_[0]});
  EXPECT_FLOAT_EQ(after[0], before[0] - 0.5f);
  EXPECT_FLOAT_EQ(after[1], before[1] + 0.5f);
  {
    // The push's own lr (a script's schedule) instead of the table's 1.
    proto::Header h = Base(proto::EMBEDDING_PUSH, 1);
    proto::EmbeddingSlice* s = h.mutable_embedding()->add_slices();
    s->set_num_ids(1);
    s->set_has_grad(true);
    s->set_has_lr(true);
    s->set_lr(0.25);
    ASSERT_FALSE(IsError(Send(1, MakeMessage(h, Payload({mine_[0]}, {1.0f, 1.0f})))[0]));
    Push(1, 1, 1, 0.0f);
    EXPECT_FLOAT_EQ(Rows({mine_[0]})[0], after[0] - 0.25f);
  }
  // A table without a gradient is left alone; one with a gradient of none
  // of this ps's rows still takes an update.
  ASSERT_FALSE(IsError(EmbeddingPush(1, 2, {}, {}, 1, /*has_grad=*/false)[0]));
  Push(1, 2, 2, 0.0f);
  EXPECT_EQ(H().Stats().tables(0).updates(), 2);
  ASSERT_FALSE(IsError(EmbeddingPush(1, 3, {}, {}, 1, /*has_grad=*/true)[0]));
  Push(1, 3, 3, 0.0f);
  EXPECT_EQ(H().Stats().tables(0).updates(), 3);
}

TEST_F(EmbeddingRequestTest, AsyncRowsGoWithARefusedDenseGradient) {
  // Rank 1's dense gradient is refused (not finite), and the rows it sent
  // before it go with it; so do those of a rank whose next push is its rows
  // again (its dense gradient never came).
  ASSERT_FALSE(IsError(Init(proto::ASYNC, 2)[0]));
  RegisterAll(2);
  const std::vector<float> before = Rows({mine_[0], mine_[1]});
  ASSERT_FALSE(IsError(EmbeddingPush(0, 0, {mine_[0]}, {1, 1})[0]));
  ASSERT_FALSE(IsError(EmbeddingPush(1, 0, {mine_[1]}, {1, 1})[0]));
  Push(0, 0, 0, 0.0f);
  const std::vector<Reply> refused = Push(1, 0, 0, std::nanf(""));
  ASSERT_FALSE(refused.empty());
  EXPECT_TRUE(IsError(refused[0]));
  ASSERT_FALSE(IsError(EmbeddingPush(0, 1, {mine_[1]}, {5, 5})[0]));
  ASSERT_FALSE(
      IsError(EmbeddingPush(0, 1, {mine_[1]}, {0, 0})[0]));  // the step again, replacing it
  Push(0, 1, 1, 0.0f);
  const std::vector<float> after = Rows({mine_[0], mine_[1]});
  EXPECT_FLOAT_EQ(after[0], before[0] - 1.0f);
  EXPECT_EQ(after[2], before[2]);
  EXPECT_EQ(after[3], before[3]);
  EXPECT_EQ(H().Stats().tables(0).updates(), 2);  // rank 0's two steps
}

TEST_F(EmbeddingRequestTest, StalenessLrDividesAStaleRowsLrAsADenseGradients) {
  ASSERT_FALSE(IsError(Init(proto::ASYNC, 2, 0, 0, /*staleness_lr=*/true)[0]));
  RegisterAll(2);
  for (int v = 0; v < 4; ++v) Push(0, v, v, 0.0f);  // the shard moves to version 4
  const std::vector<float> before = Rows({mine_[0]});
  const std::vector<Reply> out = EmbeddingPush(1, 0, {mine_[0]}, {1.0f, 1.0f});
  ASSERT_FALSE(IsError(out[0]));
  EXPECT_EQ(out[0].header.staleness(), 4);
  Push(1, 0, 0, 0.0f);
  EXPECT_FLOAT_EQ(Rows({mine_[0]})[0], before[0] - 1.0f / 4);  // lr 1 / staleness 4
}

TEST_F(EmbeddingRequestTest, UnreadRowsAreTheirInitialOnes) {
  ASSERT_FALSE(IsError(Init(proto::ASYNC, 1)[0]));
  EXPECT_EQ(Rows({mine_[3], mine_[0]}), InitialRows({mine_[3], mine_[0]}));
}

TEST_F(EmbeddingRequestTest, RefusesMalformedRequestsApplyingNothing) {
  ASSERT_FALSE(IsError(Init(proto::ASYNC, 2)[0]));
  RegisterAll(2);
  const std::vector<float> before = Rows({mine_[0], mine_[1]});
  auto refused = [&](const std::vector<Reply>& out, const std::string& what) {
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(IsError(out[0]));
    EXPECT_NE(out[0].header.error().message().find(what), std::string::npos)
        << out[0].header.error().message();
  };
  refused(EmbeddingPush(1, 0, {mine_[0], mine_[0]}, {1, 1, 1, 1}), "twice");
  refused(EmbeddingPush(1, 0, {theirs_}, {1, 1}), "held by ps 1");
  refused(EmbeddingPush(1, 0, {-1}, {1, 1}), "outside [0, 1000)");
  refused(EmbeddingPush(1, 0, {mine_[0]}, {1, 1, 1}), "bytes");
  refused(EmbeddingPush(1, 0, {mine_[0]}, {1, std::nanf("")}), "not finite");
  refused(EmbeddingPush(1, 5, {mine_[0]}, {1, 1}), "has not made");
  refused(EmbeddingPush(1, 0, {mine_[0]}, {1, 1}, 1, /*has_grad=*/false), "no gradient");
  {
    proto::Header h = Base(proto::EMBEDDING_PUSH, 1);
    proto::EmbeddingSlice* s = h.mutable_embedding()->add_slices();
    s->set_num_ids(1);
    s->set_has_grad(true);
    s->set_has_lr(true);
    s->set_lr(-0.5);
    refused(Send(1, MakeMessage(h, Payload({mine_[0]}, {1, 1}))), "lr -0.5");
  }
  refused(EmbeddingPull(1, {mine_[0]}, /*table=*/3), "not one of");
  {
    proto::Header h = Base(proto::EMBEDDING_PULL, 1);
    proto::EmbeddingSlice* s = h.mutable_embedding()->add_slices();
    s->set_table(0);
    s->set_num_ids(EmbeddingTables::kMaxIds + 1);
    refused(Send(1, MakeMessage(h, Payload({mine_[0]}))), "more than");
  }
  {
    proto::Header h = Base(proto::EMBEDDING_PUSH, 1);
    for (int i = 0; i < 2; ++i) {
      proto::EmbeddingSlice* s = h.mutable_embedding()->add_slices();
      s->set_table(0);
      s->set_num_ids(1);
      s->set_has_grad(true);
    }
    refused(Send(1, MakeMessage(h, Payload({mine_[0], mine_[1]}, {1, 1, 1, 1}))), "slices");
  }
  EXPECT_EQ(Rows({mine_[0], mine_[1]}), before);
  EXPECT_EQ(H().Stats().tables(0).updates(), 0);
}

TEST_F(EmbeddingRequestTest, APushInPiecesIsAllowedExactlyWhatItsSlicesClaim) {
  ASSERT_FALSE(IsError(Init(proto::ASYNC, 2)[0]));
  RegisterAll(2);
  // 100,000 ids of rows of 2 floats: 1.6 MB, in pieces of 409,600 bytes.
  proto::Header first = Base(proto::EMBEDDING_PUSH, 1);
  proto::EmbeddingSlice* s = first.mutable_embedding()->add_slices();
  s->set_table(0);
  s->set_num_ids(100000);
  s->set_has_grad(true);
  first.set_parts(4);
  first.set_piece_bytes(409600);
  const absl::StatusOr<size_t> limit = H().AdmitPieces({Peer(1), user_id_}, first);
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(*limit, 100000u * (8 + 2 * 4));
  // More pieces than the slices' bytes, and slices of no table.
  first.set_parts(5);
  const absl::StatusOr<size_t> larger = H().AdmitPieces({Peer(1), user_id_}, first);
  ASSERT_FALSE(larger.ok());
  EXPECT_THAT(std::string(larger.status().message()), testing::HasSubstr("larger than"));
  first.set_parts(4);
  s->set_table(3);
  const absl::StatusOr<size_t> unknown = H().AdmitPieces({Peer(1), user_id_}, first);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), testing::HasSubstr("not one of"));
}

TEST_F(EmbeddingRequestTest, AJobWithoutTablesAndAShardBeforeInitRefuse) {
  const std::vector<Reply> early = EmbeddingPull(1, {mine_[0]});
  EXPECT_TRUE(early[0].header.rejoin());
  optimizer_.clear_tables();
  ASSERT_FALSE(IsError(Init(proto::ASYNC, 2)[0]));
  const std::vector<Reply> none = EmbeddingPull(1, {mine_[0]});
  EXPECT_NE(none[0].header.error().message().find("no embedding tables"), std::string::npos);
}

TEST_F(EmbeddingRequestTest, InitRefusesABadTable) {
  optimizer_.mutable_tables(0)->set_dim(0);
  const std::vector<Reply> out = Init(proto::SYNC, 2);
  ASSERT_TRUE(IsError(out[0]));
  EXPECT_NE(out[0].header.error().message().find("embedding_dim 0"), std::string::npos);
}

TEST_F(EmbeddingRequestTest, CheckpointsOfTablesAreRefused) {
  ASSERT_FALSE(IsError(Init(proto::SYNC, 2)[0]));
  proto::Header h = Base(proto::SAVE, 0);
  h.set_step(1);
  h.set_keep_checkpoints(1);
  const std::vector<Reply> out = Send(0, MakeMessage(h, {}));
  ASSERT_TRUE(IsError(out[0]));  // no --checkpoint_dir here; with one, the tables' refusal
}

TEST(EmbeddingTablesCheckpoint, AChainOfDeltasLoadsBackAndDamageIsNamed) {
  std::string dir = ::testing::TempDir() + "/embXXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  proto::JobConfig job;
  job.set_seed(3);
  proto::EmbeddingTableConfig* t = job.add_tables();
  t->set_name("t");
  t->set_dim(3);
  t->set_optimizer(proto::ROW_ADAGRAD);
  t->set_lr(0.1);
  t->set_eps(1e-10);
  t->set_init_std(1.0);
  EmbeddingTables live(job, 0, 1);
  std::vector<int64_t> ids(50);
  auto push = [&](int step) {
    EmbeddingTables::Push p;
    EmbeddingTables::Push::Slice slice;
    slice.has_grad = true;
    for (int64_t i = 0; i < 5; ++i) slice.ids.push_back((step * 5 + i) % 50);
    slice.grads.assign(slice.ids.size() * 3, 0.1f * static_cast<float>(step + 1));
    p.slices.push_back(slice);
    live.Apply(p);
  };
  std::vector<proto::SavedShard> saved(4);
  for (int step = 1; step <= 3; ++step) {
    push(step);
    ASSERT_TRUE(live.Save(dir, step, step, /*keep=*/3, /*keep_from_step=*/0, &saved[step]).ok());
  }
  EXPECT_FALSE(saved[1].embedding_delta());
  EXPECT_TRUE(saved[2].embedding_delta());
  EXPECT_TRUE(saved[3].embedding_delta());
  EXPECT_LT(saved[3].embedding_bytes(), saved[1].embedding_bytes() + 1);
  for (int64_t i = 0; i < 50; ++i) ids[i] = i;
  auto rows = [&](EmbeddingTables& tables) {
    proto::EmbeddingRequest r;
    r.add_slices()->set_num_ids(50);
    std::string payload(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
    return tables.Pull(r, {payload.data(), payload.size()}).value();
  };
  absl::StatusOr<EmbeddingTables> loaded =
      EmbeddingTables::Load(job, 0, 1, dir, 3, saved[3].embedding_checksum(), 3);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(rows(*loaded), rows(live));
  // The manifest's checksum must be the file's; a damaged link is named.
  EXPECT_FALSE(EmbeddingTables::Load(job, 0, 1, dir, 3, saved[3].embedding_checksum() + 1, 3).ok());
  const std::string middle = dir + "/" + saved[2].embedding_file();
  std::string bytes = ReadFileToString(middle).value();
  bytes[bytes.size() - 1] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(middle, bytes).ok());
  const absl::StatusOr<EmbeddingTables> broken =
      EmbeddingTables::Load(job, 0, 1, dir, 3, saved[3].embedding_checksum(), 3);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("embedding-0-of-1.ckpt"), std::string::npos)
      << broken.status();
  EXPECT_NE(broken.status().message().find("ckpt-2"), std::string::npos) << broken.status();
}

// The files go once no checkpoint the chief keeps (from keep_from_step
// on) has them in its chain; a restarted ps, which did not make the older
// chains, removes nothing until the oldest kept is one of its own.
TEST(EmbeddingTablesCheckpoint, FilesGoOnceNoKeptCheckpointsChainNeedsThem) {
  std::string dir = ::testing::TempDir() + "/embkeepXXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  proto::JobConfig job;
  job.set_seed(3);
  proto::EmbeddingTableConfig* t = job.add_tables();
  t->set_name("t");
  t->set_dim(2);
  t->set_optimizer(proto::ROW_SGD);
  t->set_lr(0.1);
  t->set_init_std(1.0);
  auto push = [](EmbeddingTables& tables, int64_t step) {
    EmbeddingTables::Push p;
    EmbeddingTables::Push::Slice slice;
    slice.has_grad = true;
    slice.lr = 0.1;
    slice.ids = {step % 7, 10 + step % 3};
    slice.grads.assign(4, 0.5f);
    p.slices.push_back(slice);
    tables.Apply(p);
  };
  auto files = [&] {
    std::vector<int64_t> steps;
    for (int64_t s = 1; s <= 9; ++s) {
      if (FileExists(absl::StrCat(dir, "/", EmbeddingFileName(s, 0, 1)))) steps.push_back(s);
    }
    return steps;
  };
  // keep 2: full files at 1, 3, 5 (and deltas at 2, 4, 6); the chief's
  // keep_from_step for save s is s - 2, the older of the two before it.
  EmbeddingTables live(job, 0, 1);
  std::map<int64_t, proto::SavedShard> saved;
  for (int64_t s = 1; s <= 6; ++s) {
    push(live, s);
    ASSERT_TRUE(live.Save(dir, s, s, /*keep=*/2, std::max<int64_t>(0, s - 2), &saved[s]).ok());
    EXPECT_EQ(saved[s].embedding_delta(), s % 2 == 0) << s;
  }
  // 4's chain starts at 3: 1 and 2 went at save 5, nothing at save 6.
  EXPECT_EQ(files(), (std::vector<int64_t>{3, 4, 5, 6}));
  ASSERT_TRUE(EmbeddingTables::Load(job, 0, 1, dir, 4, saved[4].embedding_checksum(), 4).ok());

  absl::StatusOr<EmbeddingTables> restarted =
      EmbeddingTables::Load(job, 0, 1, dir, 6, saved[6].embedding_checksum(), 6);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  const std::map<int64_t, std::vector<int64_t>> after = {
      {7, {3, 4, 5, 6, 7}},     // oldest kept 5: made before the restart
      {8, {3, 4, 5, 6, 7, 8}},  // 6: the same
      {9, {7, 8, 9}}};          // 7: this process's full file
  for (const auto& [s, expected] : after) {
    push(*restarted, s);
    ASSERT_TRUE(restarted->Save(dir, s, s, /*keep=*/2, s - 2, &saved[s]).ok());
    EXPECT_EQ(files(), expected) << "after save " << s;
  }
}

TEST(EmbeddingTablesMemory, TheCapDropsTheLeastRecentRowOfAnyTableAndResumesExactly) {
  proto::JobConfig job;
  job.set_seed(3);
  for (const char* name : {"a", "b"}) {
    proto::EmbeddingTableConfig* t = job.add_tables();
    t->set_name(name);
    t->set_dim(2);
    t->set_optimizer(proto::ROW_SGD);
    t->set_lr(0.5);
    t->set_init_std(1.0);
    t->set_evict_after_updates(4);
  }
  const int64_t row_cost = EmbeddingTable(job.tables(0), 3, 0).RowCost();
  job.set_embedding_memory_per_ps(3 * row_cost + row_cost / 2);  // 3 rows fit, not 4
  auto push = [](EmbeddingTables& tables, std::vector<std::pair<int, int64_t>> rows) {
    EmbeddingTables::Push p;
    for (int table = 0; table < 2; ++table) {
      EmbeddingTables::Push::Slice slice;
      slice.table = table;
      slice.lr = 0.5;
      for (const auto& [t, id] : rows) {
        if (t == table) slice.ids.push_back(id);
      }
      slice.has_grad = !slice.ids.empty();
      slice.grads.assign(slice.ids.size() * 2, 1.0f);
      p.slices.push_back(slice);
    }
    tables.Apply(p);
  };
  auto stats = [](const EmbeddingTables& tables) {
    std::vector<std::pair<int64_t, int64_t>> out;  // (rows, rows_evicted_memory) per table
    for (const proto::EmbeddingTableStats& s : tables.Stats()) {
      out.emplace_back(s.rows(), s.rows_evicted_memory());
    }
    return out;
  };
  using Stats = std::vector<std::pair<int64_t, int64_t>>;
  EmbeddingTables live(job, 0, 1);
  push(live, {{0, 10}, {1, 20}});  // clock 1
  push(live, {{0, 11}});           // clock 2
  push(live, {{1, 21}});           // clock 3: 4 rows; 10 and 20 tie, table a's goes
  EXPECT_EQ(stats(live), (Stats{{1, 1}, {2, 0}}));
  push(live, {{1, 20}});  // clock 4: 20 is recent again
  push(live, {{0, 12}});  // clock 5: a's 11 (clock 2) is the oldest of any table
  EXPECT_EQ(stats(live), (Stats{{1, 2}, {2, 0}}));

  // Saved and loaded, a copy goes on as the live tables do: the clock and
  // every row's last update are in the file.
  std::string dir = ::testing::TempDir() + "/embmemXXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  proto::SavedShard saved;
  ASSERT_TRUE(live.Save(dir, 5, 5, /*keep=*/2, /*keep_from_step=*/0, &saved).ok());
  absl::StatusOr<EmbeddingTables> copy =
      EmbeddingTables::Load(job, 0, 1, dir, 5, saved.embedding_checksum(), 5);
  ASSERT_TRUE(copy.ok()) << copy.status();
  for (EmbeddingTables* t : {&live, &*copy}) {
    push(*t, {{0, 13}});  // clock 6: 21 (clock 3) goes
    push(*t, {{0, 12}});  // clock 7
    push(*t, {{0, 12}});  // clock 8: 20 (clock 4) idle for 4 ticks goes
  }
  EXPECT_EQ(stats(live), (Stats{{2, 2}, {0, 1}}));
  EXPECT_EQ(stats(*copy), stats(live));
  EXPECT_EQ(live.Stats()[1].rows_evicted_idle(), 1);
  EXPECT_EQ(copy->Stats()[1].rows_evicted_idle(), 1);
}

// fuzz_request's harness CHECKs that its INIT (with an embedding table)
// is taken: the same INIT here, for every mode and worker count it makes.
TEST(FuzzHarnessInit, EverySetupsValidInitIsTaken) {
  for (int mode = 0; mode < 4; ++mode) {
    for (int workers = 1; workers <= 4; ++workers) {
      const fuzz::Setup setup{true, mode, workers, false, false};
      const fuzz::FuzzMessage init = fuzz::ValidInit(setup);
      proto::Header h;
      ASSERT_TRUE(h.ParseFromString(init.frames[0]));
      std::vector<float> params(fuzz::kShardFloats);
      std::memcpy(params.data(), init.frames[1].data(), init.frames[1].size());
      RequestHandlerOptions o;
      o.job_id = fuzz::kJobId;
      o.num_workers = workers;
      RequestHandler handler(o);
      std::vector<Reply> out;
      handler.Handle({"peer0", ""}, MakeMessage(h, params), &out);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].header.error().code(), 0) << out[0].header.error().message();
      EXPECT_TRUE(handler.initialized());
      EXPECT_EQ(handler.Stats().tables_size(), 1);
    }
  }
}

}  // namespace
}  // namespace pstrain

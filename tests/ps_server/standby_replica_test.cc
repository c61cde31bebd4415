// StandbyReplica: the copy of its primary's shard a ps keeps as standby.

#include "ps_server/standby_replica.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/embedding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// A REPLICATE of shard `shard` (2 floats, SGD: parameters and momentum) of
// a 3-ps job, at `term`.
Message Replicate(int shard, int64_t term, float value = 1.0f, int floats = 4) {
  proto::Header h;
  h.set_type(proto::REPLICATE);
  h.set_shard_index(shard);
  h.set_num_shards(3);
  h.set_range_begin(10);
  h.set_range_end(12);
  h.set_encoding(proto::F32);
  h.mutable_job()->set_num_workers(2);
  h.mutable_job()->set_momentum(0.5);
  h.mutable_replica()->set_version(5);
  h.mutable_replica()->set_term(term);
  return MakeMessage(std::move(h), std::vector<float>(static_cast<size_t>(floats), value));
}

const Principal kPs0{Role::kPs, -1, 0};

TEST(StandbyReplica, KeepsItsPrimarysStateAndOnlyThat) {
  StandbyReplica standby(/*shard_index=*/1, /*num_workers=*/2);  // the standby of shard 0
  EXPECT_FALSE(standby.held().held());
  ASSERT_TRUE(standby.Keep(kPs0, Replicate(0, 1, 2.5f), 3).ok());
  ASSERT_TRUE(standby.held().held());
  EXPECT_EQ(*standby.held().state, std::vector<float>(4, 2.5f));
  EXPECT_EQ(standby.held().header.replica().version(), 5);
  StandbyReplica::Refusal why;
  const Principal ps2{Role::kPs, -1, 2};
  EXPECT_FALSE(standby.Keep(ps2, Replicate(2, 1), 3, &why).ok());  // not its primary
  EXPECT_EQ(why, StandbyReplica::Refusal::kNotMyPrimary);
  EXPECT_FALSE(standby.Keep(kPs0, Replicate(2, 1), 3, &why).ok());  // another shard
  const Principal chief{Role::kChief, 0};
  EXPECT_FALSE(standby.Keep(chief, Replicate(0, 1), 3, &why).ok());
  EXPECT_FALSE(standby.Keep(kPs0, Replicate(0, 1), 4, &why).ok());  // another cluster size
  EXPECT_EQ(*standby.held().state, std::vector<float>(4, 2.5f));     // unchanged
}

TEST(StandbyReplica, NeverTakesAStateOfAnOlderTermThanTheOneHeld) {
  StandbyReplica standby(1, 2);
  ASSERT_TRUE(standby.Keep(kPs0, Replicate(0, /*term=*/3, 1.0f), 3).ok());
  StandbyReplica::Refusal why;
  const absl::Status s = standby.Keep(kPs0, Replicate(0, /*term=*/2, 9.0f), 3, &why);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(why, StandbyReplica::Refusal::kStaleTerm);
  EXPECT_THAT(std::string(s.message()), HasSubstr("older than the replica held"));
  EXPECT_EQ(*standby.held().state, std::vector<float>(4, 1.0f));
  EXPECT_TRUE(standby.Keep(kPs0, Replicate(0, 3, 2.0f), 3).ok());  // the same term goes on
}

TEST(StandbyReplica, RefusesAStateOfTheWrongSizeOrNotFinite) {
  StandbyReplica standby(1, 2);
  StandbyReplica::Refusal why;
  EXPECT_FALSE(standby.Keep(kPs0, Replicate(0, 1, 1.0f, /*floats=*/3), 3, &why).ok());
  EXPECT_EQ(why, StandbyReplica::Refusal::kBadState);
  EXPECT_FALSE(
      standby.Keep(kPs0, Replicate(0, 1, std::numeric_limits<float>::quiet_NaN()), 3, &why).ok());
  EXPECT_EQ(why, StandbyReplica::Refusal::kBadState);
  EXPECT_FALSE(standby.held().held());
}

TEST(StandbyReplica, AStateFromAPayloadBecomesACheckpointOfItsVersionAndClocks) {
  Message m = Replicate(0, 1, 3.0f);
  m.header.mutable_replica()->add_worker_clocks(4);
  m.header.mutable_replica()->add_worker_clocks(5);
  auto c = StateFromPayload(m, 2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->header.version(), 5);
  EXPECT_EQ(c->header.worker_clocks_size(), 2);
  EXPECT_EQ(c->state, std::vector<float>(4, 3.0f));
  m.header.mutable_replica()->add_worker_clocks(6);  // clocks for 3 ranks of a 2-rank job
  EXPECT_FALSE(StateFromPayload(m, 2).ok());
}

// Shard 0's tables of a job with one Adagrad table of 3 floats a row,
// admission after 2 touches.
proto::JobConfig TablesJob() {
  proto::JobConfig job;
  job.set_num_workers(2);
  job.set_momentum(0.5);
  job.set_seed(3);
  proto::EmbeddingTableConfig* t = job.add_tables();
  t->set_name("t");
  t->set_dim(3);
  t->set_optimizer(proto::ROW_ADAGRAD);
  t->set_lr(0.1);
  t->set_eps(1e-10);
  t->set_init_std(1.0);
  t->set_admit_after(2);
  return job;
}

// Updates `tables` (shard 0 of 3) `n` times with ids of shard 0.
void Drive(EmbeddingTables& tables, int from, int n) {
  for (int u = from; u < from + n; ++u) {
    EmbeddingTables::Push push;
    EmbeddingTables::Push::Slice slice;
    slice.has_grad = true;
    slice.lr = 0.1;
    for (int64_t id = 0; id < 400 && slice.ids.size() < 6; ++id) {
      if (EmbeddingShardOf(id * 7 + u, 3) == 0) slice.ids.push_back(id * 7 + u);
    }
    slice.grads.assign(slice.ids.size() * 3, 0.5f - 0.1f * static_cast<float>(u % 9));
    push.slices.push_back(std::move(slice));
    push.num_examples = 1;
    tables.Apply(push);
  }
}

// A REPLICATE of shard 0 with `tables`' bytes: whole, or what changed
// after `since`.
Message ReplicateTables(EmbeddingTables& tables, int64_t since, uint64_t instance = 9) {
  Message m = Replicate(0, 1);
  proto::Header h = m.header;
  *h.mutable_job() = TablesJob();
  h.mutable_replica()->set_primary_instance(instance);
  std::string bytes;
  const bool delta = since >= 0 && tables.EncodeSince(since, 5, &bytes);
  if (!delta) {
    tables.StartChangeLog();
    bytes = tables.Encode(5);
  }
  h.mutable_replica()->set_tables_bytes(bytes.size());
  h.mutable_replica()->set_tables_delta(delta);
  h.mutable_replica()->set_tables_since(delta ? since : 0);
  std::vector<float> payload(4, 1.0f);
  AppendTables(bytes, &payload);
  return MakeMessage(std::move(h), payload);
}

// The tables' contents as Encode writes them: rows, their order and
// optimizer state, waiting ids (sorted), counters (not the memory their
// structures take, nor the hash maps' order, which are each copy's own).
std::string Content(const EmbeddingTables& tables) {
  EmbeddingCheckpoint c = DecodeEmbeddingCheckpoint(tables.Encode(5), "x").value();
  std::string out = absl::StrCat("clock ", c.header.clock());
  for (EmbeddingTableState& t : c.tables) {
    std::sort(t.waiting.begin(), t.waiting.end());
    t.meta.mutable_stats()->clear_memory_bytes();
    t.meta.clear_waiting();
    absl::StrAppend(&out, "|", t.meta.ShortDebugString(), "|", absl::StrJoin(t.ids, ","), "|",
                    absl::StrJoin(t.last_updates, ","), "|", absl::StrJoin(t.floats, ","), "|");
    for (const auto& [id, touches] : t.waiting) absl::StrAppend(&out, id, ":", touches, ",");
  }
  return out;
}

TEST(StandbyReplica, KeepsTheTablesWholeThenByDeltasAndGivesThemWhole) {
  EmbeddingTables primary(TablesJob(), 0, 3);
  Drive(primary, 0, 10);
  StandbyReplica standby(1, 2);
  ASSERT_TRUE(standby.Keep(kPs0, ReplicateTables(primary, -1), 3).ok());
  ASSERT_TRUE(standby.held().held());
  for (int round = 0; round < 5; ++round) {
    const int64_t acked = primary.clock();
    Drive(primary, 10 + 4 * round, 4);
    const Message m = ReplicateTables(primary, acked);
    ASSERT_TRUE(m.header.replica().tables_delta());
    ASSERT_TRUE(standby.Keep(kPs0, m, 3).ok());
    primary.ForgetThrough(primary.clock());
    ASSERT_EQ(Content(*standby.held().tables), Content(primary)) << round;
  }
  // What FETCH_REPLICA sends and RESTORE takes: the state, then the tables whole.
  proto::Header h = standby.held().header;
  const std::vector<float> payload = ReplicaPayload(standby.held(), h.mutable_replica());
  EXPECT_GT(h.replica().tables_bytes(), 0u);
  EXPECT_FALSE(h.replica().tables_delta());
  const Message restore = MakeMessage(h, payload);
  auto floats = CheckState(restore, 2);
  ASSERT_TRUE(floats.ok()) << floats.status();
  EmbeddingTables restored(TablesJob(), 0, 3);
  ASSERT_TRUE(restored.ApplyEncoded(TablesOf(restore, *floats), false, "restore").ok());
  EXPECT_EQ(Content(restored), Content(primary));
}

TEST(StandbyReplica, RefusesADeltaOnTablesItDoesNotHold) {
  EmbeddingTables primary(TablesJob(), 0, 3);
  Drive(primary, 0, 6);
  const Message whole = ReplicateTables(primary, -1);
  const int64_t at = primary.clock();
  Drive(primary, 6, 3);
  const Message delta = ReplicateTables(primary, at);
  StandbyReplica fresh(1, 2);  // restarted: holds nothing
  StandbyReplica::Refusal why;
  absl::Status s = fresh.Keep(kPs0, delta, 3, &why);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(why, StandbyReplica::Refusal::kTablesBehind);
  EXPECT_THAT(std::string(s.message()), HasSubstr("send them whole"));
  EXPECT_FALSE(fresh.held().held());
  // Of another primary process (it restarted: its clocks start again).
  ASSERT_TRUE(fresh.Keep(kPs0, whole, 3).ok());
  Drive(primary, 9, 2);
  const Message other = ReplicateTables(primary, at, /*instance=*/10);
  EXPECT_EQ(fresh.Keep(kPs0, other, 3, &why).code(), absl::StatusCode::kFailedPrecondition);
  // A job with tables whose REPLICATE carries none, or bytes that are not tables.
  Message bare = Replicate(0, 1);
  *bare.header.mutable_job() = TablesJob();
  EXPECT_FALSE(fresh.Keep(kPs0, bare, 3, &why).ok());
  EXPECT_EQ(why, StandbyReplica::Refusal::kBadState);
  proto::Header h = whole.header;
  std::vector<float> junk(4 + 8, 7.0f);
  h.mutable_replica()->set_tables_bytes(32);
  EXPECT_FALSE(fresh.Keep(kPs0, MakeMessage(h, junk), 3, &why).ok());
  EXPECT_EQ(why, StandbyReplica::Refusal::kBadState);
  // What it held is still whole and usable.
  EXPECT_TRUE(fresh.held().held());
}

}  // namespace
}  // namespace pstrain

// One embedding table on one ps: torch.optim's sparse update rules written
// out, the initial rows as a pure function, admission, eviction by age and
// by the row cap, and what holding the rows costs.

#include "ps_server/embedding_table.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/numeric/int128.h"
#include "checkpoint/framing.h"
#include "common/embedding.h"
#include "common/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

constexpr uint64_t kSeed = 7;

proto::EmbeddingTableConfig Table(proto::RowOptimizer optimizer, int dim = 4) {
  proto::EmbeddingTableConfig t;
  t.set_name("t");
  t.set_dim(dim);
  t.set_optimizer(optimizer);
  t.set_lr(0.1);
  t.set_eps(optimizer == proto::ROW_ADAGRAD ? 1e-10 : 1e-8);
  t.set_beta1(0.9);
  t.set_beta2(0.999);
  t.set_init_std(1.0);
  return t;
}

std::vector<float> Initial(const proto::EmbeddingTableConfig& t, int64_t id) {
  std::vector<float> row(t.dim());
  InitialRow(t, kSeed, 0, id, absl::MakeSpan(row));
  return row;
}

std::vector<float> Read(EmbeddingTable& table, std::vector<int64_t> ids) {
  std::vector<float> rows(ids.size() * table.dim());
  table.Read(ids, absl::MakeSpan(rows));
  return rows;
}

TEST(InitialRow, IsAFunctionOfSeedTableIdAndColumn) {
  const proto::EmbeddingTableConfig t = Table(proto::ROW_SGD, 5);
  EXPECT_EQ(Initial(t, 3), Initial(t, 3));
  EXPECT_NE(Initial(t, 3), Initial(t, 4));
  std::vector<float> other(5);
  InitialRow(t, kSeed, 1, 3, absl::MakeSpan(other));
  EXPECT_NE(other, Initial(t, 3));
  InitialRow(t, kSeed + 1, 0, 3, absl::MakeSpan(other));
  EXPECT_NE(other, Initial(t, 3));
  // N(0, 1) over many rows: mean near 0, variance near 1.
  double sum = 0, squares = 0;
  const int n = 20000;
  for (int64_t id = 0; id < n; ++id) {
    for (float v : Initial(t, id * 7919)) {
      sum += v;
      squares += double{v} * v;
    }
  }
  const double mean = sum / (5.0 * n), variance = squares / (5.0 * n) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(variance, 1.0, 0.03);
  proto::EmbeddingTableConfig u = t;
  u.set_init_uniform(true);
  u.set_init_std(0.5);
  for (int64_t id = 0; id < 1000; ++id) {
    for (float v : Initial(u, id)) EXPECT_LE(std::abs(v), 0.5f);
  }
}

TEST(EmbeddingShardOf, SpreadsConsecutiveIds) {
  std::vector<int> counts(4, 0);
  for (int64_t id = 0; id < 4000; ++id) ++counts[EmbeddingShardOf(id, 4)];
  for (int c : counts) EXPECT_NEAR(c, 1000, 150);
  EXPECT_EQ(EmbeddingShardOf(-5, 3), EmbeddingShardOf(-5, 3));
}

TEST(EmbeddingTable, ReadsInitialRowsUntilUpdated) {
  EmbeddingTable table(Table(proto::ROW_SGD), kSeed, 0);
  EXPECT_EQ(Read(table, {11}), Initial(Table(proto::ROW_SGD), 11));
  EXPECT_EQ(table.rows(), 0);  // reading makes no row
}

TEST(EmbeddingTable, SgdAdagradAndSparseAdamAreTorchsRules) {
  const std::vector<float> g = {0.5f, -1.0f, 2.0f, 0.0f};
  for (proto::RowOptimizer o : {proto::ROW_SGD, proto::ROW_ADAGRAD, proto::ROW_ADAM}) {
    const proto::EmbeddingTableConfig config = Table(o);
    EmbeddingTable table(config, kSeed, 0);
    std::vector<float> p = Initial(config, 5), sum(4, 0.0f), m(4, 0.0f), v(4, 0.0f);
    for (int t = 1; t <= 3; ++t) {
      table.Update({5}, g);
      for (int j = 0; j < 4; ++j) {
        if (o == proto::ROW_SGD) {
          p[j] += static_cast<float>(-0.1) * g[j];
        } else if (o == proto::ROW_ADAGRAD) {
          sum[j] += g[j] * g[j];
          p[j] += static_cast<float>(-0.1) * (g[j] / (std::sqrt(sum[j]) + 1e-10f));
        } else {
          const float dm = (g[j] - m[j]) * 0.1f, dv = (g[j] * g[j] - v[j]) * 0.001f;
          const float numer = dm + m[j], denom = std::sqrt(dv + v[j]) + 1e-8f;
          m[j] += dm;
          v[j] += dv;
          const double step = 0.1 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
          p[j] += static_cast<float>(-step) * (numer / denom);
        }
      }
    }
    const std::vector<float> got = Read(table, {5});
    for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(got[j], p[j]) << o << " " << j;
    EXPECT_EQ(table.updates(), 3);
  }
}

TEST(EmbeddingTable, SparseAdamsStepCountsTheTablesUpdates) {
  // Row 2 is first updated at the table's third update: its bias
  // correction is that of t = 3 (SparseAdam's), not of its own first step.
  const proto::EmbeddingTableConfig config = Table(proto::ROW_ADAM);
  EmbeddingTable table(config, kSeed, 0);
  const std::vector<float> g = {1.0f, 1.0f, 1.0f, 1.0f};
  table.Update({1}, g);
  table.Update({1}, g);
  table.Update({2}, g);
  const double step = 0.1 * std::sqrt(1 - std::pow(0.999, 3)) / (1 - std::pow(0.9, 3));
  const float dm = 0.1f, dv = 0.001f;
  const float expected = Initial(config, 2)[0] + static_cast<float>(-step) *
                                                     (dm / (std::sqrt(dv) + 1e-8f));
  EXPECT_FLOAT_EQ(Read(table, {2})[0], expected);
}

TEST(EmbeddingTable, AdmitsAnIdAfterItsTouchesAndDropsItsGradientsBefore) {
  proto::EmbeddingTableConfig config = Table(proto::ROW_SGD);
  config.set_admit_after(2);
  EmbeddingTable table(config, kSeed, 0);
  const std::vector<float> g(4, 1.0f);
  EXPECT_EQ(Read(table, {9}), std::vector<float>(4, 0.0f));
  table.Update({9}, g);  // first touch: dropped
  EXPECT_EQ(Read(table, {9}), std::vector<float>(4, 0.0f));
  EXPECT_EQ(table.Stats().ids_waiting(), 1);
  table.Update({9}, g);  // second: admitted at its initial row, this gradient dropped too
  EXPECT_EQ(Read(table, {9}), Initial(config, 9));
  table.Update({9}, g);  // applied
  std::vector<float> p = Initial(config, 9);
  for (float& x : p) x += static_cast<float>(-0.1) * 1.0f;
  EXPECT_EQ(Read(table, {9}), p);
  const proto::EmbeddingTableStats s = table.Stats();
  EXPECT_EQ(s.gradients_unadmitted(), 2);
  EXPECT_EQ(s.rows_admitted(), 1);
  EXPECT_EQ(s.ids_waiting(), 0);
  EXPECT_EQ(s.row_updates(), 1);
}

TEST(EmbeddingTable, EvictsRowsIdleForTheirUpdates) {
  proto::EmbeddingTableConfig config = Table(proto::ROW_SGD);
  config.set_evict_after_updates(3);
  EmbeddingTable table(config, kSeed, 0);
  const std::vector<float> g(4, 1.0f);
  table.Update({1}, g);  // update 1
  table.Update({2}, g);  // 2
  table.Update({2}, g);  // 3
  EXPECT_EQ(table.rows(), 2);
  table.Update({2}, g);  // 4: row 1 untouched for 3 updates
  EXPECT_EQ(table.rows(), 1);
  EXPECT_EQ(Read(table, {1}), Initial(config, 1));  // back to a new id
  EXPECT_EQ(table.Stats().rows_evicted_idle(), 1);
}

TEST(EmbeddingTable, TheRowCapDropsTheLeastRecentlyUpdated) {
  proto::EmbeddingTableConfig config = Table(proto::ROW_SGD);
  config.set_max_rows_per_ps(2);
  EmbeddingTable table(config, kSeed, 0);
  const std::vector<float> g(4, 1.0f);
  table.Update({1}, g);
  table.Update({2}, g);
  table.Update({1}, g);  // 2 is now the least recent
  table.Update({3}, g);  // makes room: 2 goes
  EXPECT_EQ(table.rows(), 2);
  EXPECT_EQ(Read(table, {2}), Initial(config, 2));
  EXPECT_NE(Read(table, {1}), Initial(config, 1));
  EXPECT_EQ(table.Stats().rows_evicted_cap(), 1);
}

TEST(EmbeddingTable, ARowTheCapDropsMidUpdateIsNotConfusedWithItsSlotsNewRow) {
  // Rows are looked up before an update applies any (FindSlots): a row the
  // cap drops to make room for a new one gives that one its slot, and a
  // later id of the same update that had that slot must not land there.
  proto::EmbeddingTableConfig config = Table(proto::ROW_SGD);
  config.set_max_rows_per_ps(3);
  config.set_lr(1.0);
  EmbeddingTable table(config, kSeed, 0);
  table.Update({1, 2, 3}, std::vector<float>(12, 0.0f));  // 1 is the least recent
  std::vector<float> g(12);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i + 1);
  // 4 takes 1's slot (1 was the least recent); 1 is then made anew,
  // dropping 2, and 2 anew, dropping 3.
  table.Update({4, 1, 2}, g);
  auto expect = [&](int64_t id, size_t at) {
    std::vector<float> row = Initial(config, id);
    for (size_t j = 0; j < row.size(); ++j) row[j] -= g[at * 4 + j];
    EXPECT_EQ(Read(table, {id}), row) << "row " << id;
  };
  expect(4, 0);
  expect(1, 1);
  expect(2, 2);
  EXPECT_EQ(table.rows(), 3);
  EXPECT_EQ(Read(table, {3}), Initial(config, 3));
  EXPECT_EQ(table.Stats().rows_evicted_cap(), 3);
}

TEST(AllFinite, FindsAnyInfinityOrNaNAnywhere) {
  std::vector<float> v(37, 1.0f);
  v[5] = -0.0f;
  v[6] = 3e38f;
  v[7] = 1e-45f;
  EXPECT_TRUE(AllFinite(v));
  EXPECT_TRUE(AllFinite({}));
  for (size_t at : {size_t{0}, size_t{15}, size_t{16}, size_t{36}}) {
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<float> w = v;
      w[at] = bad;
      EXPECT_FALSE(AllFinite(w)) << bad << " at " << at;
    }
  }
}

TEST(EmbeddingTable, HoldsItsRowsInUnderOneAndAHalfTimesTheirBytes) {
  // 16 floats under Adagrad: 128 bytes of values and state a row.
  EmbeddingTable table(Table(proto::ROW_ADAGRAD, 16), kSeed, 0);
  std::vector<int64_t> ids(100000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) * 104729;
  table.Update(ids, std::vector<float>(ids.size() * 16, 0.5f));
  const proto::EmbeddingTableStats s = table.Stats();
  EXPECT_EQ(s.rows(), 100000);
  EXPECT_EQ(s.row_bytes(), 100000 * 128);
  const double ratio = static_cast<double>(s.memory_bytes()) / s.row_bytes();
  std::printf("memory per row: %.1f bytes for 128 (%.3fx)\n", s.memory_bytes() / 1e5, ratio);
  EXPECT_LE(ratio, 1.5);
}

TEST(EmbeddingTable, EveryRowIsItsOwnAcrossGrowingAndFullChunks) {
  // 10,000 rows: the chunks of 64 ... 2,048 rows, then two of 4,096.
  const proto::EmbeddingTableConfig config = Table(proto::ROW_SGD, 2);
  EmbeddingTable table(config, kSeed, 0);
  std::vector<int64_t> ids(10000);
  std::vector<float> g(ids.size() * 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>(i) * 31;
    g[2 * i] = static_cast<float>(i);
    g[2 * i + 1] = -static_cast<float>(i);
  }
  table.Update(ids, g);
  const std::vector<float> rows = Read(table, ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float> p = Initial(config, ids[i]);
    ASSERT_EQ(rows[2 * i], p[0] + static_cast<float>(-0.1) * g[2 * i]) << i;
    ASSERT_EQ(rows[2 * i + 1], p[1] + static_cast<float>(-0.1) * g[2 * i + 1]) << i;
  }
}

TEST(EmbeddingTable, ATableOfAFewRowsTakesAFewRowsRoom) {
  EmbeddingTable table(Table(proto::ROW_ADAGRAD, 16), kSeed, 0);
  table.Update({1, 2, 3}, std::vector<float>(3 * 16, 1.0f));
  // One chunk of 64 rows of 128 bytes, and a little bookkeeping.
  EXPECT_LT(table.Stats().memory_bytes(), 64 * 128 + 1024);
}

TEST(EmbeddingTable, ReusesTheSlotsOfDroppedRows) {
  proto::EmbeddingTableConfig config = Table(proto::ROW_SGD);
  config.set_evict_after_updates(1);
  EmbeddingTable table(config, kSeed, 0);
  const std::vector<float> g(4, 1.0f);
  for (int64_t id = 0; id < 3 * EmbeddingTable::kRowsPerChunk; ++id) table.Update({id}, g);
  EXPECT_EQ(table.rows(), 1);
  // The first chunk's 64 rows at most: the slots came back.
  EXPECT_LT(table.Stats().memory_bytes(), 64 * 16 + 1024);
}

// Updates of a few hundred ids, some often, some rarely (admission,
// eviction and the cap all act), the same for every table they drive.
void Drive(EmbeddingTable& table, int from, int to) {
  for (int u = from; u < to; ++u) {
    std::vector<int64_t> ids;
    for (int64_t k = 0; k < 12; ++k) ids.push_back((u * 7 + k * k * 13) % (k < 6 ? 40 : 400));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::vector<float> g(ids.size() * table.dim());
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((u + i) % 7) * 0.25f - 0.7f;
    table.Update(ids, g);
  }
}

std::vector<float> Every(EmbeddingTable& table) {
  std::vector<int64_t> ids(400);
  for (int64_t i = 0; i < 400; ++i) ids[i] = i;
  return Read(table, ids);
}

// A state of more rows than the cap (a checkpoint resharded to fewer ps)
// keeps the cap's most recent rows once loaded, as updates would have.
TEST(EmbeddingTableCheckpoint, AStateOverTheCapIsCutToItOnLoad) {
  proto::EmbeddingTableConfig config = Table(proto::ROW_SGD);
  EmbeddingTable wide(config, kSeed, 0);
  const std::vector<float> g(4, 1.0f);
  for (int64_t id : {1, 2, 3, 4}) wide.Update({id}, g);
  wide.Update({1}, g);  // least recent now: 2, then 3
  EmbeddingTableState state;
  wide.Save(/*delta=*/false, &state);
  config.set_max_rows_per_ps(2);
  *state.meta.mutable_config() = config;  // as the resharded file of a capped table says
  EmbeddingTable capped(config, kSeed, 0);
  ASSERT_TRUE(capped.Load(state, false, "full").ok());
  capped.FinishLoad();
  EXPECT_EQ(capped.rows(), 2);
  EXPECT_EQ(capped.Stats().rows_evicted_cap(), 2);
  EXPECT_EQ(Read(capped, {1}), Read(wide, {1}));
  EXPECT_EQ(Read(capped, {4}), Read(wide, {4}));
  EXPECT_EQ(Read(capped, {2}), Initial(config, 2));
  EXPECT_EQ(Read(capped, {3}), Initial(config, 3));
}

TEST(EmbeddingTableCheckpoint, AFullAndADeltaLoadedGoOnBitForBit) {
  for (proto::RowOptimizer o : {proto::ROW_SGD, proto::ROW_ADAGRAD, proto::ROW_ADAM}) {
    proto::EmbeddingTableConfig config = Table(o);
    config.set_admit_after(2);
    config.set_evict_after_updates(30);
    config.set_max_rows_per_ps(150);
    EmbeddingTable live(config, kSeed, 0);
    Drive(live, 0, 50);
    EmbeddingTableState full, delta;
    live.Save(/*delta=*/false, &full);
    live.MarkSaved();
    Drive(live, 50, 80);
    live.Save(/*delta=*/true, &delta);
    live.MarkSaved();
    EXPECT_GT(delta.ids.size(), 0u);
    EXPECT_GT(delta.deleted.size(), 0u) << "nothing evicted between the saves";
    // Through the file format, as a ps reads them back.
    EmbeddingCheckpoint a, b;
    a.tables.push_back(full);
    b.tables.push_back(delta);
    b.header.set_delta(true);
    auto round_trip = [](EmbeddingCheckpoint* c) {
      return DecodeEmbeddingCheckpoint(EncodeEmbeddingCheckpoint(c), "x").value();
    };
    const EmbeddingCheckpoint read_a = round_trip(&a), read_b = round_trip(&b);
    EmbeddingTable restored(config, kSeed, 0);
    ASSERT_TRUE(restored.Load(read_a.tables[0], false, "full").ok());
    ASSERT_TRUE(restored.Load(read_b.tables[0], true, "delta").ok());
    restored.FinishLoad();
    EXPECT_EQ(Every(restored), Every(live)) << o;
    EXPECT_EQ(restored.rows(), live.rows());
    EXPECT_EQ(restored.updates(), live.updates());
    EXPECT_EQ(restored.Stats().ids_waiting(), live.Stats().ids_waiting());
    // Going on: admission, idle eviction and the cap's order all agree.
    Drive(live, 80, 140);
    Drive(restored, 80, 140);
    EXPECT_EQ(Every(restored), Every(live)) << o;
    EXPECT_EQ(restored.Stats().rows_evicted_cap(), live.Stats().rows_evicted_cap());
    EXPECT_EQ(restored.Stats().rows_evicted_idle(), live.Stats().rows_evicted_idle());
    EXPECT_GT(live.Stats().rows_evicted_cap(), 0);
  }
}

// What a table holds, as a full save writes it, its waiting ids sorted
// (not the memory its structures took: their capacities are their own).
EmbeddingTableState Whole(const EmbeddingTable& table) {
  EmbeddingTableState s;
  table.Save(/*delta=*/false, &s);
  std::sort(s.waiting.begin(), s.waiting.end());
  s.meta.mutable_stats()->clear_memory_bytes();
  return s;
}

void ExpectSame(const EmbeddingTableState& a, const EmbeddingTableState& b, const char* what) {
  EXPECT_EQ(a.ids, b.ids) << what;
  EXPECT_EQ(a.last_updates, b.last_updates) << what;
  EXPECT_EQ(a.floats, b.floats) << what;
  EXPECT_EQ(a.waiting, b.waiting) << what;
  EXPECT_EQ(a.meta.SerializeAsString(), b.meta.SerializeAsString()) << what;
}

TEST(EmbeddingTableReplica, AStandbyKeptByDeltasHoldsTheTableBitForBit) {
  for (proto::RowOptimizer o : {proto::ROW_SGD, proto::ROW_ADAGRAD, proto::ROW_ADAM}) {
    proto::EmbeddingTableConfig config = Table(o);
    config.set_admit_after(2);
    config.set_evict_after_updates(30);
    config.set_max_rows_per_ps(150);
    EmbeddingTable live(config, kSeed, 0), standby(config, kSeed, 0);
    Drive(live, 0, 20);
    live.StartChangeLog();
    int64_t acked = live.updates();  // the clock: a table of its own counts its updates
    ASSERT_TRUE(standby.Load(Whole(live), /*delta=*/false, "whole").ok());
    int64_t deleted = 0, unwaited = 0;
    for (int round = 0; round < 12; ++round) {
      Drive(live, 20 + 10 * round, 30 + 10 * round);
      EmbeddingTableState delta;
      ASSERT_TRUE(live.SaveSince(acked, &delta));
      deleted += static_cast<int64_t>(delta.deleted.size());
      for (const auto& w : delta.waiting) unwaited += w.second == 0;
      // Through the wire's encoding, as a standby reads it.
      EmbeddingCheckpoint c;
      c.header.set_delta(true);
      c.tables.push_back(delta);
      const EmbeddingCheckpoint read =
          DecodeEmbeddingCheckpoint(EncodeEmbeddingCheckpoint(&c), "delta").value();
      ASSERT_TRUE(standby.Load(read.tables[0], /*delta=*/true, "delta").ok());
      // Every other delta is "lost" (never acknowledged): the next one
      // reaches back further, onto a standby that has more than its base.
      if (round % 2 == 1) {
        acked = live.updates();
        live.ForgetThrough(acked);
      }
      ExpectSame(Whole(standby), Whole(live), "after a delta");
    }
    EXPECT_GT(deleted, 0) << "nothing evicted between the deltas";
    EXPECT_GT(unwaited, 0) << "no id left the waiting list between the deltas";
    // The log forgot what the standby acknowledged: a delta from before
    // that is refused (the primary sends the table whole).
    EmbeddingTableState too_old;
    EXPECT_FALSE(live.SaveSince(acked - 5, &too_old));
    EXPECT_TRUE(live.SaveSince(acked, &too_old));
  }
}

TEST(EmbeddingTableReplica, ALogNeverStartedGivesNoDelta) {
  EmbeddingTable live(Table(proto::ROW_SGD), kSeed, 0);
  Drive(live, 0, 5);
  EmbeddingTableState s;
  EXPECT_FALSE(live.SaveSince(0, &s));
  live.StartChangeLog();
  EXPECT_FALSE(live.SaveSince(2, &s)) << "a delta from before the log started";
  Drive(live, 5, 6);
  ASSERT_TRUE(live.SaveSince(5, &s));
  EXPECT_GT(s.ids.size(), 0u);
}

// A header whose tables claim more bytes than the payload holds, but
// whose sum wraps around 2^64 to exactly the payload's size (a peer's
// REPLICATE can carry one, with the checksum right): refused before any
// row is read.
TEST(EmbeddingTableCheckpoint, TablesWhoseByteSumWrapsAreRefusedBeforeAnyRead) {
  proto::EmbeddingTableConfig config = Table(proto::ROW_ADAM, 4096);
  const absl::uint128 row = 16 + 4096 * 3 * 4;  // id, clock, values and Adam's two slots
  const absl::uint128 wrap = absl::uint128(1) << 64;
  // The payload P and the rows R with R x row = 2^64 + P.
  uint64_t payload_bytes = 0;
  while ((wrap + payload_bytes) % row != 0) payload_bytes += 16;
  const uint64_t rows = absl::Uint128Low64((wrap + payload_bytes) / row);
  proto::EmbeddingCheckpointHeader h;
  h.set_format_version(1);
  uint64_t left = rows;
  while (left > 0) {
    proto::EmbeddingTableCheckpoint* t = h.add_tables();
    *t->mutable_config() = config;
    const uint64_t r = std::min<uint64_t>(left, uint64_t{1} << 40);
    t->set_rows(static_cast<int64_t>(r));
    left -= r;
  }
  ASSERT_LE(h.tables_size(), kMaxEmbeddingTables);
  const std::string payload(payload_bytes, '\0');
  h.set_payload_bytes(payload_bytes);
  h.set_payload_checksum(Fnv1a64(payload));
  const auto c =
      DecodeEmbeddingCheckpoint(FrameFile("PSTREMB1", h.SerializeAsString(), payload), "REPLICATE");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              ::testing::HasSubstr("more bytes than the payload"));
  // More tables than a job may have: refused as such.
  proto::EmbeddingCheckpointHeader many;
  many.set_format_version(1);
  for (int i = 0; i <= kMaxEmbeddingTables; ++i) *many.add_tables()->mutable_config() = config;
  many.set_payload_checksum(Fnv1a64(""));
  EXPECT_FALSE(
      DecodeEmbeddingCheckpoint(FrameFile("PSTREMB1", many.SerializeAsString(), ""), "x").ok());
}

TEST(EmbeddingTableCheckpoint, DamageIsRefusedNamingTheFile) {
  EmbeddingTable live(Table(proto::ROW_SGD), kSeed, 0);
  Drive(live, 0, 5);
  EmbeddingCheckpoint c;
  c.tables.emplace_back();
  live.Save(false, &c.tables[0]);
  std::string bytes = EncodeEmbeddingCheckpoint(&c);
  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 1;
  const auto damaged = DecodeEmbeddingCheckpoint(flipped, "f.ckpt");
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("f.ckpt: damaged"), std::string::npos);
  EXPECT_FALSE(DecodeEmbeddingCheckpoint(bytes.substr(0, bytes.size() - 8), "f").ok());
  EXPECT_FALSE(DecodeEmbeddingCheckpoint("PSTREMB1", "f").ok());
  // Another configuration: refused.
  EmbeddingTable other(Table(proto::ROW_ADAGRAD), kSeed, 0);
  EXPECT_FALSE(other.Load(c.tables[0], false, "f").ok());
}

TEST(EmbeddingTable, AnUpdateThatWouldOverflowARowIsNotApplied) {
  proto::EmbeddingTableConfig config = Table(proto::ROW_SGD);
  config.set_lr(1e30);
  EmbeddingTable table(config, kSeed, 0);
  const std::vector<float> before = Initial(config, 3);
  table.Update({3}, std::vector<float>(4, 1e30f));
  EXPECT_EQ(Read(table, {3}), before);
  EXPECT_EQ(table.Stats().refused_row_updates(), 1);
  EXPECT_EQ(table.Stats().row_updates(), 0);
}

}  // namespace
}  // namespace pstrain

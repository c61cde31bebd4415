// The golden run: N synchronous workers must reproduce one process training
// with the same global batch. 2 workers with batch 64 each and 1 worker with
// batch 128, same seed and learning rate, dropout ON (its masks are keyed by
// example, not by position in a batch), 20 steps of real MNIST through real
// ps and worker processes: the final parameters must agree to float
// rounding.

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "models/net_spec.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/run_outputs.h"

namespace pstrain {
namespace {

constexpr int kSteps = 20;

// `per_worker[w]`: more flags for worker w alone.
std::vector<float> RunAndReadParams(int num_workers, int batch_size, int seed,
                                    const std::vector<std::string>& more = {},
                                    std::string* output = nullptr,
                                    const std::vector<std::vector<std::string>>& per_worker = {}) {
  const std::string dir = testing::MakeTempDir("golden");
  const std::string spec = testing::WriteLocalSpec(dir, 2, num_workers);
  std::vector<std::string> flags = {"--mode=sync",
                                    absl::StrCat("--batch_size=", batch_size),
                                    "--lr=0.01",
                                    "--momentum=0.5",
                                    absl::StrCat("--max_steps=", kSteps),
                                    absl::StrCat("--seed=", seed),
                                    "--device=cpu",
                                    "--data_dir=" + testing::SourcePath("data/mnist"),
                                    "--run_dir=" + dir,
                                    "--log_every_steps=0"};
  flags.insert(flags.end(), more.begin(), more.end());  // later flags win
  const testing::ClusterRun run =
      testing::RunLocalCluster(spec, 2, num_workers, flags, 240, per_worker);
  EXPECT_TRUE(run.all_ok()) << run.AllOutput();
  if (output != nullptr) *output = run.AllOutput();
  return testing::ReadFinalParams(dir);
}

int CountOf(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

struct Difference {
  double max_abs = 0;       // max_i |a_i - b_i|
  double max_relative = 0;  // max_i |a_i - b_i| / |b_i| over |b_i| > 1e-4
  double relative_l2 = 0;   // ||a - b|| / ||b||
};

Difference Compare(const std::vector<float>& a, const std::vector<float>& b) {
  Difference d;
  double diff2 = 0, norm2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = static_cast<double>(a[i]) - b[i];
    d.max_abs = std::max(d.max_abs, std::fabs(e));
    if (std::fabs(b[i]) > 1e-4) d.max_relative = std::max(d.max_relative, std::fabs(e / b[i]));
    diff2 += e * e;
    norm2 += static_cast<double>(b[i]) * b[i];
  }
  d.relative_l2 = std::sqrt(diff2 / norm2);
  return d;
}

TEST(GoldenEquivalence, TwoSyncWorkersReproduceOneProcessWithTheSameGlobalBatch) {
  const std::vector<float> one = RunAndReadParams(1, 128, 1);
  const std::vector<float> two = RunAndReadParams(2, 64, 1);
  ASSERT_EQ(one.size(), 21840u);
  ASSERT_EQ(two.size(), one.size());

  // How far training moved the parameters, to put the difference in scale.
  auto specs = models::NetParamSpecs(*models::GetNetSpec("mnist_cnn"));
  ASSERT_TRUE(specs.ok());
  std::vector<float> init(one.size());
  models::InitParams(*specs, 1, init.data());
  const Difference moved = Compare(one, init);
  const Difference golden = Compare(two, one);
  std::printf(
      "RESULT golden steps=%d max_abs_diff=%.3g max_relative_diff=%.3g relative_l2_diff=%.3g "
      "update_max_abs=%.3g\n",
      kSteps, golden.max_abs, golden.max_relative, golden.relative_l2, moved.max_abs);

  EXPECT_GT(moved.max_abs, 1e-3) << "training did not move the parameters";
  // Float rounding only: summation order differs (two half-batch means
  // averaged on the ps vs one mean), nothing else.
  EXPECT_LT(golden.relative_l2, 1e-5);
  EXPECT_LT(golden.max_abs, 1e-5);
  EXPECT_LT(golden.max_relative, 1e-3);

  // And the comparison can fail: another data order gives other parameters.
  const std::vector<float> other = RunAndReadParams(2, 64, 2);
  ASSERT_EQ(other.size(), one.size());
  EXPECT_GT(Compare(other, one).relative_l2, 1e-3);
}

// The learning-rate schedule runs on the ps by version, so N sync workers
// still reproduce one process with it: a warm-up and a cosine
// decay over the 20 updates, to a rate far from the constant run's.
TEST(GoldenEquivalence, TwoSyncWorkersReproduceOneProcessUnderAScheduleToo) {
  const std::vector<std::string> schedule = {"--lr=0.05", "--lr_schedule=cosine",
                                             "--warmup_steps=5", "--min_lr=0.001"};
  const std::vector<float> one = RunAndReadParams(1, 128, 1, schedule);
  const std::vector<float> two = RunAndReadParams(2, 64, 1, schedule);
  ASSERT_EQ(two.size(), one.size());
  const Difference golden = Compare(two, one);
  std::printf("RESULT golden_schedule steps=%d max_abs_diff=%.3g relative_l2_diff=%.3g\n", kSteps,
              golden.max_abs, golden.relative_l2);
  EXPECT_LT(golden.relative_l2, 1e-5);
  EXPECT_LT(golden.max_abs, 1e-5);
  // And the schedule changed the run: the constant rate gives others.
  const std::vector<float> constant = RunAndReadParams(1, 128, 1, {"--lr=0.05"});
  EXPECT_GT(Compare(constant, one).relative_l2, 1e-3);
}

// Adam and AdamW run on the ps too, their moments and step count in the
// shard: N sync workers still reproduce one process, since the
// ps applies the same averaged gradient to the same state.
void ExpectTwoWorkersEqualOne(const char* name, const std::vector<std::string>& flags) {
  const std::vector<float> one = RunAndReadParams(1, 128, 1, flags);
  const std::vector<float> two = RunAndReadParams(2, 64, 1, flags);
  ASSERT_EQ(one.size(), 21840u);
  ASSERT_EQ(two.size(), one.size());
  const Difference golden = Compare(two, one);
  std::printf(
      "RESULT golden_%s steps=%d max_abs_diff=%.3g max_relative_diff=%.3g "
      "relative_l2_diff=%.3g\n",
      name, kSteps, golden.max_abs, golden.max_relative, golden.relative_l2);
  EXPECT_LT(golden.relative_l2, 1e-5);
  EXPECT_LT(golden.max_abs, 1e-5);
  // And the optimizer changed the run: SGD at the same rate gives others.
  const std::vector<float> sgd = RunAndReadParams(1, 128, 1, {"--lr=0.001"});
  EXPECT_GT(Compare(sgd, one).relative_l2, 1e-3);
}

TEST(GoldenEquivalence, TwoSyncWorkersReproduceOneProcessWithAdam) {
  ExpectTwoWorkersEqualOne("adam", {"--optimizer=adam", "--lr=0.001", "--momentum=-1"});
}

TEST(GoldenEquivalence, TwoSyncWorkersReproduceOneProcessWithAdamW) {
  ExpectTwoWorkersEqualOne(
      "adamw", {"--optimizer=adamw", "--lr=0.001", "--weight_decay=0.01", "--momentum=-1"});
}

// Overlap (--overlap, on by default) only changes when each shard's push
// leaves, not what it carries: the same run with and without it ends with
// the same parameters bit for bit. Two ps, so there are two shards to send
// at different times; the workers' logs say how many left early.
TEST(GoldenEquivalence, OverlapChangesNothingButWhenPushesLeave) {
  std::string with_log, without_log;
  const std::vector<float> with = RunAndReadParams(2, 64, 1, {"--overlap=true"}, &with_log);
  const std::vector<float> without = RunAndReadParams(2, 64, 1, {"--overlap=false"}, &without_log);
  // mnist_cnn over 2 ps: shard 1 (the fully connected layers) is final
  // before conv1's backward, every step of both workers.
  EXPECT_NE(with_log.find(absl::StrCat("overlap: ", kSteps, " shard pushes left while backward")),
            std::string::npos)
      << with_log;
  EXPECT_EQ(without_log.find("overlap:"), std::string::npos);
  // And each worker ran every step's forward but the first ahead, while the
  // step before it was still receiving its parameters.
  EXPECT_EQ(CountOf(with_log, absl::StrCat("forward ahead: ", kSteps - 1, " steps")), 2)
      << with_log;
  EXPECT_EQ(without_log.find("forward ahead:"), std::string::npos);
  ASSERT_EQ(with.size(), without.size());
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(std::memcmp(with.data(), without.data(), sizeof(float) * with.size()), 0)
      << "--overlap changed the parameters: " << Compare(with, without).max_abs;
}

// The workers reach the ps tasks of their host over the ps's Unix socket
// (transport/local_route.h), not encrypted: what they train is what they
// train over TCP, bit for bit. Runs 2 sync workers with `flags` twice,
// their ps tasks reached over their Unix sockets and over TCP, and expects
// the same parameters bit for bit, and each run's log to say which way.
void ExpectTheUnixSocketChangesNothing(const std::vector<std::string>& flags) {
  std::vector<std::string> ipc_flags = flags, tcp_flags = flags;
  ipc_flags.push_back("--colocated_ipc=true");
  tcp_flags.push_back("--colocated_ipc=false");
  std::string ipc_log, tcp_log;
  const std::vector<float> ipc = RunAndReadParams(2, 64, 1, ipc_flags, &ipc_log);
  const std::vector<float> tcp = RunAndReadParams(2, 64, 1, tcp_flags, &tcp_log);
  EXPECT_EQ(CountOf(ipc_log, "also listening on unix://"), 2) << ipc_log;
  EXPECT_EQ(CountOf(ipc_log, ": over its Unix socket unix://"), 4) << ipc_log;  // 2 workers x 2 ps
  EXPECT_EQ(CountOf(tcp_log, "over its Unix socket"), 0) << tcp_log;
  ASSERT_EQ(ipc.size(), tcp.size());
  ASSERT_FALSE(ipc.empty());
  EXPECT_EQ(std::memcmp(ipc.data(), tcp.data(), sizeof(float) * ipc.size()), 0)
      << "the Unix socket changed the parameters: " << Compare(ipc, tcp).max_abs;
}

// With CURVE (the test secret): the link against CURVE over TCP.
TEST(GoldenEquivalence, TheUnixSocketChangesNothing) { ExpectTheUnixSocketChangesNothing({}); }

// An --insecure job's workers take the same links (their keys from the
// job's id).
TEST(GoldenEquivalence, TheUnixSocketOfAnInsecureJobChangesNothing) {
  ExpectTheUnixSocketChangesNothing({"--insecure"});
}

// Runs 2 sync workers of `batch_size` with `flags` twice, with
// --forward_ahead and without, and expects the same final parameters bit
// for bit; only the first run's log mentions it. Returns how many floats
// the parameters have; `with_log`: the first run's output.
size_t ExpectForwardAheadChangesNothing(int batch_size, const std::vector<std::string>& flags,
                                        std::string* with_log) {
  std::vector<std::string> with_flags = flags, without_flags = flags;
  with_flags.push_back("--forward_ahead=true");
  without_flags.push_back("--forward_ahead=false");
  std::string without_log;
  const std::vector<float> with = RunAndReadParams(2, batch_size, 1, with_flags, with_log);
  const std::vector<float> without =
      RunAndReadParams(2, batch_size, 1, without_flags, &without_log);
  EXPECT_EQ(without_log.find("forward ahead:"), std::string::npos);
  EXPECT_EQ(with.size(), without.size());
  EXPECT_FALSE(with.empty());
  if (with.size() != without.size()) return with.size();
  EXPECT_EQ(std::memcmp(with.data(), without.data(), sizeof(float) * with.size()), 0)
      << "--forward_ahead changed the parameters: " << Compare(with, without).max_abs;
  return with.size();
}

// Forward ahead where its waits count a reply's pieces: cnn_large's shards
// (2.4 MB each over 2 ps) come back in pieces under CURVE (over TCP, as
// from another host), first layers first, so conv1's forward starts on the
// first piece of shard 0. The parameters are still those of a run without
// it, bit for bit.
TEST(GoldenEquivalence, ForwardAheadOnRepliesInPiecesChangesNothing) {
  std::string with_log;
  const size_t floats = ExpectForwardAheadChangesNothing(
      16, {"--model=cnn_large", "--max_steps=6", "--colocated_ipc=false"}, &with_log);
  EXPECT_EQ(floats, 1199882u);
  EXPECT_EQ(CountOf(with_log, "forward ahead: 5 steps"), 2) << with_log;
  EXPECT_EQ(CountOf(with_log, "(replies in pieces: "), 2) << with_log;
  EXPECT_EQ(CountOf(with_log, "(replies in pieces: 0 pieces)"), 0) << with_log;
}

// Forward ahead (on with --overlap) across what breaks the chain of steps:
// an epoch's end and the chief's evaluations, where no forward may run
// ahead (the loop does not go straight on), and a last batch of the epoch
// smaller than the others. Batches of 2,048 so that an epoch is 15 steps.
TEST(GoldenEquivalence, ForwardAheadChangesNothingAcrossEpochsAndEvaluations) {
  std::string with_log;
  ExpectForwardAheadChangesNothing(2048, {"--epochs=2", "--max_steps=18", "--eval_every_steps=4"},
                                   &with_log);
  // Steps 1-17 could; not step 15 (an epoch begins) for either worker, nor
  // 4, 8, 12 and 16 for the chief (it evaluates before them).
  EXPECT_EQ(CountOf(with_log, "forward ahead: 16 steps"), 1) << with_log;
  EXPECT_EQ(CountOf(with_log, "forward ahead: 12 steps"), 1) << with_log;
}

// With more than two workers the order of the ps's sum shows in its
// rounding; the ps sums each version in rank order (SyncPolicy), so a sync
// run repeats bit for bit however its pushes arrive. Two runs of 2 ps + 3
// workers with 37 examples each (products that round), 10 steps, one with
// worker 0 slowed (its push comes last every step), one with worker 2.
TEST(GoldenEquivalence, ThreeSyncWorkersRepeatBitForBitWhicheverPushesFirst) {
  auto run = [](int slowed) {
    std::vector<std::vector<std::string>> per_worker(3);
    per_worker[slowed] = {"--straggler_delay_ms=40"};
    return RunAndReadParams(3, 37, 3, {"--max_steps=10"}, nullptr, per_worker);
  };
  const std::vector<float> first = run(0);
  const std::vector<float> second = run(2);
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), sizeof(float) * first.size()), 0)
      << "the arrival order changed the parameters: " << Compare(first, second).max_abs;
}

}  // namespace
}  // namespace pstrain

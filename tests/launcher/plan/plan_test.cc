// `pstrain plan`'s model (launcher/plan/plan_model.h), the bytes it puts on the
// wire (launcher/plan/plan_calibration.h) and its flags (launcher/plan/plan.h). The
// command on a real run directory: tests/integration/experiment_commands_test.cc.

#include "launcher/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/shard_plan.h"
#include "common/wire_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/plan/plan_calibration.h"
#include "launcher/plan/plan_model.h"
#include "launcher/reporting/run_record.h"
#include "models/net_spec.h"
#include "proto/run_summary.pb.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A compute distribution with stragglers: most steps near 10 ms, one in
// twenty between 25 and 40 ms.
std::vector<double> StragglerSamples() {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> usual(10.0, 1.0);
  std::uniform_real_distribution<double> slow(25.0, 40.0);
  std::vector<double> v;
  for (int i = 0; i < 400; ++i) v.push_back(i % 20 == 0 ? slow(rng) : std::max(0.0, usual(rng)));
  std::sort(v.begin(), v.end());
  return v;
}

TEST(OrderStatistic, MatchesABruteForceSimulationOfTheSameDistribution) {
  const std::vector<double> samples = StragglerSamples();
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<size_t> pick(0, samples.size() - 1);
  constexpr int kTrials = 200000;
  for (int n : {1, 2, 3, 8, 16, 64}) {
    double sum = 0, sum_sq = 0;
    for (int t = 0; t < kTrials; ++t) {
      double m = 0;
      for (int i = 0; i < n; ++i) m = std::max(m, samples[pick(rng)]);
      sum += m;
      sum_sq += m * m;
    }
    const double mean = sum / kTrials;
    const double standard_error = std::sqrt((sum_sq / kTrials - mean * mean) / kTrials);
    // Seeded: the same draws every run; 5 standard errors never trip on a
    // correct formula, and a wrong one misses by far more.
    EXPECT_NEAR(OrderStatisticMean(samples, n), mean, 5 * standard_error + 1e-9) << "n=" << n;
  }
}

TEST(OrderStatistic, OfOneIsTheMeanAndGrowsWithTheStragglerTail) {
  const std::vector<double> samples = StragglerSamples();
  const double mean = std::accumulate(samples.begin(), samples.end(), 0.0) / samples.size();
  EXPECT_NEAR(OrderStatisticMean(samples, 1), mean, 1e-9);
  // One straggler in twenty: 64 workers nearly always wait for one.
  EXPECT_GT(OrderStatisticMean(samples, 64), 25.0);
  EXPECT_LT(OrderStatisticMean(samples, 2), OrderStatisticMean(samples, 64));
  EXPECT_LE(OrderStatisticMean(samples, 1000), samples.back());
}

// The bytes a worker's push of shard k takes, as the wire codec writes it.
double EncodedPushBytes(const std::string& wire_text, size_t n) {
  const WireEncoding wire = ParseWireEncoding(wire_text).value();
  std::vector<float> gradient(n);
  for (size_t i = 0; i < n; ++i) gradient[i] = std::sin(static_cast<float>(i)) * 0.01f;
  const uint64_t k = wire.kind == proto::TOPK ? TopKCount(wire.topk_ratio, n) : 0;
  std::vector<char> out;
  std::vector<uint32_t> scratch;
  EncodeGradient(wire.kind, k, gradient, &out, &scratch);
  return static_cast<double>(out.size());
}

TEST(StepBytes, PushesAreWhatTheWireCodecWritesForEachShardOfThePlan) {
  for (const std::string model : {"mnist_cnn", "cnn_large"}) {
    const absl::StatusOr<std::vector<models::ParamSpec>> specs =
        models::NetParamSpecs(models::GetNetSpec(model).value());
    ASSERT_TRUE(specs.ok()) << specs.status();
    std::vector<TensorSlot> slots;
    for (const models::ParamSpec& s : *specs) slots.push_back({s.name, s.size});
    for (const std::string strategy : {"balanced", "tensor_aligned"}) {
      for (int ps : {1, 2, 3, 4}) {
        const ShardPlan plan =
            ShardPlan::Create(model, slots, ps, ParseShardStrategy(strategy).value()).value();
        for (const std::string wire : {"f32", "bf16", "fp16", "topk:0.01"}) {
          std::vector<double> push, pull;
          std::vector<int64_t> begins;
          ASSERT_TRUE(StepBytes({model, 0, wire, strategy}, ps, &push, &pull, &begins).ok());
          ASSERT_EQ(push.size(), static_cast<size_t>(ps));
          ASSERT_EQ(begins.size(), static_cast<size_t>(ps));
          for (int k = 0; k < ps; ++k) {
            const size_t n = static_cast<size_t>(plan.range(k).size());
            EXPECT_EQ(push[k], EncodedPushBytes(wire, n)) << model << " " << strategy << " " << wire << " " << k;
            EXPECT_EQ(pull[k], 4.0 * n);  // parameters come back f32
            EXPECT_EQ(begins[k], plan.range(k).begin);
          }
        }
      }
    }
  }
}

TEST(StepBytes, AParameterCountIsOneBalancedTensor) {
  std::vector<double> push, pull;
  std::vector<int64_t> begins;
  ASSERT_TRUE(StepBytes({"", 25'000'000, "bf16", "balanced"}, 8, &push, &pull, &begins).ok());
  EXPECT_TRUE(begins.empty());  // no model's layers: no overlap
  EXPECT_EQ(std::accumulate(pull.begin(), pull.end(), 0.0), 4.0 * 25'000'000);
  EXPECT_EQ(std::accumulate(push.begin(), push.end(), 0.0), 2.0 * 25'000'000);
  EXPECT_EQ(pull.front(), pull.back());
}

TEST(StepBytes, RefusesWhatThePlanCannotCut) {
  std::vector<double> push, pull;
  std::vector<int64_t> begins;
  EXPECT_EQ(StepBytes({"resnet", 0, "f32", "balanced"}, 1, &push, &pull, &begins).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StepBytes({"mnist_cnn", 0, "f64", "balanced"}, 1, &push, &pull, &begins).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StepBytes({"", 3, "f32", "balanced"}, 4, &push, &pull, &begins).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StepBytes, AScriptsMeasuredBytesAreSplitEvenlyOverThePs) {
  ModelShape shape;
  shape.model = "pytorch (train.py)";
  shape.step_push_bytes = 4000;
  shape.step_pull_bytes = 6000;
  std::vector<double> push, pull;
  std::vector<int64_t> begins;
  ASSERT_TRUE(StepBytes(shape, 4, &push, &pull, &begins).ok());
  EXPECT_TRUE(begins.empty());
  EXPECT_THAT(push, ElementsAre(1000, 1000, 1000, 1000));
  EXPECT_THAT(pull, ElementsAre(1500, 1500, 1500, 1500));
}

// A script's run (pstrain.torch): its model is the script, its bytes what
// its ps tasks counted over the workers' steps.
TEST(ReadCalibrationRun, AScriptsRunIsItsScriptWithTheBytesItsPsCounted) {
  const std::string dir = ::testing::TempDir() + "/plan_script_run";
  ASSERT_TRUE(MakeDirs(dir).ok());
  proto::RunSummary summary;
  summary.set_model("pytorch");
  summary.set_command("pstrain launch --mode=sync -- python3 examples/dlrm.py --batch=256");
  summary.set_mode("sync");
  summary.set_num_ps(2);
  summary.set_num_workers(1);
  summary.set_batch_size(256);
  for (int k = 0; k < 2; ++k) {
    proto::ShardSummary* s = summary.add_shards();
    s->set_shard(k);
    s->set_bytes_received(100000 * (k + 1));  // 300,000 over 20 steps
    s->set_bytes_sent(200000 * (k + 1));      // 600,000
  }
  ASSERT_TRUE(WriteFileAtomic(dir + "/summary.json", ToJson(summary)).ok());
  std::string steps =
      "step,epoch,unix_time,elapsed_s,loss,examples,version,min_clock,staleness,dropped,"
      "compute_ms,comm_ms,wait_ms,ahead_ms\n";
  for (int i = 0; i < 20; ++i) {
    absl::StrAppend(&steps, i, ",0,", 1000 + 0.012 * i, ",", 0.012 * i, ",0.5,256,", i, ",", i + 1,
                    ",0,0,10,2,1.5,0\n");
  }
  ASSERT_TRUE(WriteFileAtomic(dir + "/steps_worker0.csv", steps).ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/evals.csv",
                              "step,epoch,train_seconds,test_loss,test_accuracy,epoch_end\n")
                  .ok());
  auto run = ReadCalibrationRun(dir, 2);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->shape.model, "pytorch (examples/dlrm.py)");
  EXPECT_DOUBLE_EQ(run->shape.step_push_bytes, 15000);
  EXPECT_DOUBLE_EQ(run->shape.step_pull_bytes, 30000);
  EXPECT_THAT(run->cell.push_bytes, ElementsAre(7500, 7500));
  EXPECT_THAT(run->cell.pull_bytes, ElementsAre(15000, 15000));
  EXPECT_DOUBLE_EQ(run->wait_ms, 1.5);  // the ps held each push 1.5 ms
  // A step log without the column (an older launcher's) does not say.
  std::string old_steps = "step,epoch,unix_time,elapsed_s,loss,examples,compute_ms,comm_ms\n";
  for (int i = 0; i < 20; ++i) {
    absl::StrAppend(&old_steps, i, ",0,", 1000 + 0.012 * i, ",", 0.012 * i, ",0.5,256,10,2\n");
  }
  ASSERT_TRUE(WriteFileAtomic(dir + "/steps_worker0.csv", old_steps).ok());
  auto old = ReadCalibrationRun(dir, 2);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->wait_ms, -1);
  ASSERT_TRUE(WriteFileAtomic(dir + "/steps_worker0.csv", steps).ok());
  // A summary without the ps tasks' byte counts cannot say them.
  summary.clear_shards();
  ASSERT_TRUE(WriteFileAtomic(dir + "/summary.json", ToJson(summary)).ok());
  EXPECT_THAT(ReadCalibrationRun(dir, 2).status().message(), HasSubstr("bytes its ps tasks"));
}

TEST(FitLinearCost, TwoSizesGiveTheLineAndOneSizeACostPerByte) {
  const LinearCost line = FitLinearCost({{1e5, 0.3}, {1e7, 10.2}, {1e6, 1.2}});
  EXPECT_NEAR(line.fixed_ms, 0.2, 1e-9);
  EXPECT_NEAR(line.per_byte_ms, 1e-6, 1e-15);
  const LinearCost per_byte = FitLinearCost({{2e6, 4.0}, {2e6, 6.0}});
  EXPECT_EQ(per_byte.fixed_ms, 0);
  EXPECT_NEAR(per_byte.per_byte_ms * 2e6, 5.0, 1e-9);
  // A slope below zero (noise) is no cost per byte.
  const LinearCost flat = FitLinearCost({{1e5, 0.5}, {1e6, 0.4}});
  EXPECT_EQ(flat.per_byte_ms, 0);
  EXPECT_NEAR(flat.fixed_ms, 0.45, 1e-12);
}

// Link bytes per payload byte: TCP/IPv4/Ethernet, 1500-byte MTU.
constexpr double kFrame = 1514.0 / 1448.0;

PlanCalibration Calibration() {
  PlanCalibration c;
  c.before_push_ms = StragglerSamples();
  c.ahead_ms = 2;
  c.gap_ms = 0.1;
  c.batch_size = 100;
  c.ps_request = {0.1, 1e-6};     // 0.1 ms + 1 ms per MB
  c.latency = {0.5, 0};
  c.worker_comm_cpu = {0.2, 0};
  return c;
}

PlanCell Cell(int workers, int ps, bool sync, double bytes_per_shard = 4e5) {
  PlanCell c;
  c.workers = workers;
  c.ps = ps;
  c.sync = sync;
  c.placement = Placement::kHostPerTask;
  c.push_bytes.assign(ps, bytes_per_shard / ps);
  c.pull_bytes.assign(ps, bytes_per_shard / ps);
  return c;
}

double SplitSum(const PlanSplit& s) {
  return s.compute_ms + s.barrier_ms + s.sharing_ms + s.transfer_ms + s.ps_ms + s.other_ms + s.bound_ms;
}

TEST(Predict, OneWorkerIsItsComputeAndOneRoundTripInEitherMode) {
  const PlanCalibration cal = Calibration();
  const double b = cal.mean_before_push_ms();
  const double s = 0.1 + 0.8;  // 0.8 MB a request
  for (bool sync : {true, false}) {
    const PlanPrediction p = Predict(cal, Cell(1, 1, sync));
    EXPECT_NEAR(p.step_ms, b + 0.5 + s + 2 + 0.1, 1e-9) << sync;
    EXPECT_NEAR(p.images_per_second, 100 / p.step_ms * 1e3, 1e-9);
    EXPECT_EQ(p.bound, "compute");
    EXPECT_EQ(p.staleness, 0);
  }
}

TEST(Predict, TheSplitAddsUpToTheStep) {
  const PlanCalibration cal = Calibration();
  std::vector<PlanCell> cells;
  for (bool sync : {true, false}) {
    for (int workers : {1, 3, 8, 64}) {
      cells.push_back(Cell(workers, 2, sync));
      PlanCell host = Cell(workers, 1, sync);
      host.placement = Placement::kOneHost;
      host.host_cores = 2;
      cells.push_back(host);
      PlanCell link = Cell(workers, 4, sync, 4.8e6);
      link.link_bytes_per_s = 125e6;
      link.link = workers % 2 == 0 ? LinkKind::kNic : LinkKind::kNetns;
      cells.push_back(link);
    }
  }
  PlanCalibration sharing = cal;
  sharing.sharing_cost = 0.1;
  for (const PlanCell& cell : cells) {
    for (const PlanCalibration* c : std::vector<const PlanCalibration*>{&cal, &sharing}) {
      const PlanPrediction p = Predict(*c, cell);
      EXPECT_NEAR(SplitSum(p.split), p.step_ms, 1e-6 * p.step_ms)
          << cell.workers << " workers, " << cell.ps << " ps, sync " << cell.sync;
    }
  }
}

TEST(Predict, SyncWaitsForTheSlowestWorkerAsyncDoesNot) {
  const PlanCalibration cal = Calibration();
  const PlanPrediction sync = Predict(cal, Cell(64, 8, true));
  const PlanPrediction async = Predict(cal, Cell(64, 8, false));
  EXPECT_NEAR(sync.split.barrier_ms,
              OrderStatisticMean(cal.before_push_ms, 64) - cal.mean_before_push_ms(), 1e-9);
  EXPECT_EQ(async.split.barrier_ms, 0);
  EXPECT_GT(async.images_per_second, sync.images_per_second);
  // The other 63 workers' updates land between a pull and its push.
  EXPECT_GT(async.staleness, 55);
  EXPECT_LT(async.staleness, 63);
}

TEST(Predict, ASlowLinkBindsTheServerAndMorePsRelieveIt) {
  const PlanCalibration cal = Calibration();
  PlanCell one = Cell(16, 1, false, 4.8e6);
  one.link_bytes_per_s = 12.5e6;  // 100 Mbit/s
  const PlanPrediction p1 = Predict(cal, one);
  EXPECT_EQ(p1.bound, "ps link");
  EXPECT_NEAR(p1.ps_link_utilisation[0], 1.0, 1e-9);
  EXPECT_NEAR(p1.step_ms, kFrame * 16 * 4.8e6 / 12.5e6 * 1e3, 1e-6);  // its pulls (and, on a NIC, pushes)
  PlanCell four = one;
  four.ps = 4;
  StepBytes({"", 1'200'000, "f32", "balanced"}, 4, &four.push_bytes, &four.pull_bytes,
            &four.shard_begin)
      .IgnoreError();
  const PlanPrediction p4 = Predict(cal, four);
  EXPECT_GT(p4.images_per_second, 3.5 * p1.images_per_second);
}

TEST(PlanCalibration, ALeadIsTheLargestOffsetsAtOrBelowTheShardsBegin) {
  PlanCalibration cal;
  EXPECT_EQ(cal.LeadFraction(0), 0);  // no leads: every push at the end
  cal.backward_leads = {{0, 0.0}, {320, 0.05}, {18816, 0.9}};
  EXPECT_EQ(cal.LeadFraction(0), 0.0);
  EXPECT_EQ(cal.LeadFraction(319), 0.0);
  EXPECT_EQ(cal.LeadFraction(320), 0.05);
  EXPECT_EQ(cal.LeadFraction(600000), 0.9);  // inside the last layer: final with it
}

// --overlap: a shard whose gradient backward finishes early leaves before
// the compute ends; on a limited link its push is then off the step's path.
TEST(Predict, AShardFinishedEarlyCrossesTheLinkWhileBackwardRuns) {
  PlanCalibration cal = Calibration();
  for (bool sync : {true, false}) {
    PlanCell cell = Cell(1, 2, sync, 8e5);
    cell.link_bytes_per_s = 12.5e6;  // 100 Mbit/s, a NIC: 33 ms a shard's push
    cell.shard_begin = {0, 1000};
    cal.backward_leads.clear();
    const PlanPrediction plain = Predict(cal, cell);
    // Shard 1 final at 80% of b (b is about 10 ms here: 8 ms before the
    // end): it goes first and has 8 ms of the link to itself, then shares
    // it with shard 0. The last push ends 8 ms sooner.
    cal.backward_leads = {{0, 0.0}, {1000, 0.8}};
    const PlanPrediction overlapped = Predict(cal, cell);
    const double b = cal.mean_before_push_ms();
    EXPECT_NEAR(plain.step_ms - overlapped.step_ms, 0.8 * b, 1e-6) << sync;
    EXPECT_NEAR(SplitSum(overlapped.split), overlapped.step_ms, 1e-6) << sync;
    // One ps: the worker sends its one shard at the end, whatever the
    // leads say (even of offset 0, which a step's encoding can delay).
    PlanCell one = Cell(1, 1, sync, 8e5);
    one.link_bytes_per_s = 12.5e6;
    one.shard_begin = {0};
    cal.backward_leads = {{0, 0.1}, {1000, 0.8}};
    const PlanPrediction one_overlapped = Predict(cal, one);
    cal.backward_leads.clear();
    EXPECT_NEAR(one_overlapped.step_ms, Predict(cal, one).step_ms, 1e-9) << sync;
  }
}

TEST(Predict, APsWhoseCoreTheWorkersNeedServesAnEarlyShardOnceTheComputeEnds) {
  // Without a link limit a shard that leaves early is at its ps at once;
  // a ps with a core of its own serves it while backward runs, one that
  // shares the workers' cores (2 workers and 2 ps on 2 cores) once they
  // are done: the leads then change nothing.
  PlanCalibration cal = Calibration();
  cal.ps_request = {0.1, 1e-5};  // 10 ms per MB: shard 1's ps takes the longest
  PlanCell cell = Cell(2, 2, true, 8e5);
  cell.push_bytes = {1e5, 7e5};
  cell.pull_bytes = {1e5, 7e5};
  cell.shard_begin = {0, 1000};
  for (bool own_hosts : {true, false}) {
    cell.placement = own_hosts ? Placement::kHostPerTask : Placement::kOneHost;
    cell.host_cores = 2;
    cal.backward_leads.clear();
    const double plain = Predict(cal, cell).step_ms;
    cal.backward_leads = {{1000, 1.0}};
    const double led = Predict(cal, cell).step_ms;
    if (own_hosts) {
      EXPECT_LT(led, plain);
    } else {
      EXPECT_NEAR(led, plain, 1e-9);
    }
  }
}

TEST(Predict, AShardThatLeavesLongBeforeTheEndIsOffThePathAltogether) {
  // Shard 1 final at the very start of b (about 10 ms ahead): its 33 ms
  // push has 10 ms alone, then shard 0's 33 ms follow it. Without a link
  // limit leads change nothing.
  PlanCalibration cal = Calibration();
  PlanCell cell = Cell(1, 2, true, 8e5);
  cell.shard_begin = {0, 1000};
  const PlanPrediction free_plain = Predict(cal, cell);
  cal.backward_leads = {{1000, 1.0}};
  EXPECT_NEAR(Predict(cal, cell).step_ms, free_plain.step_ms, 1e-9);
  cell.link_bytes_per_s = 12.5e6;
  const double shard_ms = kFrame * 4e5 / 12.5e6 * 1e3;
  const double b = cal.mean_before_push_ms();
  cal.backward_leads.clear();
  const double plain = Predict(cal, cell).step_ms;
  cal.backward_leads = {{1000, 1.0}};
  EXPECT_NEAR(plain - Predict(cal, cell).step_ms, b, 1e-6);  // 2 x 33 ms from -b, not from 0
  // With b longer than a push, shard 1 is through before b ends: the
  // step's push is shard 0's alone.
  cal.before_push_ms.assign(10, 50.0);
  cal.backward_leads.clear();
  const double long_plain = Predict(cal, cell).step_ms;
  cal.backward_leads = {{1000, 1.0}};
  EXPECT_NEAR(long_plain - Predict(cal, cell).step_ms, shard_ms, 1e-6);
}

TEST(Predict, TheNetnsBucketCarriesASmallBurstAtOnce) {
  const PlanCalibration cal = Calibration();
  PlanCell small = Cell(1, 1, true, 5e4);  // 50 KB each way, within the 64 KiB bucket
  small.link_bytes_per_s = 12.5e6;
  small.link = LinkKind::kNetns;
  EXPECT_NEAR(Predict(cal, small).split.transfer_ms, 0, 1e-9);
  // On a NIC the push takes 4 ms (in Ethernet frames of 1514 bytes per
  // 1448 of payload), and the pull as long, of which the forward ahead
  // (a = 2 ms) hides 2.
  small.link = LinkKind::kNic;
  EXPECT_NEAR(Predict(cal, small).split.transfer_ms, kFrame * 4 + (kFrame * 4 - 2), 1e-9);
}

TEST(Predict, WorkersSharingOneHostAreBoundByItsCores) {
  const PlanCalibration cal = Calibration();
  PlanCell cell = Cell(8, 1, false);
  cell.placement = Placement::kOneHost;
  cell.host_cores = 2;
  const PlanPrediction p = Predict(cal, cell);
  EXPECT_EQ(p.bound, "host CPU");
  EXPECT_NEAR(p.host_cpu_utilisation, 1.0, 1e-9);
  // A round: every worker's compute, its I/O CPU and its request, over 2 cores.
  const double cpu = cal.mean_before_push_ms() + 2 + 0.2 + 0.9;
  EXPECT_NEAR(p.step_ms, 8 * cpu / 2, 1e-9);
  PlanCalibration sharing = cal;
  sharing.sharing_cost = 0.1;  // 4 workers per core: 30% more CPU each
  EXPECT_NEAR(Predict(sharing, cell).step_ms, 8 * cpu * 1.3 / 2, 1e-9);
  cell.placement = Placement::kHostPerTask;
  EXPECT_EQ(Predict(cal, cell).bound, "compute");
}

TEST(Predict, ThePsCoreBindsWhenItsRequestsOutrunIt) {
  PlanCalibration cal = Calibration();
  cal.ps_request = {2.0, 0};  // 2 ms a request: 1 ms its push, 1 ms its reply
  const PlanPrediction p = Predict(cal, Cell(64, 1, false));
  EXPECT_EQ(p.bound, "ps core");
  EXPECT_NEAR(p.step_ms, 128, 1e-9);
  EXPECT_NEAR(p.ps_core_utilisation[0], 1.0, 1e-9);
  // In sync the round waits for the 64 requests served one by one: its
  // path, not a bound over it, and still the ps's core. On a host of its
  // own the ps serves the faster workers' pushes while the slowest
  // computes (M_64 - b), so only the rest of them, and every reply, are
  // left after it.
  const PlanPrediction sync = Predict(cal, Cell(64, 1, true));
  EXPECT_EQ(sync.bound, "ps core");
  EXPECT_EQ(sync.split.bound_ms, 0);
  const double early = OrderStatisticMean(cal.before_push_ms, 64) - cal.mean_before_push_ms();
  ASSERT_GT(early, 10);
  ASSERT_LT(early, 63);
  EXPECT_NEAR(sync.split.ps_ms, 1 + (63 - early) + 1 + 63, 1e-9);
  EXPECT_LT(sync.images_per_second, p.images_per_second);
}

TEST(Predict, ASyncPsServesEarlyPushesOnlyOnACoreNoWorkerNeeds) {
  PlanCalibration cal = Calibration();
  cal.ps_request = {2.0, 0};
  PlanCell own = Cell(8, 1, true);
  own.placement = Placement::kOneHost;
  own.host_cores = 9;  // 8 workers and the ps, a core each
  PlanCell crowded = own;
  crowded.host_cores = 8;
  // Its own push and reply, the other 7 pushes less what the wait for the
  // slowest covered, and the other 7 replies.
  const double early = OrderStatisticMean(cal.before_push_ms, 8) - cal.mean_before_push_ms();
  ASSERT_GT(early, 1);
  EXPECT_NEAR(Predict(cal, own).split.ps_ms, 1 + std::max(0.0, 7 - early) + 1 + 7, 1e-9);
  EXPECT_NEAR(Predict(cal, crowded).split.ps_ms, 2 + 7 * 2, 1e-9);
  EXPECT_NEAR(Predict(cal, crowded).step_ms - Predict(cal, own).step_ms, std::min(7.0, early), 1e-9);
}

// A step log of `workers` workers, `steps` steps each of `compute_ms` (of
// which `ahead_ms` ran ahead) and `comm_ms`, back to back.
RunRecord StepLog(int workers, int steps, double compute_ms, double ahead_ms, double comm_ms) {
  RunRecord r;
  r.summary.set_batch_size(100);
  r.steps.resize(workers);
  for (std::vector<StepRow>& rows : r.steps) {
    for (int i = 0; i < steps; ++i) {
      StepRow row{i, 1000.0 + (i + 1) * (compute_ms + comm_ms) * 1e-3, 0.5, 100, compute_ms, comm_ms};
      row.wait_ms = 0;
      row.ahead_ms = ahead_ms;
      rows.push_back(row);
    }
  }
  return r;
}

// A run of an older launcher: its step log and summary, no task_cpu.csv.
CalibrationRun StepLogRun(int workers, int ps, double request_bytes, double comm_ms) {
  CalibrationRun run;
  run.run_dir = absl::StrCat("w", workers, "_ps", ps, "_", request_bytes);
  run.record = StepLog(workers, 20, 10, 2, comm_ms);
  run.shape.model = "mnist_cnn";
  run.host_cores = 16;
  run.cell = Cell(workers, ps, true, request_bytes * ps / 2);
  run.cell.placement = Placement::kOneHost;
  run.cell.host_cores = 16;
  run.compute_ms = 10;
  run.comm_ms = comm_ms;
  return run;
}

TEST(Calibrate, TakesTheCostsFromOneWorkerStepLogsWithoutTaskCpu) {
  // 1-worker runs whose push/pull took 1 ms + 2 ms per MB of the request
  // (1, 2 and 4 ps: the same worker bytes, smaller requests); a 4-worker
  // run, which queued, says nothing of one request's cost.
  const std::vector<CalibrationRun> runs = {StepLogRun(1, 1, 2e6, 5), StepLogRun(1, 2, 1e6, 3),
                                            StepLogRun(1, 4, 0.5e6, 2), StepLogRun(4, 1, 2e6, 40)};
  std::vector<std::string> notes;
  const auto cal = Calibrate(runs, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_NEAR(cal->ps_request.fixed_ms, 0.5, 1e-9);
  EXPECT_NEAR(cal->ps_request.per_byte_ms, 1e-6, 1e-15);
  EXPECT_NEAR(cal->latency.fixed_ms, 0.5, 1e-9);
  EXPECT_NEAR(cal->latency.per_byte_ms, 1e-6, 1e-15);
  EXPECT_NEAR(cal->worker_comm_cpu.per_byte_ms, 1e-6, 1e-15);
  EXPECT_NEAR(cal->mean_before_push_ms(), 8, 1e-9);
  EXPECT_NEAR(cal->ahead_ms, 2, 1e-9);
  EXPECT_THAT(absl::StrJoin(notes, " "), HasSubstr("step logs of its 3 1-worker run(s)"));
  // The model gives back each 1-worker run's own step: its compute and
  // its push/pull (lat + s), the gap between steps (here none) aside.
  for (int i = 0; i < 3; ++i) {
    const PlanPrediction p = Predict(*cal, runs[i].cell);
    EXPECT_NEAR(p.step_ms, 10 + runs[i].comm_ms + cal->gap_ms, 1e-6) << runs[i].run_dir;
  }
  // Another share moves the cost between the ps and the worker's latency.
  const auto ps_heavy = Calibrate(runs, "mnist_cnn", false, 0.8, &notes);
  ASSERT_TRUE(ps_heavy.ok());
  EXPECT_NEAR(ps_heavy->ps_request.At(2e6), 0.8 * 5, 1e-9);
  EXPECT_NEAR(ps_heavy->latency.At(2e6), 0.2 * 5, 1e-9);
}

TEST(Calibrate, ReadsHowEvenlyWorkersOutnumberingTheCoresShareThem) {
  // 1-worker runs compute 10 ms a step (8 before the push, 2 ahead). Three
  // workers on 2 cores take 20 ms if one core keeps two of them (sigma 0),
  // 15 if the scheduler spreads the three over both (sigma 1).
  const CalibrationRun alone = StepLogRun(1, 1, 2e6, 5);
  std::vector<std::string> notes;
  auto cal = Calibrate({alone}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_EQ(cal->core_spread, 0);
  EXPECT_THAT(absl::StrJoin(notes, " "), HasSubstr("outnumbering the cores unevenly"));
  EXPECT_EQ(WorkersPerCore(*cal, 3, 2), 2);
  CalibrationRun uneven = StepLogRun(3, 2, 1e6, 5);
  uneven.host_cores = 2;
  uneven.cell.host_cores = 2;
  for (const auto& [compute_ms, spread] : std::vector<std::pair<double, double>>{
           {15, 1.0}, {17.5, 0.5}, {20, 0.0}, {25, 0.0}, {12, 1.0}}) {
    uneven.compute_ms = compute_ms;
    cal = Calibrate({alone, uneven}, "mnist_cnn", false, 0.5, &notes);
    ASSERT_TRUE(cal.ok()) << cal.status();
    EXPECT_NEAR(cal->core_spread, spread, 1e-9) << compute_ms;
  }
  // The round waits for its slowest worker: a mean compute of 12.5 ms
  // whose pushes the ps held 5 ms for the others is a slowest of 17.5.
  uneven.compute_ms = 12.5;
  uneven.wait_ms = 5;
  cal = Calibrate({alone, uneven}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok());
  EXPECT_NEAR(cal->core_spread, 0.5, 1e-9);
  uneven.wait_ms = -1;  // a step log without the column: the compute alone
  cal = Calibrate({alone, uneven}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok());
  EXPECT_NEAR(cal->core_spread, 1.0, 1e-9);
  uneven.wait_ms = 0;
  // What a round of W workers on H cores computes, by sigma.
  cal->core_spread = 0.5;
  EXPECT_NEAR(WorkersPerCore(*cal, 3, 2), 1.75, 1e-12);
  EXPECT_NEAR(WorkersPerCore(*cal, 5, 2), 2.75, 1e-12);
  EXPECT_EQ(WorkersPerCore(*cal, 4, 2), 2);
  EXPECT_EQ(WorkersPerCore(*cal, 2, 2), 1);
  EXPECT_EQ(WorkersPerCore(*cal, 1, 2), 1);
  // A round on limited links starts its workers apart, and an async run
  // has no rounds: neither says how the scheduler spreads a round.
  uneven.compute_ms = 15;
  uneven.link_bytes_per_s = 37.5e6;
  cal = Calibrate({alone, uneven}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok());
  EXPECT_EQ(cal->core_spread, 0);
  uneven.link_bytes_per_s = 0;
  uneven.sync = false;
  cal = Calibrate({alone, uneven}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok());
  EXPECT_EQ(cal->core_spread, 0);
}

TEST(Calibrate, FitsTheCostOfSharingACoreThroughTheOriginOverTheRuns) {
  // A worker's CPU per step grows 20% with 2 workers a core and 30% with
  // 1.5: the line through the origin, (1 x 0.2 + 0.5 x 0.3) / (1 + 0.25),
  // where the run with fewer additional workers weighs less.
  const CalibrationRun alone = StepLogRun(1, 1, 2e6, 5);
  std::vector<std::string> notes;
  const auto base = Calibrate({alone}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(base.ok()) << base.status();
  std::vector<CalibrationRun> runs = {alone};
  for (const auto& [workers, growth] : std::vector<std::pair<int, double>>{{4, 0.2}, {3, 0.3}}) {
    CalibrationRun r = StepLogRun(workers, 1, 2e6, 5);
    r.host_cores = 2;
    r.cell.host_cores = 2;
    r.compute_ms = 20;  // two a core, whatever the scheduler: sigma says nothing here
    r.wait_ms = -1;
    const double bytes = std::accumulate(r.cell.push_bytes.begin(), r.cell.push_bytes.end(), 0.0) +
                         std::accumulate(r.cell.pull_bytes.begin(), r.cell.pull_bytes.end(), 0.0);
    r.worker_cpu_ms =
        (base->mean_before_push_ms() + base->ahead_ms + base->worker_comm_cpu.At(bytes)) *
        (1 + growth);
    runs.push_back(r);
  }
  const auto cal = Calibrate(runs, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_NEAR(cal->sharing_cost, 0.35 / 1.25, 1e-9);
}

TEST(Calibrate, ReadsWhenEachOffsetsGradientWasFinalOverTheComputeBeforeThePush) {
  // Two runs computing 10 ms a step (8 before the push): the gradient
  // from offset 100 on final 4 and 6 ms before the push, 50% and 75%.
  std::vector<CalibrationRun> runs = {StepLogRun(1, 1, 2e6, 5), StepLogRun(1, 1, 2e6, 5)};
  for (int i = 0; i < 2; ++i) {
    proto::StepPhases* p = runs[i].record.summary.mutable_chief_step_ms();
    p->set_compute_ms(10);
    p->set_ahead_ms(2);
    proto::BackwardLead* late = p->add_backward_leads();
    late->set_begin(100);
    late->set_lead_ms(i == 0 ? 4 : 6);
    proto::BackwardLead* first = p->add_backward_leads();  // in any order
    first->set_begin(0);
    first->set_lead_ms(0);
  }
  std::vector<std::string> notes;
  const auto cal = Calibrate(runs, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok()) << cal.status();
  ASSERT_EQ(cal->backward_leads.size(), 2u);
  EXPECT_EQ(cal->backward_leads[0], (std::pair<int64_t, double>{0, 0.0}));
  EXPECT_EQ(cal->backward_leads[1].first, 100);
  EXPECT_NEAR(cal->backward_leads[1].second, 0.625, 1e-12);
  EXPECT_NEAR(cal->LeadFraction(150), 0.625, 1e-12);
  // A run that recorded none (an older worker's, a script's) leaves none.
  const auto none = Calibrate({StepLogRun(1, 1, 2e6, 5)}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->backward_leads.empty());
}

TEST(Calibrate, PoolsItsRunsAtTheirTypicalSpeed) {
  // Three 1-worker runs of one cell; the third drew a slow minute of its
  // host (30% slower). Pooled as they came, its steps would move the
  // compute by a third of that; scaled to the runs' median speed, the
  // compute is the typical run's: 8 ms before the push, 2 ahead.
  std::vector<CalibrationRun> runs = {StepLogRun(1, 1, 2e6, 5), StepLogRun(1, 1, 2e6, 5),
                                      StepLogRun(1, 1, 2e6, 5)};
  runs[2].record = StepLog(1, 20, 13, 2.6, 5);
  runs[2].compute_ms = 13;
  std::vector<std::string> notes;
  const auto cal = Calibrate(runs, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_NEAR(cal->mean_before_push_ms(), 8, 1e-9);
  EXPECT_NEAR(cal->ahead_ms, 2, 1e-9);
  // A run's own spread stays: one whose steps alternate 6 and 8 ms before
  // the push is scaled as a whole, its slowest step still 8/6 of its
  // fastest, and the pooled steps' middle is the typical 8.
  runs[2].record = StepLog(1, 20, 10, 2, 5);
  for (size_t i = 0; i < runs[2].record.steps[0].size(); i += 2) {
    runs[2].record.steps[0][i].compute_ms = 8;  // 6 before the push
  }
  const auto spread = Calibrate(runs, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(spread.ok()) << spread.status();
  const std::vector<double>& b = spread->before_push_ms;
  EXPECT_NEAR(b.back() / b.front(), 8.0 / 6.0, 1e-9);
  EXPECT_NEAR(b[b.size() / 2], 8, 1e-9);
}

TEST(Calibrate, AFullHostsWaitInTheComputeIsWhatItTookBeyondItsCpu) {
  // Alone: b 8 ms + a 2 ms. On 2 cores, 4 workers (2 a core) computed 26 ms
  // a step where their CPU (sharing costs nothing here) is 2 x 10 ms.
  CalibrationRun crowded = StepLogRun(4, 1, 2e6, 40);
  crowded.host_cores = 2;
  crowded.cell.host_cores = 2;
  crowded.compute_ms = 26;
  std::vector<std::string> notes;
  const auto cal = Calibrate({StepLogRun(1, 1, 2e6, 5), crowded}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_NEAR(cal->busy_core_wait_ms, 3, 1e-9);
  EXPECT_THAT(absl::StrJoin(notes, " "), HasSubstr("waits 3.00 ms more per worker on its core"));
  // Without a run with more workers than cores there is no wait, and the
  // notes say what would give one.
  notes.clear();
  EXPECT_EQ(
      Calibrate({StepLogRun(1, 1, 2e6, 5)}, "mnist_cnn", false, 0.5, &notes)->busy_core_wait_ms, 0);
  EXPECT_THAT(absl::StrJoin(notes, " "),
              HasSubstr("calibrate with a run of as many workers as cores"));
}

TEST(Calibrate, AFullHostsWaitComesFromARunWithAWorkerOnEveryCore) {
  // Alone: b 8 ms + a 2 ms. On 2 cores, 2 workers and 3 ps: a compute of
  // 13.667 ms a step, 3.667 beyond alone, the last of 3 ps' waits: q = 2.
  CalibrationRun full = StepLogRun(2, 3, 2e6, 4);
  full.host_cores = 2;
  full.cell.host_cores = 2;
  full.compute_ms = 10 + 2 * Harmonic(3);
  // A crowded run, whose compute (it holds waits another worker's compute
  // fills) is below 2 workers' CPU on a core: no wait could be read from it.
  CalibrationRun crowded = StepLogRun(4, 1, 2e6, 40);
  crowded.host_cores = 2;
  crowded.cell.host_cores = 2;
  crowded.compute_ms = 19;
  std::vector<std::string> notes;
  const auto cal =
      Calibrate({StepLogRun(1, 1, 2e6, 5), crowded, full}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_NEAR(cal->busy_core_wait_ms, 2, 1e-9);
  EXPECT_THAT(absl::StrJoin(notes, " "), HasSubstr("from 1 run(s) with as many workers as cores"));
  // Its workers never waited at the barrier (their compute ended at one of
  // its own): rho 0. Each waits for the last of its 3 ps (q H_3), the
  // slower of two for the last of 6: q (H_6 - H_3) = 1.233 ms more. Had
  // they waited half that, rho 0.5; had they waited more than all of it
  // (heavier tails, or the ps's queue), 1.
  EXPECT_EQ(cal->barrier_share, 0);
  const double independent = 2 * (Harmonic(6) - Harmonic(3));
  for (const auto& [wait, rho] : {std::pair{0.5 * independent, 0.5}, {3 * independent, 1.0}}) {
    full.wait_ms = wait;
    notes.clear();
    const auto c =
        Calibrate({StepLogRun(1, 1, 2e6, 5), crowded, full}, "mnist_cnn", false, 0.5, &notes);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_NEAR(c->barrier_share, rho, 1e-9) << wait;
    EXPECT_THAT(absl::StrJoin(notes, " "),
                HasSubstr(absl::StrCat("waited at it ", static_cast<int>(100 * rho), "% of what")));
  }
  // Not from an async run (no barrier), a step log that did not record
  // the wait, a run with a link limit (its waits are the link's), nor one
  // whose waits are too small against the compute to say anything (q 0.12:
  // 0.074 ms for the slower of two, under 1% of 10 ms): rho stays 1, and
  // the notes say it was not read.
  enum Unread { kAsync, kNoColumn, kLink, kTiny };
  for (Unread why : {kAsync, kNoColumn, kLink, kTiny}) {
    CalibrationRun unread = full;
    unread.wait_ms = 0.5 * independent;
    double q = 2;
    switch (why) {
      case kAsync:
        unread.sync = false;
        break;
      case kNoColumn:
        unread.wait_ms = -1;
        break;
      case kLink:
        unread.link_bytes_per_s = 1e6;
        break;
      case kTiny:
        q = 0.12;
        unread.compute_ms = 10 + q * Harmonic(3);
        unread.wait_ms = 0.5 * q * (Harmonic(6) - Harmonic(3));
        break;
    }
    notes.clear();
    const auto c =
        Calibrate({StepLogRun(1, 1, 2e6, 5), crowded, unread}, "mnist_cnn", false, 0.5, &notes);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->barrier_share, 1) << why;
    EXPECT_NEAR(c->busy_core_wait_ms, q, 1e-9) << why;
    EXPECT_THAT(absl::StrJoin(notes, " "), HasSubstr("taken as all of it")) << why;
  }
  // Without it, the crowded run's reading: none.
  EXPECT_EQ(Calibrate({StepLogRun(1, 1, 2e6, 5), crowded}, "mnist_cnn", false, 0.5, &notes)
                ->busy_core_wait_ms,
            0);
}

TEST(Calibrate, AFullHostsWaitIsNotReadFromTheRunsTheComputeAloneCameFrom) {
  // Every run has more tasks than cores: the compute alone comes from the
  // 2-worker runs, which have a worker on every core, and must not also
  // say what a full host adds to it. The 4-worker run does (2 x 10 ms of
  // CPU on a core, 26 ms of compute: q 3).
  CalibrationRun full = StepLogRun(2, 1, 2e6, 4), crowded = StepLogRun(4, 1, 2e6, 40);
  for (CalibrationRun* r : {&full, &crowded}) {
    r->host_cores = 2;
    r->cell.host_cores = 2;
    r->ps_cpu_ms_per_request = {0.5};  // task_cpu.csv: the costs come from it
    r->worker_cpu_ms = 10;
  }
  full.compute_ms = 14;  // what the step log says (b 8 + a 2 in StepLog), read high
  crowded.compute_ms = 26;
  std::vector<std::string> notes;
  const auto cal = Calibrate({full, crowded}, "mnist_cnn", false, 0.5, &notes);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_NEAR(cal->busy_core_wait_ms, 3, 1e-9);
  EXPECT_THAT(absl::StrJoin(notes, " "), HasSubstr("with more workers than cores"));
  // Nor rho (the baseline's wait_ms is 0, which would read as 0).
  EXPECT_EQ(cal->barrier_share, 1);
  EXPECT_THAT(absl::StrJoin(notes, " "), HasSubstr("taken as all of it"));
}

TEST(Predict, ASyncBarrierWaitsForTheSlowestWorkersWait) {
  PlanCalibration cal = Calibration();
  PlanCalibration waits = cal;
  waits.busy_core_wait_ms = 3;
  for (int workers : {2, 4}) {
    PlanCell cell = Cell(workers, 1, true);
    cell.placement = Placement::kOneHost;
    cell.host_cores = workers;
    const PlanPrediction with = Predict(waits, cell), without = Predict(cal, cell);
    // Each worker waits 3 ms on average; the slowest of W, 3 H_W.
    EXPECT_NEAR(with.split.sharing_ms - without.split.sharing_ms, 3, 1e-9) << workers;
    EXPECT_NEAR(with.split.barrier_ms - without.split.barrier_ms, 3 * (Harmonic(workers) - 1), 1e-9)
        << workers;
    EXPECT_NEAR(SplitSum(with.split), with.step_ms, 1e-9);
    // A compute that ends at a barrier of its own (rho 0): the round
    // waits for no more than one worker's wait.
    PlanCalibration own = waits;
    own.barrier_share = 0;
    EXPECT_NEAR(Predict(own, cell).split.barrier_ms, without.split.barrier_ms, 1e-9) << workers;
    EXPECT_NEAR(Predict(own, cell).step_ms, without.step_ms + 3, 1e-9) << workers;
    // Async has no barrier: each worker's own wait.
    cell.sync = false;
    EXPECT_EQ(Predict(waits, cell).split.barrier_ms, 0) << workers;
  }
  // With 3 ps each worker waits for the last of 3 (3 H_3), the slower of
  // 2 for the last of 6: 3 (H_6 - H_3) more at the barrier.
  PlanCell three = Cell(2, 3, true);
  three.placement = Placement::kOneHost;
  three.host_cores = 2;
  EXPECT_NEAR(Predict(waits, three).split.barrier_ms - Predict(cal, three).split.barrier_ms,
              3 * (Harmonic(6) - Harmonic(3)), 1e-9);
  EXPECT_NEAR(Predict(waits, three).split.sharing_ms - Predict(cal, three).split.sharing_ms,
              3 * Harmonic(3), 1e-9);
}

TEST(Predict, AFullHostsWaitLengthensTheComputeButUsesNoCpu) {
  PlanCalibration cal = Calibration();
  PlanCell cell = Cell(2, 1, true);
  cell.placement = Placement::kOneHost;
  cell.host_cores = 4;
  PlanCalibration waits = cal;
  waits.busy_core_wait_ms = 3;
  // A core to spare: no wait.
  EXPECT_NEAR(Predict(waits, cell).step_ms, Predict(cal, cell).step_ms, 1e-9);
  for (bool sync : {true, false}) {
    cell.sync = sync;
    cell.host_cores = 2;  // every core has a worker: each step's compute waits q
    const PlanPrediction with = Predict(waits, cell), without = Predict(cal, cell);
    EXPECT_NEAR(with.split.sharing_ms - without.split.sharing_ms, 3, 1e-9) << sync;
    EXPECT_NEAR(SplitSum(with.split), with.step_ms, 1e-9);
    EXPECT_GT(with.step_ms, without.step_ms + (sync ? 2.9 : 1.0)) << sync;
    // It is not CPU: the host's utilisation falls as the step grows.
    EXPECT_LT(with.host_cpu_utilisation, without.host_cpu_utilisation) << sync;
  }
  // With 4 ps the compute waits for the last of 4: 3 x (1 + 1/2 + 1/3 + 1/4).
  PlanCell four = Cell(2, 4, true);
  four.placement = Placement::kOneHost;
  four.host_cores = 2;
  EXPECT_NEAR(Predict(waits, four).split.sharing_ms - Predict(cal, four).split.sharing_ms,
              3 * 25.0 / 12, 1e-9);
  EXPECT_NEAR(Harmonic(4), 25.0 / 12, 1e-12);
}

TEST(Calibrate, RefusesRunsWithNeitherTaskCpuNorAOneWorkerStepLog) {
  std::vector<std::string> notes;
  const auto crowded = Calibrate({StepLogRun(4, 1, 2e6, 40)}, "mnist_cnn", false, 0.5, &notes);
  EXPECT_THAT(crowded.status().message(), HasSubstr("task_cpu.csv"));
  EXPECT_THAT(crowded.status().message(), HasSubstr("1 worker"));
  const auto insecure = Calibrate({StepLogRun(1, 1, 2e6, 5)}, "mnist_cnn", true, 0.5, &notes);
  EXPECT_THAT(insecure.status().message(), HasSubstr("--insecure"));
  EXPECT_THAT(Calibrate({StepLogRun(1, 1, 2e6, 5)}, "cnn_large", false, 0.5, &notes).status().message(),
              HasSubstr("no calibration run trained cnn_large"));
}

TEST(CheckRuns, JudgesARunWithoutTaskCpuAtTheComputeSpeedItsStepLogShows) {
  const std::vector<CalibrationRun> calibration = {StepLogRun(1, 1, 2e6, 5), StepLogRun(1, 2, 1e6, 3)};
  // The same cell, but its host computed 40% slower (14 ms a step).
  CalibrationRun slow = StepLogRun(1, 1, 2e6, 5);
  slow.run_dir = "slow";
  slow.record = StepLog(1, 20, 14, 2.8, 5);
  slow.compute_ms = 14;
  slow.steady_images_per_second = 100 / (14 + 5.0) * 1e3;
  std::vector<std::string> notes;
  const auto rows = CheckRuns(calibration, {slow}, 0.5, &notes);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const CheckRow& row = rows->front();
  EXPECT_FALSE(row.calibration);
  EXPECT_NEAR(row.predicted, 100 / 15.0 * 1e3, 1e-6);
  EXPECT_NEAR(row.cpu_ratio, 1.4, 1e-9);
  // At that speed the compute and the ps's service (2.5 ms) take 40% more.
  EXPECT_NEAR(row.predicted_at_run_speed, 100 / (14 + 2.5 * 1.4 + 2.5) * 1e3, 1e-6);
  const std::string table = CheckTable(*rows, 0.15);
  EXPECT_THAT(table, HasSubstr("0 of 1 held-out cells within 15%"));
  EXPECT_THAT(table, HasSubstr("at each run's own speed, 1 of 1"));
  EXPECT_THAT(table, Not(HasSubstr("each run (its error)")));  // one run a cell
  EXPECT_THAT(table,
              HasSubstr("| mnist_cnn sync, 1 ps, 1 worker, no link limit | 6667 | 5263 | +26.7% | 1.40 (-5%) |"));
}

TEST(PlanFlags, ParsesModesLinksAndPlacements) {
  EXPECT_THAT(ParsePlanModes("sync,async").value(), ElementsAre(true, false));
  EXPECT_THAT(ParsePlanModes("async,async").value(), ElementsAre(false));
  EXPECT_THAT(ParsePlanModes("ssp:2").status().message(), HasSubstr("--mode"));
  EXPECT_FALSE(ParsePlanModes("").ok());
  EXPECT_EQ(ParseLinkKind("netns").value(), LinkKind::kNetns);
  EXPECT_THAT(ParseLinkKind("wifi").status().message(), HasSubstr("--link_kind"));
  EXPECT_EQ(ParsePlacement("host_per_task").value(), Placement::kHostPerTask);
  EXPECT_THAT(ParsePlacement("rack").status().message(), HasSubstr("--placement"));
}

TEST(PlanFlags, CollectsEveryValueOfARepeatedFlag) {
  std::vector<std::string> args = {"pstrain", "plan", "--calibrate=a", "--workers=2", "--calibrate", "b,c",
                                   "--calibrated=x", "--", "--calibrate=d"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  EXPECT_THAT(RepeatedFlagValues(static_cast<int>(argv.size()), argv.data(), "calibrate"),
              ElementsAre("a", "b", "c"));
}

TEST(PlanFlags, RefusesWhatItCannotAnswerNamingTheFlag) {
  const std::string dir = ::testing::TempDir() + "/plan_flags";
  ASSERT_TRUE(MakeDirs(dir + "/run").ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/run/summary.json", "{}").ok());
  PlanOptions ok;
  ok.calibrate = {dir + "/run"};
  ok.out = dir + "/plan";
  ASSERT_TRUE(ValidatePlanOptions(ok).ok()) << ValidatePlanOptions(ok).message();
  struct Case {
    std::string expected;
    void (*change)(PlanOptions*);
  };
  const Case cases[] = {
      {"--calibrate", [](PlanOptions* o) { o->calibrate.clear(); }},
      {"no summary.json", [](PlanOptions* o) { o->calibrate = {"/nonexistent/run"}; }},
      {"--out", [](PlanOptions* o) { o->out.clear(); }},
      {"--link_rate", [](PlanOptions* o) { o->link_rate = "10gigs"; }},
      {"--link_kind=netns needs --link_rate", [](PlanOptions* o) { o->link = LinkKind::kNetns; }},
      {"--host_cores", [](PlanOptions* o) { o->host_cores = -1; }},
      {"--compute_ms", [](PlanOptions* o) { o->compute_ms = -3; }},
      {"--model", [](PlanOptions* o) { o->model = "resnet"; }},
      {"f64", [](PlanOptions* o) { o->wire = "f64"; }},
      {"--params", [](PlanOptions* o) { o->params = -5; }},
      {"--ps_share", [](PlanOptions* o) { o->ps_share = 0; }},
      {"--ps_share", [](PlanOptions* o) { o->ps_share = 1.5; }},
      {"--runs_host_cores", [](PlanOptions* o) { o->default_host_cores = -2; }},
  };
  for (const Case& c : cases) {
    PlanOptions o = ok;
    c.change(&o);
    const absl::Status s = ValidatePlanOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_THAT(s.message(), HasSubstr(c.expected));
  }
}

}  // namespace
}  // namespace pstrain

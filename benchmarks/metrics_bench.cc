// What recording a training step costs the worker: the steps CSV and the
// TensorBoard event file (always on), and the timeline (--timeline), per
// call of MetricsRecorder::RecordStep with two shards, into a real run
// directory on the local disk. A mnist_cnn step takes ~9 ms on this
// machine (benchmarks/README.md), so this divided by that is the share of
// the step the metrics take.
//
//   build/bin/metrics_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <cstdlib>
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "common/clock.h"
#include "worker/metrics_recorder.h"

namespace pstrain {
namespace {

std::string TempRunDir() {
  std::string pattern = "/tmp/pstrain-metrics-benchXXXXXX";
  return mkdtemp(pattern.data());
}

void RecordSteps(benchmark::State& state, bool timeline) {
  MetricsOptions o;
  o.run_dir = TempRunDir();
  o.rank = 1;
  o.learning_rate = 0.02;
  o.timeline = timeline;
  auto recorder = MetricsRecorder::Open(o);
  if (!recorder.ok()) {
    state.SkipWithError(std::string(recorder.status().message()).c_str());
    return;
  }
  StepRecord r;
  r.examples = 128;
  r.compute_ms = 8.5;
  r.comm_ms = 0.4;
  r.shard_reply_unix_us = {0, 0};
  int64_t step = 0;
  for (auto _ : state) {
    r.step = step++;
    r.unix_us = UnixMicros();
    r.elapsed_s = static_cast<double>(step) * 0.009;
    r.loss = 2.3 / static_cast<double>(1 + step % 100);
    r.shard_reply_unix_us = {r.unix_us - 300, r.unix_us - 10};
    if (!(*recorder)->RecordStep(r).ok()) state.SkipWithError("RecordStep failed");
  }
  if (!(*recorder)->Flush().ok()) state.SkipWithError("Flush failed");
  std::system(("rm -rf " + o.run_dir).c_str());
}

void BM_RecordStep(benchmark::State& state) { RecordSteps(state, /*timeline=*/false); }
void BM_RecordStepWithTimeline(benchmark::State& state) { RecordSteps(state, /*timeline=*/true); }
BENCHMARK(BM_RecordStep);
BENCHMARK(BM_RecordStepWithTimeline);

}  // namespace
}  // namespace pstrain

BENCHMARK_MAIN();

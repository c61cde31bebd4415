// What recording a training step costs the worker: the steps CSV and the
// TensorBoard event file (always on), the timeline (--timeline, with the
// 11 layers' forward and backward spans of mnist_cnn) and the Prometheus
// instruments (--metrics_port; a live endpoint nobody scrapes), per
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
#include "common/free_ports.h"
#include "common/metrics_server.h"
#include "worker/metrics_recorder.h"

namespace pstrain {
namespace {

std::string TempRunDir() {
  std::string pattern = "/tmp/pstrain-metrics-benchXXXXXX";
  return mkdtemp(pattern.data());
}

void RecordSteps(benchmark::State& state, bool timeline, bool prometheus) {
  std::unique_ptr<MetricsServer> server;
  if (prometheus) {
    auto port = FreeLoopbackPorts(1, {});
    auto s = port.ok() ? MetricsServer::Start({"127.0.0.1", (*port)[0]}, {{"task_type", "worker"}})
                       : port.status();
    if (!s.ok()) {
      state.SkipWithError(std::string(s.status().message()).c_str());
      return;
    }
    server = *std::move(s);
  }
  MetricsOptions o;
  o.run_dir = TempRunDir();
  o.rank = 1;
  o.learning_rate = 0.02;
  o.timeline = timeline;
  o.server = server.get();
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
  r.wait_ms = 0.1;
  // mnist_cnn's 11 layers, forward and backward (what the CPU model times).
  const std::vector<std::string> names = {"conv1", "pool1", "relu1", "conv2", "conv2_drop", "pool2",
                                          "relu2", "fc1",   "relu3", "fc1_drop", "fc2"};
  std::vector<models::LayerSpan> layers;
  if (timeline) {
    for (int pass = 0; pass < 2; ++pass) {
      for (const std::string& n : names) layers.push_back({&n, pass == 1, false, 0, 300});
    }
    r.layers = &layers;
  }
  int64_t step = 0;
  for (auto _ : state) {
    r.step = step++;
    r.unix_us = UnixMicros();
    r.elapsed_s = static_cast<double>(step) * 0.009;
    r.loss = 2.3 / static_cast<double>(1 + step % 100);
    r.shard_reply_unix_us = {r.unix_us - 300, r.unix_us - 10};
    r.sent_bytes += 175'000;
    r.received_bytes += 175'000;
    for (size_t i = 0; i < layers.size(); ++i) {
      layers[i].start_unix_us = r.unix_us - 9000 + static_cast<int64_t>(i) * 350;
    }
    if (!(*recorder)->RecordStep(r).ok()) state.SkipWithError("RecordStep failed");
  }
  if (!(*recorder)->Flush().ok()) state.SkipWithError("Flush failed");
  std::system(("rm -rf " + o.run_dir).c_str());
}

void BM_RecordStep(benchmark::State& state) { RecordSteps(state, false, false); }
void BM_RecordStepWithTimeline(benchmark::State& state) { RecordSteps(state, true, false); }
void BM_RecordStepWithPrometheus(benchmark::State& state) { RecordSteps(state, false, true); }
void BM_RecordStepWithEverything(benchmark::State& state) { RecordSteps(state, true, true); }
BENCHMARK(BM_RecordStep);
BENCHMARK(BM_RecordStepWithTimeline);
BENCHMARK(BM_RecordStepWithPrometheus);
BENCHMARK(BM_RecordStepWithEverything);

}  // namespace
}  // namespace pstrain

BENCHMARK_MAIN();

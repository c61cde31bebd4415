// Throughput of the CPU model: forward+backward (a training step's compute)
// and Evaluate, in images per second on the calling thread. Eigen is built
// without OpenMP, so this is one core.
//
//   model_bench [--benchmark_filter=mnist_cnn/cpu/forward_backward]
//
// Each case first checks one step (finite loss, finite and non-zero
// gradient) and skips with an error otherwise. The figure is Google
// Benchmark's items_per_second (images per CPU second), also printed as
//   RESULT model=mnist_cnn backend=cpu op=forward_backward batch=128 images_per_sec=N

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "benchmarks/bench_main.h"
#include "benchmarks/images_per_sec_reporter.h"
#include "benchmarks/model_setup.h"
#include "models/model.h"
#include "models/net_spec.h"

namespace pstrain::models {
namespace {

// The result check that precedes timing: an error message, or "" when sane.
std::string CheckStep(BenchSetup& s) {
  absl::StatusOr<float> loss = s.model->ForwardBackward(s.batch, absl::MakeSpan(s.grads));
  if (!loss.ok()) return loss.status().ToString();
  if (!std::isfinite(*loss) || *loss <= 0) return absl::StrCat("bad loss ", *loss);
  double norm = 0;
  for (float g : s.grads) norm += double{g} * g;
  if (!std::isfinite(norm) || norm == 0) return absl::StrCat("bad gradient norm ", norm);
  absl::StatusOr<EvalResult> eval = s.model->Evaluate(s.batch);
  if (!eval.ok()) return eval.status().ToString();
  if (!std::isfinite(eval->loss_sum) || eval->count != s.batch.n) return "bad evaluation";
  return "";
}

void BM_ForwardBackward(benchmark::State& state, const std::string& name) {
  absl::StatusOr<std::unique_ptr<BenchSetup>> s =
      MakeBenchSetup(name, "cpu", static_cast<int>(state.range(0)));
  const std::string error = s.ok() ? CheckStep(**s) : s.status().ToString();
  if (!error.empty()) return state.SkipWithError(error.c_str());
  BenchSetup& setup = **s;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        setup.model->ForwardBackward(setup.batch, absl::MakeSpan(setup.grads)));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_Evaluate(benchmark::State& state, const std::string& name) {
  absl::StatusOr<std::unique_ptr<BenchSetup>> s =
      MakeBenchSetup(name, "cpu", static_cast<int>(state.range(0)));
  const std::string error = s.ok() ? CheckStep(**s) : s.status().ToString();
  if (!error.empty()) return state.SkipWithError(error.c_str());
  BenchSetup& setup = **s;
  for (auto _ : state) benchmark::DoNotOptimize(setup.model->Evaluate(setup.batch));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void RegisterAll() {
  for (int batch : {32, 128, 256}) {
    benchmark::RegisterBenchmark("mnist_cnn/cpu/forward_backward", BM_ForwardBackward, "mnist_cnn")
        ->Arg(batch);
  }
  benchmark::RegisterBenchmark("mnist_cnn/cpu/evaluate", BM_Evaluate, "mnist_cnn")->Arg(1000);
  benchmark::RegisterBenchmark("mlp/cpu/forward_backward", BM_ForwardBackward, "mlp")->Arg(128);
  benchmark::RegisterBenchmark("cnn_large/cpu/forward_backward", BM_ForwardBackward, "cnn_large")
      ->Arg(128);
}

}  // namespace
}  // namespace pstrain::models

int main(int argc, char** argv) {
  pstrain::ImagesPerSecReporter reporter;
  return pstrain::RunBenchmarks(argc, argv, &reporter, &pstrain::models::RegisterAll);
}

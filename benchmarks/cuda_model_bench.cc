// Training throughput of the seed's CNN (mnist_cnn) on the GPU, against the
// CPU backend at the same batch sizes: one ForwardBackward as the worker
// calls it (the batch copied in from host memory, forward, loss, backward,
// the gradient copied back to host memory), in images per second of wall
// time. ForwardBackward returns only when the gradient is on the host, so
// timing the call times the whole step (Google Benchmark's real time).
//
//   cuda_model_bench [--benchmark_filter=cuda] [--benchmark_repetitions=5]
//
// Before timing, each case checks one step of its backend against the CPU
// backend on the same parameters and batch (loss within 1e-4, gradient
// within 1e-2 overall: loose enough for max-pool near-ties, which route a
// gradient differently on either side, tight enough for any real bug) and
// skips with an error otherwise; a CUDA case also skips, with the reason,
// where there is no GPU. Output: Google Benchmark's table, then one line per
// result, as benchmarks/model_bench.cc:
//   RESULT model=mnist_cnn backend=cuda op=forward_backward batch=128 images_per_sec=N

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

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return std::sqrt(diff / norm);
}

// The result check that precedes timing: an error message, or "" when the
// step agrees with the CPU backend's on the same parameters and batch.
std::string CheckStep(BenchSetup& s) {
  absl::StatusOr<float> loss = s.model->ForwardBackward(s.batch, absl::MakeSpan(s.grads));
  if (!loss.ok()) return loss.status().ToString();
  absl::StatusOr<std::unique_ptr<BenchSetup>> reference =
      MakeBenchSetup(s.model->net().name, "cpu", s.batch.n);
  if (!reference.ok()) return reference.status().ToString();
  BenchSetup& cpu = **reference;
  absl::StatusOr<float> cpu_loss = cpu.model->ForwardBackward(cpu.batch, absl::MakeSpan(cpu.grads));
  if (!cpu_loss.ok()) return cpu_loss.status().ToString();
  if (!std::isfinite(*loss) || std::abs(*loss - *cpu_loss) > 1e-4 * *cpu_loss) {
    return absl::StrCat("loss ", *loss, " against the CPU's ", *cpu_loss);
  }
  const double error = RelativeError(s.grads, cpu.grads);
  if (!(error <= 1e-2)) return absl::StrCat("gradient off the CPU's by ", error, " (relative)");
  return "";
}

void BM_ForwardBackward(benchmark::State& state, const std::string& name, const std::string& device,
                        bool staged) {
  absl::StatusOr<std::unique_ptr<BenchSetup>> s =
      MakeBenchSetup(name, device, static_cast<int>(state.range(0)), staged);
  const std::string error = s.ok() ? CheckStep(**s) : s.status().ToString();
  if (!error.empty()) return state.SkipWithError(error.c_str());
  BenchSetup& setup = **s;
  state.SetLabel(setup.model->device_description());
  for (auto _ : state) {
    // A step that fails while timed (a device fault, say) must not be
    // reported as a fast one.
    const absl::StatusOr<float> loss =
        setup.model->ForwardBackward(setup.batch, absl::MakeSpan(setup.grads));
    if (!loss.ok()) {
      state.SkipWithError(loss.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(*loss);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

// Named "<model>/<backend>/<op>" with the batch as the argument.
// forward_backward reads the batch from the caller's memory (the CUDA model
// copies it into its page-locked staging first); forward_backward_staged
// from the model's input buffer, where the worker gathers it (and where
// PyTorch's forward_backward_host starts: pinned memory). The CPU at 4096
// takes about a second a step, so it runs few iterations.
void RegisterAll() {
  for (const bool staged : {false, true}) {
    for (int batch : {128, 1024, 4096}) {
      benchmark::RegisterBenchmark(
          staged ? "mnist_cnn/cuda/forward_backward_staged" : "mnist_cnn/cuda/forward_backward",
          BM_ForwardBackward, "mnist_cnn", "cuda", staged)
          ->Arg(batch)
          ->UseRealTime();
    }
  }
  for (int batch : {128, 4096}) {
    benchmark::RegisterBenchmark("mnist_cnn/cpu/forward_backward", BM_ForwardBackward, "mnist_cnn",
                                 "cpu", false)
        ->Arg(batch)
        ->UseRealTime();
  }
}

}  // namespace
}  // namespace pstrain::models

int main(int argc, char** argv) {
  pstrain::ImagesPerSecReporter reporter;
  return pstrain::RunBenchmarks(argc, argv, &reporter, &pstrain::models::RegisterAll);
}

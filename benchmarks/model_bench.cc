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
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmark/benchmark.h"
#include "benchmarks/images_per_sec_reporter.h"
#include "common/random.h"
#include "models/dropout_mask.h"
#include "models/model.h"
#include "models/net_spec.h"

namespace pstrain::models {
namespace {

constexpr uint64_t kSeed = 7;

// A model with initialised parameters and one batch of synthetic data.
struct Setup {
  std::unique_ptr<Model> model;
  std::vector<float> images;
  std::vector<int32_t> labels;
  std::vector<uint64_t> keys;
  std::vector<float> grads;
  Batch batch;
};

absl::StatusOr<std::unique_ptr<Setup>> MakeSetup(const std::string& name, int n) {
  auto s = std::make_unique<Setup>();
  ModelOptions options;
  options.name = name;
  options.device = "cpu";
  options.max_batch = n;
  options.seed = kSeed;
  auto model = CreateModel(options);
  if (!model.ok()) return model.status();
  s->model = std::move(model).value();
  std::vector<float> params(s->model->num_params());
  InitParams(s->model->param_specs(), kSeed, params.data());
  if (absl::Status status = s->model->SetParams(params); !status.ok()) return status;
  SplitMix64 rng(11);
  s->images.resize(s->model->net().input.size() * n);
  for (float& v : s->images) v = rng.Uniform(-0.4242f, 2.8215f);  // MNIST's normalised range
  for (int i = 0; i < n; ++i) {
    s->labels.push_back(static_cast<int32_t>(rng.Below(s->model->net().num_classes)));
    s->keys.push_back(MakeExampleKey(0, static_cast<uint32_t>(i)));
  }
  s->grads.resize(s->model->num_params());
  s->batch = {n, s->images.data(), s->labels.data(), s->keys.data()};
  return s;
}

// The result check that precedes timing: an error message, or "" when sane.
std::string CheckStep(Setup& s) {
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
  absl::StatusOr<std::unique_ptr<Setup>> s = MakeSetup(name, static_cast<int>(state.range(0)));
  const std::string error = s.ok() ? CheckStep(**s) : s.status().ToString();
  if (!error.empty()) return state.SkipWithError(error.c_str());
  Setup& setup = **s;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        setup.model->ForwardBackward(setup.batch, absl::MakeSpan(setup.grads)));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_Evaluate(benchmark::State& state, const std::string& name) {
  absl::StatusOr<std::unique_ptr<Setup>> s = MakeSetup(name, static_cast<int>(state.range(0)));
  const std::string error = s.ok() ? CheckStep(**s) : s.status().ToString();
  if (!error.empty()) return state.SkipWithError(error.c_str());
  Setup& setup = **s;
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
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  pstrain::models::RegisterAll();
  pstrain::ImagesPerSecReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

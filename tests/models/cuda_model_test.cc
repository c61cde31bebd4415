// The CUDA model against the CPU model as a worker uses them: a training
// step, evaluation, several SGD steps, bad inputs, device selection and
// running out of memory. Skipped where there is no GPU (what a machine
// without one must do is cuda_device_selection_test.cc).
//
// Why two kinds of step comparison:
//  - On a grid: parameters are multiples of 1/16 in [-1/8, 1/8] and images
//    multiples of 1/2, so every sum of the forward pass is exact in float
//    on both backends whatever their order (the partial sums stay far below
//    2^24 grid steps), up to mnist_cnn's and mlp's logits. Activations,
//    relu zeros, max-pool ties and argmax are then identical, and only the
//    rounding of log-softmax and of the backward pass remains, which has no
//    kink left to flip: loss within 1e-6, each gradient tensor within 5e-5
//    (the layer tests' SumTolerance for the longest sum here, conv1's
//    weight gradient at n = 8: 4608 terms, 1.6e-5, plus what flows in from
//    the layers above).
//  - On random data (PyTorch's init, images in MNIST's range): the loss
//    within 1e-5, evaluation identical. The gradients are not compared
//    there: a max-pool window whose two largest inputs are within rounding
//    of each other routes its gradient to either element, both right, and
//    one such flip moves conv1's gradient by ~1e-2. The grid test excludes
//    that; tests/models/cuda_layers_test.cc covers random data per layer.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/random.h"
#include "gtest/gtest.h"
#include "models/cuda/cuda_context.h"
#include "models/dropout_mask.h"
#include "models/model.h"
#include "models/net_spec.h"
#include "tests/models/cuda_test_util.h"

namespace pstrain::models {
namespace {

using ::pstrain::models::testing::ExpectRelativeError;
using ::pstrain::models::testing::RelativeError;

// Examples with their own keys; images from `image` (a draw per pixel).
struct Examples {
  std::vector<float> images;
  std::vector<int32_t> labels;
  std::vector<uint64_t> keys;

  int n() const { return static_cast<int>(labels.size()); }
  Batch batch() const { return {n(), images.data(), labels.data(), keys.data()}; }
};

Examples MakeExamples(const NetSpec& net, int n, uint64_t seed, bool grid) {
  SplitMix64 rng(seed);
  Examples ex;
  ex.images.resize(n * net.input.size());
  for (float& v : ex.images) {
    v = grid ? 0.5f * static_cast<float>(static_cast<int>(rng.Below(7)) - 1)  // -0.5 .. 2.5
             : rng.Uniform(-0.4242f, 2.8215f);
  }
  for (int i = 0; i < n; ++i) {
    ex.labels.push_back(static_cast<int32_t>(rng.Below(net.num_classes)));
    ex.keys.push_back(MakeExampleKey(2, static_cast<uint32_t>(500 + 3 * i)));
  }
  return ex;
}

// Multiples of 1/16 in [-1/8, 1/8].
std::vector<float> GridParams(int64_t size, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> params(size);
  for (float& v : params) v = static_cast<float>(static_cast<int>(rng.Below(5)) - 2) / 16.0f;
  return params;
}

ModelOptions Options(const std::string& name, const std::string& device, int max_batch) {
  ModelOptions options;
  options.name = name;
  options.device = device;
  options.max_batch = max_batch;
  options.seed = 17;
  return options;
}

std::unique_ptr<Model> MakeModel(const ModelOptions& options) {
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(options);
  EXPECT_TRUE(model.ok()) << options.device << ": " << model.status();
  return model.ok() ? std::move(model).value() : nullptr;
}

struct Step {
  float loss = NAN;
  std::vector<float> grads;
};

Step RunStep(Model& model, const Examples& ex) {
  Step step{NAN, std::vector<float>(model.num_params())};
  absl::StatusOr<float> loss = model.ForwardBackward(ex.batch(), absl::MakeSpan(step.grads));
  EXPECT_TRUE(loss.ok()) << model.device_description() << ": " << loss.status();
  step.loss = loss.value_or(NAN);
  return step;
}

EvalResult RunEvaluate(Model& model, const Examples& ex) {
  absl::StatusOr<EvalResult> result = model.Evaluate(ex.batch());
  EXPECT_TRUE(result.ok()) << model.device_description() << ": " << result.status();
  return result.value_or(EvalResult{});
}

// A CPU and a CUDA model of the same network with the same parameters.
struct Pair {
  std::unique_ptr<Model> cpu, gpu;
};

Pair MakePair(const std::string& name, int max_batch, const std::vector<float>& params) {
  Pair pair{MakeModel(Options(name, "cpu", max_batch)),
            MakeModel(Options(name, "cuda", max_batch))};
  if (pair.cpu == nullptr || pair.gpu == nullptr) return Pair{};
  PSTRAIN_EXPECT_OK(pair.cpu->SetParams(params));
  PSTRAIN_EXPECT_OK(pair.gpu->SetParams(params));
  return pair;
}

std::vector<float> InitialParams(const std::string& name, uint64_t seed) {
  const std::vector<ParamSpec> specs = NetParamSpecs(GetNetSpec(name).value()).value();
  std::vector<float> params(specs.back().offset + specs.back().size);
  InitParams(specs, seed, params.data());
  return params;
}

class CudaModel : public ::testing::Test {
 protected:
  void SetUp() override { PSTRAIN_SKIP_WITHOUT_GPU(); }
};

TEST_F(CudaModel, HasTheCpusParameterLayoutAndNamesItsDevice) {
  for (const std::string& name : ModelNames()) {
    Pair pair = MakePair(name, 4, InitialParams(name, 1));
    ASSERT_NE(pair.gpu, nullptr) << name;
    EXPECT_EQ(pair.gpu->num_params(), pair.cpu->num_params()) << name;
    ASSERT_EQ(pair.gpu->param_specs().size(), pair.cpu->param_specs().size()) << name;
    for (size_t i = 0; i < pair.cpu->param_specs().size(); ++i) {
      EXPECT_EQ(pair.gpu->param_specs()[i].name, pair.cpu->param_specs()[i].name);
      EXPECT_EQ(pair.gpu->param_specs()[i].offset, pair.cpu->param_specs()[i].offset);
    }
    EXPECT_TRUE(absl::StartsWith(pair.gpu->device_description(), "cuda:0 ("))
        << pair.gpu->device_description();
  }
}

struct NetCase {
  std::string name;
  int n;
};

void PrintTo(const NetCase& c, std::ostream* os) { *os << c.name << " n" << c.n; }

std::string NetCaseName(const ::testing::TestParamInfo<NetCase>& test) { return test.param.name; }

class CudaModelOnGrid : public CudaModel, public ::testing::WithParamInterface<NetCase> {};

TEST_P(CudaModelOnGrid, TrainingStepAndEvaluationMatchTheCpu) {
  const NetCase c = GetParam();
  const std::vector<float> params = GridParams(InitialParams(c.name, 1).size(), 31);
  Pair pair = MakePair(c.name, c.n, params);
  ASSERT_NE(pair.gpu, nullptr);
  const Examples ex = MakeExamples(pair.cpu->net(), c.n, 32, /*grid=*/true);
  const Step want = RunStep(*pair.cpu, ex), got = RunStep(*pair.gpu, ex);
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
  for (const ParamSpec& spec : pair.cpu->param_specs()) {
    const auto slice = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + spec.offset, v.begin() + spec.offset + spec.size);
    };
    ExpectRelativeError(c.name + " " + spec.name, slice(got.grads), slice(want.grads), 5e-5);
  }
  const EvalResult eval_want = RunEvaluate(*pair.cpu, ex), eval_got = RunEvaluate(*pair.gpu, ex);
  EXPECT_EQ(eval_got.correct, eval_want.correct);
  EXPECT_EQ(eval_got.count, eval_want.count);
  EXPECT_NEAR(eval_got.loss_sum, eval_want.loss_sum, 1e-6 * eval_want.loss_sum);
}

INSTANTIATE_TEST_SUITE_P(Nets, CudaModelOnGrid,
                         ::testing::Values(NetCase{"mnist_cnn", 8}, NetCase{"mlp", 8},
                                           NetCase{"cnn_large", 4}),
                         NetCaseName);

TEST_F(CudaModel, LossAndEvaluationMatchTheCpuOnRandomData) {
  Pair pair = MakePair("mnist_cnn", 64, InitialParams("mnist_cnn", 2));
  ASSERT_NE(pair.gpu, nullptr);
  const Examples ex = MakeExamples(pair.cpu->net(), 64, 33, /*grid=*/false);
  EXPECT_NEAR(RunStep(*pair.gpu, ex).loss, RunStep(*pair.cpu, ex).loss, 1e-5);
  const EvalResult want = RunEvaluate(*pair.cpu, ex), got = RunEvaluate(*pair.gpu, ex);
  EXPECT_EQ(got.correct, want.correct);
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * want.loss_sum);
}

// Plain SGD, p -= lr * g, on both backends from the same start, a fresh
// batch each step: the losses and the parameters stay within 1e-4 relative
// (a gradient flip as described above moves a parameter tensor by ~1e-5).
TEST_F(CudaModel, SgdStepsStayWithTheCpu) {
  constexpr int kSteps = 5, kBatch = 32;
  constexpr float kLr = 0.05f;
  std::vector<float> cpu_params = InitialParams("mnist_cnn", 3), gpu_params = cpu_params;
  Pair pair = MakePair("mnist_cnn", kBatch, cpu_params);
  ASSERT_NE(pair.gpu, nullptr);
  for (int step = 0; step < kSteps; ++step) {
    const Examples ex = MakeExamples(pair.cpu->net(), kBatch, 40 + step, /*grid=*/false);
    const Step want = RunStep(*pair.cpu, ex), got = RunStep(*pair.gpu, ex);
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "step " << step;
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      cpu_params[i] -= kLr * want.grads[i];
      gpu_params[i] -= kLr * got.grads[i];
    }
    PSTRAIN_EXPECT_OK(pair.cpu->SetParams(cpu_params));
    PSTRAIN_EXPECT_OK(pair.gpu->SetParams(gpu_params));
  }
  ExpectRelativeError("mnist_cnn params after SGD", gpu_params, cpu_params, 1e-4);
  EXPECT_GT(RelativeError(cpu_params, InitialParams("mnist_cnn", 3)), 1e-3);  // it did move
}

// Deterministic algorithms (cuDNN's and cuBLAS's) and the same masks: a
// step repeats exactly. SetParams copies the caller's buffer at once.
TEST_F(CudaModel, RepeatsAStepBitForBitAndCopiesTheParameters) {
  std::vector<float> params = InitialParams("mnist_cnn", 4);
  std::unique_ptr<Model> model = MakeModel(Options("mnist_cnn", "cuda", 16));
  ASSERT_NE(model, nullptr);
  PSTRAIN_EXPECT_OK(model->SetParams(params));
  std::fill(params.begin(), params.end(), 0.0f);
  const Examples ex = MakeExamples(model->net(), 16, 50, /*grid=*/false);
  const Step first = RunStep(*model, ex), again = RunStep(*model, ex);
  EXPECT_EQ(first.loss, again.loss);
  EXPECT_EQ(first.grads, again.grads);
  EXPECT_GT(RelativeError(first.grads, std::vector<float>(first.grads.size())), 0.0);
}

// A batch gathered into the model's page-locked input buffer is uploaded
// from there (no host copy), wherever in it it starts; the step is the one
// a caller's own memory gives, bit for bit, in training and in evaluation,
// and the buffer is left as the caller wrote it.
TEST_F(CudaModel, ReadsABatchInItsInputBufferAsFromTheCallersMemory) {
  std::unique_ptr<Model> model = MakeModel(Options("mnist_cnn", "cuda", 24));
  ASSERT_NE(model, nullptr);
  PSTRAIN_EXPECT_OK(model->SetParams(InitialParams("mnist_cnn", 9)));
  const Examples ex = MakeExamples(model->net(), 10, 90, /*grid=*/false);
  const Step want = RunStep(*model, ex);
  const EvalResult want_eval = RunEvaluate(*model, ex);
  const int64_t pixels = model->net().input.size();
  for (const int at : {0, 14}) {  // examples into the buffer
    SCOPED_TRACE(at);
    absl::StatusOr<BatchBuffer> in = model->InputBuffer();
    ASSERT_TRUE(in.ok()) << in.status();
    ASSERT_EQ(in->images.size(), static_cast<size_t>(24 * pixels));
    ASSERT_EQ(in->labels.size(), 24u);
    ASSERT_EQ(in->example_keys.size(), 24u);
    std::copy(ex.images.begin(), ex.images.end(), in->images.begin() + at * pixels);
    std::copy(ex.labels.begin(), ex.labels.end(), in->labels.begin() + at);
    std::copy(ex.keys.begin(), ex.keys.end(), in->example_keys.begin() + at);
    const Batch batch{ex.n(), in->images.data() + at * pixels, in->labels.data() + at,
                      in->example_keys.data() + at};
    std::vector<float> grads(model->num_params());
    absl::StatusOr<float> loss = model->ForwardBackward(batch, absl::MakeSpan(grads));
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_EQ(*loss, want.loss);
    EXPECT_EQ(grads, want.grads);
    absl::StatusOr<BatchBuffer> again = model->InputBuffer();
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->images.data(), in->images.data());
    EXPECT_TRUE(std::equal(ex.images.begin(), ex.images.end(),
                           again->images.begin() + at * pixels));
    const Batch eval{ex.n(), again->images.data() + at * pixels, again->labels.data() + at,
                     nullptr};
    absl::StatusOr<EvalResult> got = model->Evaluate(eval);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->loss_sum, want_eval.loss_sum);
    EXPECT_EQ(got->correct, want_eval.correct);
  }
}

TEST_F(CudaModel, TakesEveryBatchSizeUpToMax) {
  Pair pair = MakePair("mnist_cnn", 40, InitialParams("mnist_cnn", 5));
  ASSERT_NE(pair.gpu, nullptr);
  for (int n : {40, 1, 7, 40}) {
    const Examples ex = MakeExamples(pair.cpu->net(), n, 60 + n, /*grid=*/false);
    EXPECT_NEAR(RunStep(*pair.gpu, ex).loss, RunStep(*pair.cpu, ex).loss, 1e-5) << "n=" << n;
  }
}

// Parameters start at zero: every logit is equal, so every prediction is
// class 0 and every loss log(10), as on the CPU.
TEST_F(CudaModel, EvaluatesZeroParametersWithTiesToTheLowestClass) {
  std::unique_ptr<Model> model = MakeModel(Options("mnist_cnn", "cuda", 40));
  ASSERT_NE(model, nullptr);
  Examples ex = MakeExamples(model->net(), 40, 70, /*grid=*/false);
  ex.keys.clear();  // not needed to evaluate
  Batch batch = ex.batch();
  batch.example_keys = nullptr;
  absl::StatusOr<EvalResult> result = model->Evaluate(batch);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->count, 40);
  EXPECT_EQ(result->correct, std::count(ex.labels.begin(), ex.labels.end(), 0));
  EXPECT_NEAR(result->loss_sum, 40 * std::log(10.0), 1e-4);
}

TEST_F(CudaModel, RejectsBadInputsWithTheCpusCodes) {
  Pair pair = MakePair("mnist_cnn", 4, InitialParams("mnist_cnn", 6));
  ASSERT_NE(pair.gpu, nullptr);
  const Examples ex = MakeExamples(pair.cpu->net(), 5, 80, /*grid=*/false);
  std::vector<float> grads(pair.cpu->num_params()), longer(grads.size() + 1);
  std::vector<std::pair<std::string, Batch>> batches;
  for (int n : {0, -1, 5}) {
    Batch b = ex.batch();
    b.n = n;
    batches.emplace_back("n=" + std::to_string(n), b);
  }
  Batch b = ex.batch();
  b.n = 4;
  const Batch good = b;
  b.example_keys = nullptr;
  batches.emplace_back("no keys", b);
  b = good;
  b.images = nullptr;
  batches.emplace_back("no images", b);
  b = good;
  b.labels = nullptr;
  batches.emplace_back("no labels", b);
  std::vector<Examples> bad_labels(2, ex);
  bad_labels[0].labels[2] = -1;
  bad_labels[1].labels[3] = 10;
  for (const Examples& bad : bad_labels) {
    b = bad.batch();
    b.n = 4;
    batches.emplace_back("bad label", b);
  }
  for (const auto& [what, batch] : batches) {
    for (Model* model : {pair.cpu.get(), pair.gpu.get()}) {
      EXPECT_EQ(model->ForwardBackward(batch, absl::MakeSpan(grads)).status().code(),
                absl::StatusCode::kInvalidArgument)
          << what << " on " << model->device_description();
      if (what != "no keys") {
        EXPECT_EQ(model->Evaluate(batch).status().code(), absl::StatusCode::kInvalidArgument)
            << what << " on " << model->device_description();
      }
    }
  }
  for (Model* model : {pair.cpu.get(), pair.gpu.get()}) {
    const absl::StatusCode short_grads =
        model->ForwardBackward(good, absl::MakeSpan(grads).subspan(1)).status().code();
    EXPECT_EQ(short_grads, absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(model->ForwardBackward(good, absl::MakeSpan(longer)).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(model->SetParams(absl::MakeConstSpan(grads).subspan(1)).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(model->ForwardBackward(good, absl::MakeSpan(grads)).ok());  // still usable
  }
}

// 100M examples of mlp need ~200 GB of activations: a clear
// ResourceExhausted naming the allocation, and the device stays usable.
TEST_F(CudaModel, RunningOutOfMemoryIsResourceExhausted) {
  absl::StatusOr<std::unique_ptr<Model>> huge = CreateModel(Options("mlp", "cuda", 100'000'000));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_TRUE(absl::StrContains(huge.status().message(), "out of memory")) << huge.status();
  EXPECT_TRUE(absl::StrContains(huge.status().message(), "cudaMalloc(")) << huge.status();
  EXPECT_NE(MakeModel(Options("mlp", "cuda", 8)), nullptr);
}

TEST_F(CudaModel, DeviceSelectionFollowsTheFlagAndTheLocalRank) {
  const int count = CudaDeviceCount();
  ASSERT_GT(count, 0);
  absl::StatusOr<std::unique_ptr<Model>> missing = CreateModel(Options("mnist_cnn", "cuda:99", 4));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "no CUDA device cuda:99"))
      << missing.status();
  EXPECT_EQ(CreateModel(Options("mnist_cnn", "gpu", 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ModelOptions options = Options("mnist_cnn", "cuda", 4);
  options.local_rank = -1;
  EXPECT_EQ(CreateModel(options).status().code(), absl::StatusCode::kInvalidArgument);
  for (int rank : {0, 1, count, count + 1}) {
    options.local_rank = rank;
    for (const char* device : {"cuda", "auto"}) {
      options.device = device;
      std::unique_ptr<Model> model = MakeModel(options);
      ASSERT_NE(model, nullptr);
      const std::string expected = "cuda:" + std::to_string(rank % count) + " (";
      EXPECT_TRUE(absl::StartsWith(model->device_description(), expected))
          << device << " rank " << rank << ": " << model->device_description();
    }
  }
  options.device = "cuda:" + std::to_string(count - 1);
  options.local_rank = 0;
  std::unique_ptr<Model> last = MakeModel(options);
  ASSERT_NE(last, nullptr);
  EXPECT_TRUE(absl::StartsWith(last->device_description(), options.device + " ("));
}

}  // namespace
}  // namespace pstrain::models

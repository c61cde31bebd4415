// The CUDA layers against the CPU layers, the numerical reference: forward
// (y) and backward (dx and each parameter gradient) on fresh random inputs,
// at the shapes of the shipped networks and at odd ones (partial batches,
// pooling floors). Skipped where there is no GPU; the host-side parts of
// LogSoftmaxNll are tested everywhere.
//
// Every GPU output and gradient buffer starts filled with a NaN sentinel
// and sits between sentinel guards, and each pass runs twice on the same
// buffers, both compared with the CPU: an element a pass leaves unwritten,
// a write outside a buffer, an output accumulated into instead of
// overwritten (beta = 1 for 0), or state carried from one pass to the next
// all fail a comparison.
//
// Tolerances, as relative errors ||gpu - cpu|| / ||cpu|| per tensor:
//  - Relu, MaxPool2d, Dropout, Dropout2d: 0 (bit-identical). Both backends
//    do the same float operations on the same inputs (a compare, a select,
//    one multiply by a scale from the same DropoutScale), so any difference
//    is a bug, not rounding.
//  - Conv2d and Linear: SumTolerance(terms) = max(1e-5, 2 * FLT_EPSILON *
//    sqrt(terms)), `terms` being the length of the sums behind the tensor.
//    Both backends add the same products, in different orders (cuDNN's and
//    cuBLAS's blocking against Eigen's); with zero-mean random data each
//    side's rounding error is about FLT_EPSILON/2 * sqrt(terms). That is
//    1e-5 for every forward output and input gradient here (25 to 784
//    terms) and looser only for weight and bias gradients, which sum over
//    n * output positions (conv1 at n = 16: 9216 terms, 2.3e-5).
//  - LogSoftmaxNll: 1e-6 (the same per-row formula in the same order with
//    the sums in double; only exp/log's last bit may differ, CUDA's against
//    glibc's).
// Each comparison prints the error it reached ("[ relerr ] ...").

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "gtest/gtest.h"
#include "models/cpu/conv2d.h"
#include "models/cpu/dropout.h"
#include "models/cpu/linear.h"
#include "models/cpu/log_softmax_nll.h"
#include "models/cpu/max_pool2d.h"
#include "models/cpu/relu.h"
#include "models/cuda/conv2d.h"
#include "models/cuda/cuda_context.h"
#include "models/cuda/dropout.h"
#include "models/cuda/linear.h"
#include "models/cuda/log_softmax_nll.h"
#include "models/cuda/max_pool2d.h"
#include "models/cuda/relu.h"
#include "models/dropout_mask.h"
#include "tests/models/cuda_test_util.h"
#include "tests/models/layer_grad_check.h"

namespace pstrain::models {
namespace {

using ::pstrain::models::testing::ExpectRelativeError;
using ::pstrain::models::testing::RandomVector;
using ::pstrain::models::testing::ToDevice;
using ::pstrain::models::testing::ToHost;

double SumTolerance(int64_t terms) {
  return std::max(1e-5, 2.0 * FLT_EPSILON * std::sqrt(static_cast<double>(terms)));
}

// One forward and backward pass's inputs, in host memory.
struct Inputs {
  int n = 1;
  bool training = true;
  uint64_t seed = 42;
  std::vector<uint64_t> keys;  // [n], or empty
  std::vector<float> params;   // the layer's slice, or empty
  std::vector<float> x;        // [n, input shape]
  std::vector<float> dy;       // [n, output shape]
};

struct Outputs {
  std::vector<float> y, dx, dparams;
};

Inputs RandomInputs(const Layer& layer, int n, uint64_t seed) {
  Inputs in;
  in.n = n;
  SplitMix64 rng(seed);
  for (int i = 0; i < n; ++i)
    in.keys.push_back(MakeExampleKey(3, 1000 + 7 * i) ^ (rng.Next() << 40));
  for (const ParamSpec& spec : layer.params()) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(spec.fan_in));
    const std::vector<float> values = RandomVector(spec.size, -bound, bound, rng.Next());
    in.params.insert(in.params.end(), values.begin(), values.end());
  }
  in.x = RandomVector(n * layer.input_shape().size(), -1.0f, 1.0f, rng.Next());
  in.dy = RandomVector(n * layer.output_shape().size(), -1.0f, 1.0f, rng.Next());
  return in;
}

Outputs RunCpu(Layer& layer, const Inputs& in) {
  const BatchContext ctx{in.n, in.training, in.seed, in.keys.empty() ? nullptr : in.keys.data()};
  Outputs out{std::vector<float>(in.dy.size()), std::vector<float>(in.x.size()),
              std::vector<float>(in.params.size())};
  PSTRAIN_EXPECT_OK(layer.Forward(ctx, in.params.data(), in.x.data(), out.y.data()));
  PSTRAIN_EXPECT_OK(layer.Backward(ctx, in.params.data(), in.x.data(), out.y.data(), in.dy.data(),
                                   out.dx.data(), out.dparams.data()));
  return out;
}

// What the GPU buffers hold before the first pass, and their guards: a
// quiet NaN with a payload no computation makes (computed NaNs are the
// default NaN or an input's, and no input holds this one). An element left
// unwritten stays NaN, which fails every comparison below.
constexpr uint32_t kSentinelBits = 0x7fc0dead;
constexpr int kGuard = 64;  // sentinel floats after each buffer
constexpr int kPasses = 2;

float Sentinel() {
  float value;
  std::memcpy(&value, &kSentinelBits, sizeof(value));
  return value;
}

std::vector<float> Sentinels(size_t size) { return std::vector<float>(size, Sentinel()); }

bool IsSentinel(float value) { return std::memcmp(&value, &kSentinelBits, sizeof(value)) == 0; }

// Where RunCuda places its buffers, in floats past cudaMalloc's 256-byte
// alignment: the parameters and their gradients (in a model, a slice of the
// flat buffers, which may start at any float: mnist_cnn's conv1.bias and
// fc2.weight are only 8-byte aligned, a tensor of odd size leaves the next
// one 4-byte aligned), and the activations and their gradients.
struct Placement {
  int params = 1;
  int activations = 0;
};

// A device copy of `values`, starting `offset` floats past a 256-byte
// boundary, after `offset` sentinels and before kGuard more.
class PlacedBuffer {
 public:
  PlacedBuffer(const std::vector<float>& values, int offset)
      : offset_(offset), size_(static_cast<int64_t>(values.size())) {
    std::vector<float> host = Sentinels(offset + values.size() + kGuard);
    std::copy(values.begin(), values.end(), host.begin() + offset);
    array_ = ToDevice(host);
  }

  float* data() const { return array_.data() + offset_; }

  // The values, once the device is idle; expects the guards untouched.
  std::vector<float> Download(const std::string& what) const {
    std::vector<float> host = ToHost(array_, array_.size());
    const auto guard_intact = [&](int64_t begin, int64_t end) {
      return std::all_of(host.begin() + begin, host.begin() + end, IsSentinel);
    };
    EXPECT_TRUE(guard_intact(0, offset_)) << what << ": written before its start";
    EXPECT_TRUE(guard_intact(offset_ + size_, array_.size())) << what << ": written past its end";
    return std::vector<float>(host.begin() + offset_, host.begin() + offset_ + size_);
  }

 private:
  cuda::DeviceArray<float> array_;
  int offset_;
  int64_t size_;
};

// kPasses forward and backward passes on the same device buffers, placed
// as `at` says; the outputs of each pass. The first pass finds sentinels in
// every output, the second the first's results.
std::vector<Outputs> RunCuda(Layer& layer, const Inputs& in, Placement at = {}) {
  const PlacedBuffer params(in.params, at.params), x(in.x, at.activations);
  const PlacedBuffer dy(in.dy, at.activations);
  const PlacedBuffer y(Sentinels(in.dy.size()), at.activations);
  const PlacedBuffer dx(Sentinels(in.x.size()), at.activations);
  const PlacedBuffer dparams(Sentinels(in.params.size()), at.params);
  const auto keys = ToDevice(in.keys);
  const BatchContext ctx{in.n, in.training, in.seed, keys.data()};
  std::vector<Outputs> passes;
  for (int pass = 0; pass < kPasses; ++pass) {
    PSTRAIN_EXPECT_OK(layer.Forward(ctx, params.data(), x.data(), y.data()));
    PSTRAIN_EXPECT_OK(layer.Backward(ctx, params.data(), x.data(), y.data(), dy.data(), dx.data(),
                                     dparams.data()));
    passes.push_back({y.Download("y"), dx.Download("dx"), dparams.Download("dparams")});
  }
  return passes;
}

// "pass 2/2 ", for the messages of a pass's comparisons.
std::string PassName(size_t pass) { return absl::StrCat("pass ", pass + 1, "/", kPasses, " "); }

std::vector<float> Slice(const std::vector<float>& v, const ParamSpec& spec) {
  return std::vector<float>(v.begin() + spec.offset, v.begin() + spec.offset + spec.size);
}

// Bitwise equality, so that NaN == NaN.
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

class CudaLayers : public ::testing::Test {
 protected:
  void SetUp() override {
    PSTRAIN_SKIP_WITHOUT_GPU();
    absl::StatusOr<std::unique_ptr<cuda::CudaContext>> context = cuda::CudaContext::Create(0);
    ASSERT_TRUE(context.ok()) << context.status();
    context_ = std::move(context).value();
  }

  std::unique_ptr<cuda::CudaContext> context_;
};

// --- Conv2d -----------------------------------------------------------------

struct ConvCase {
  Shape in;
  int cout, kernel, max_batch, n;
};

void PrintTo(const ConvCase& c, std::ostream* os) {
  *os << c.in.c << "x" << c.in.h << "x" << c.in.w << " -> " << c.cout << " k" << c.kernel << " n"
      << c.n << "/" << c.max_batch;
}

class CudaConv2d : public CudaLayers, public ::testing::WithParamInterface<ConvCase> {};

// Compares both GPU passes with the CPU's at batch n, with the tolerances
// above.
void ExpectConvMatches(Layer& gpu, Layer& cpu, int n, int kernel, uint64_t seed,
                       Placement placement = {}) {
  const Inputs in = RandomInputs(cpu, n, seed);
  const Outputs want = RunCpu(cpu, in);
  const std::vector<Outputs> passes = RunCuda(gpu, in, placement);
  const Shape x = cpu.input_shape(), y = cpu.output_shape();
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    const Outputs& got = passes[pass];
    const std::string at = absl::StrCat(cpu.name(), " n=", n, " w+", placement.params, " x+",
                                        placement.activations, " ", PassName(pass));
    ExpectRelativeError(at + "y", got.y, want.y, SumTolerance(int64_t{x.c} * kernel * kernel + 1));
    ExpectRelativeError(at + "dx", got.dx, want.dx, SumTolerance(int64_t{y.c} * kernel * kernel));
    for (const ParamSpec& spec : cpu.params()) {
      ExpectRelativeError(at + spec.name, Slice(got.dparams, spec), Slice(want.dparams, spec),
                          SumTolerance(int64_t{n} * y.h * y.w));
    }
  }
}

// The algorithms are chosen once, in Create; they must then work wherever
// a model's flat buffers put the parameters (any float: 4, 8, 12 or 16
// bytes past an alignment boundary, or on one) and on a caller's
// activations off a 256-byte boundary (4 or 16 bytes past one, copied
// through the layer's buffers) or on another one (64 floats on).
constexpr Placement kPlacements[] = {{0, 0}, {1, 0}, {2, 0}, {3, 0},
                                     {4, 0}, {1, 1}, {0, 4}, {3, 64}};

// Both backward paths: our GEMMs (what a model gets) and cuDNN's algorithms
// (what a device short of memory gets).
TEST_P(CudaConv2d, MatchesTheCpuForwardAndBackwardWhereverItsBuffersStart) {
  const ConvCase c = GetParam();
  cpu::Conv2d cpu("conv", c.in, c.cout, c.kernel, c.max_batch);
  for (const auto path :
       {cuda::Conv2d::BackwardPath::kGemmWhenItFits, cuda::Conv2d::BackwardPath::kCudnn}) {
    auto gpu = cuda::Conv2d::Create(*context_, "conv", c.in, c.cout, c.kernel, c.max_batch, path);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const std::string algorithms = (*gpu)->algorithms();
    SCOPED_TRACE(algorithms);
    EXPECT_EQ(absl::StrContains(algorithms, "bwd=gemm"),
              path == cuda::Conv2d::BackwardPath::kGemmWhenItFits);
    ASSERT_EQ((*gpu)->output_shape(), cpu.output_shape());
    for (const Placement& placement : kPlacements) {
      ExpectConvMatches(**gpu, cpu, c.n, c.kernel, 100 + c.n, placement);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaConv2d,
    ::testing::Values(ConvCase{{1, 28, 28}, 10, 5, 16, 16},   // mnist_cnn conv1
                      ConvCase{{10, 12, 12}, 20, 5, 16, 16},  // mnist_cnn conv2
                      ConvCase{{32, 26, 26}, 64, 3, 4, 4},    // cnn_large conv2
                      ConvCase{{3, 7, 6}, 4, 3, 8, 5},        // odd shape, partial batch
                      // more examples than the bias sum's 64 slices, unevenly cut
                      ConvCase{{1, 28, 28}, 10, 5, 160, 130}));

// cnn_large's conv2 holds (288 + 64) * 576 floats of filter-gradient scratch
// per example, so at most 331 examples fit Conv2d::kMaxFilterScratchFloats:
// 397 examples take two chunks, the second adding to the first.
TEST_F(CudaLayers, Conv2dFilterGradientSpansChunksOfExamples) {
  cpu::Conv2d cpu("conv2", {32, 26, 26}, 64, 3, 400);
  auto gpu = cuda::Conv2d::Create(*context_, "conv2", {32, 26, 26}, 64, 3, 400);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ExpectConvMatches(**gpu, cpu, 397, 3, 17);
}

// 500 examples of mnist_cnn's conv1 are 288,000 columns: the filter
// gradient is summed in 70 slices of 4,114 columns and a 71st of the 20
// left over (Conv2d::FilterGradient).
TEST_F(CudaLayers, Conv2dFilterGradientSplitsLongSums) {
  constexpr int kExamples = 500;
  static_assert(kExamples * 24 * 24 >= cuda::Conv2d::kFilterSplitColumns);
  cpu::Conv2d cpu("conv1", {1, 28, 28}, 10, 5, kExamples);
  auto gpu = cuda::Conv2d::Create(*context_, "conv1", {1, 28, 28}, 10, 5, kExamples);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ExpectConvMatches(**gpu, cpu, kExamples, 5, 23);
}

// A sync run repeats bit for bit only if every pass does: the bias sum and
// the chosen algorithms must not depend on timing (atomics).
TEST_F(CudaLayers, Conv2dGradientsRepeatBitForBit) {
  cpu::Conv2d cpu("conv1", {1, 28, 28}, 10, 5, 200);
  auto gpu = cuda::Conv2d::Create(*context_, "conv1", {1, 28, 28}, 10, 5, 200);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const Inputs in = RandomInputs(cpu, 197, 5);
  const std::vector<Outputs> passes = RunCuda(**gpu, in);
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_TRUE(SameBits(passes[0].dparams, passes[1].dparams)) << (*gpu)->algorithms();
  EXPECT_TRUE(SameBits(passes[0].dx, passes[1].dx)) << (*gpu)->algorithms();
}

// The descriptors follow the batch size; the algorithms chosen at max_batch
// serve every smaller one.
TEST_F(CudaLayers, Conv2dTakesEveryBatchSizeUpToMax) {
  cpu::Conv2d cpu("conv2", {10, 12, 12}, 20, 5, 32);
  auto gpu = cuda::Conv2d::Create(*context_, "conv2", {10, 12, 12}, 20, 5, 32);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (int n : {32, 1, 7, 32}) ExpectConvMatches(**gpu, cpu, n, 5, 200 + n);
  const BatchContext too_big{33, true, 1, nullptr};
  EXPECT_EQ((*gpu)->Forward(too_big, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// --- Linear -----------------------------------------------------------------

struct LinearCase {
  Shape in;
  int out, max_batch, n;
};

void PrintTo(const LinearCase& c, std::ostream* os) {
  *os << c.in.size() << " -> " << c.out << " n" << c.n << "/" << c.max_batch;
}

class CudaLinear : public CudaLayers, public ::testing::WithParamInterface<LinearCase> {};

TEST_P(CudaLinear, MatchesTheCpuForwardAndBackward) {
  const LinearCase c = GetParam();
  cpu::Linear cpu("fc", c.in, c.out, c.max_batch);
  auto gpu = cuda::Linear::Create(*context_, "fc", c.in, c.out, c.max_batch);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const Inputs in = RandomInputs(cpu, c.n, 300 + c.out);
  const Outputs want = RunCpu(cpu, in);
  const std::vector<Outputs> passes = RunCuda(**gpu, in);
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    const Outputs& got = passes[pass];
    const std::string at = absl::StrCat("fc ", c.in.size(), "->", c.out, " ", PassName(pass));
    ExpectRelativeError(at + "y", got.y, want.y, SumTolerance(c.in.size() + 1));
    ExpectRelativeError(at + "dx", got.dx, want.dx, SumTolerance(c.out));
    for (const ParamSpec& spec : cpu.params()) {
      ExpectRelativeError(at + spec.name, Slice(got.dparams, spec), Slice(want.dparams, spec),
                          SumTolerance(c.n));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaLinear,
                         ::testing::Values(LinearCase{{20, 4, 4}, 50, 16, 16},    // mnist_cnn fc1
                                           LinearCase{{50, 1, 1}, 10, 16, 16},    // mnist_cnn fc2
                                           LinearCase{{1, 28, 28}, 512, 32, 32},  // mlp fc1
                                           LinearCase{{3, 5, 7}, 13, 8, 5}));     // partial batch

// --- Relu -------------------------------------------------------------------

// Bitwise, so that a NaN must stay NaN and -0 stay -0 as on the CPU
// (EXPECT_EQ on floats would call -0 and 0 equal and NaN unequal to itself).
TEST_F(CudaLayers, ReluIsBitIdenticalToTheCpu) {
  const Shape shape{10, 12, 12};
  cpu::Relu cpu("relu", shape, 16);
  cuda::Relu gpu(*context_, "relu", shape, 16);
  Inputs in = RandomInputs(cpu, 13, 400);
  for (int i = 0; i < 50; ++i) in.x[i * 7] = 0.0f;  // the kink itself: y = 0, dx = 0
  for (int i = 0; i < 20; ++i) in.x[i * 11 + 3] = -0.0f;
  for (int i = 0; i < 20; ++i) in.x[i * 13 + 5] = std::numeric_limits<float>::quiet_NaN();
  const Outputs want = RunCpu(cpu, in);
  const std::vector<Outputs> passes = RunCuda(gpu, in);
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    EXPECT_TRUE(SameBits(passes[pass].y, want.y)) << PassName(pass);
    EXPECT_TRUE(SameBits(passes[pass].dx, want.dx)) << PassName(pass);
  }
}

// An error an earlier call left unread (here an invalid cudaSetDevice, as a
// runtime call inside cuDNN or cuBLAS may leave one) is not blamed on the
// next kernel launched, which runs and matches the CPU.
TEST_F(CudaLayers, AKernelIsNotBlamedForAnEarlierCallsError) {
  const Shape shape{4, 5, 6};
  cpu::Relu cpu("relu", shape, 3);
  cuda::Relu gpu(*context_, "relu", shape, 3);
  const Inputs in = RandomInputs(cpu, 3, 410);
  const Outputs want = RunCpu(cpu, in);
  const auto x = ToDevice(in.x);
  auto y = ToDevice(Sentinels(in.x.size()));
  ASSERT_NE(cudaSetDevice(cuda::DeviceCount() + 7), cudaSuccess);
  PSTRAIN_EXPECT_OK(gpu.Forward({3, false, 1, nullptr}, nullptr, x.data(), y.data()));
  EXPECT_TRUE(SameBits(ToHost(y, y.size()), want.y));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// After a fault (a kernel read an address that is no device memory) the
// context is unusable: the next launch is refused with the sticky error
// named. In a child process (a death test run as a fresh process), as the
// fault ends the CUDA context of the process it happens in.
[[noreturn]] void FaultThenLaunch(cuda::CudaContext& context) {
  const Shape shape{1, 1, 1024};
  cuda::Relu relu(context, "relu", shape, 1);
  auto y = ToDevice(std::vector<float>(shape.size()));
  const BatchContext ctx{1, false, 1, nullptr};
  const float* unmapped = reinterpret_cast<const float*>(uintptr_t{256});
  const absl::Status launched = relu.Forward(ctx, nullptr, unmapped, y.data());
  const cudaError_t fault = cudaStreamSynchronize(context.stream());
  const absl::Status next = relu.Forward(ctx, nullptr, y.data(), y.data());
  std::fprintf(stderr, "launched: %s; fault: %s; next: %s\n", launched.ToString().c_str(),
               cudaGetErrorName(fault), next.ToString().c_str());
  std::fflush(stderr);
  std::_Exit(launched.ok() && fault != cudaSuccess && !next.ok() ? 0 : 1);
}

TEST_F(CudaLayers, AfterAFaultTheNextLaunchReportsTheStickyError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(FaultThenLaunch(*context_), ::testing::ExitedWithCode(0),
              "next: .*before launch of ReluForwardKernel: .*cudaError.*sticky");
}

// --- MaxPool2d --------------------------------------------------------------

struct PoolCase {
  Shape in;
  int kernel;
  float grid;  // > 0: inputs rounded to multiples of it, so windows tie often
};

void PrintTo(const PoolCase& c, std::ostream* os) {
  *os << c.in.c << "x" << c.in.h << "x" << c.in.w << " k" << c.kernel << " grid " << c.grid;
}

class CudaMaxPool2d : public CudaLayers, public ::testing::WithParamInterface<PoolCase> {};

TEST_P(CudaMaxPool2d, IsBitIdenticalToTheCpuTiesIncluded) {
  const PoolCase c = GetParam();
  const int n = 6;
  cpu::MaxPool2d cpu("pool", c.in, c.kernel, 8);
  auto gpu = cuda::MaxPool2d::Create(*context_, "pool", c.in, c.kernel, 8);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  Inputs in = RandomInputs(cpu, n, 500 + c.kernel);
  if (c.grid > 0) {
    for (float& v : in.x) v = std::round(v / c.grid) * c.grid;
  }
  const Outputs want = RunCpu(cpu, in);
  const std::vector<Outputs> passes = RunCuda(**gpu, in);
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    EXPECT_TRUE(SameBits(passes[pass].y, want.y)) << PassName(pass);
    EXPECT_TRUE(SameBits(passes[pass].dx, want.dx)) << PassName(pass);
  }
  const int64_t outputs = n * cpu.output_shape().size();
  std::vector<int32_t> gpu_argmax(outputs);
  ASSERT_EQ(cudaMemcpy(gpu_argmax.data(), (*gpu)->argmax(), sizeof(int32_t) * outputs,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(gpu_argmax, std::vector<int32_t>(cpu.argmax(), cpu.argmax() + outputs));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaMaxPool2d,
    ::testing::Values(PoolCase{{10, 24, 24}, 2, 0.0f},  // mnist_cnn pool1
                      PoolCase{{20, 8, 8}, 2, 0.0f},    // mnist_cnn pool2
                      PoolCase{{20, 8, 8}, 2, 0.5f},    // ties in most windows
                      PoolCase{{3, 7, 9}, 2, 0.25f},    // floor: last row and column unused
                      PoolCase{{4, 7, 7}, 2, 0.0f},     // floor: 7x7 -> 3x3
                      PoolCase{{2, 9, 10}, 3, 0.5f},    // k = 3, ties; floor in w
                      PoolCase{{3, 10, 11}, 3, 0.0f},   // floor: 10x11 -> 3x3
                      PoolCase{{2, 9, 9}, 4, 0.5f}));   // k = 4, ties; floor: 9x9 -> 2x2

// A NaN wins its window (the last NaN, in row-major order), on both.
TEST_F(CudaLayers, MaxPool2dLetsNaNWinAsTheCpuDoes) {
  const Shape shape{2, 6, 6};
  cpu::MaxPool2d cpu("pool", shape, 2, 2);
  auto gpu = cuda::MaxPool2d::Create(*context_, "pool", shape, 2, 2);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  Inputs in = RandomInputs(cpu, 2, 600);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int i : {0, 1, 7, 14, 20, 21, 40, 77, 100}) in.x[i] = nan;
  const Outputs want = RunCpu(cpu, in);
  const std::vector<Outputs> passes = RunCuda(**gpu, in);
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    EXPECT_TRUE(SameBits(passes[pass].y, want.y)) << PassName(pass);
    EXPECT_TRUE(SameBits(passes[pass].dx, want.dx)) << PassName(pass);
  }
}

// --- Dropout, Dropout2d -----------------------------------------------------

struct DropoutCase {
  Shape shape;
  float p;
  bool channelwise;
  int layer_index;
};

void PrintTo(const DropoutCase& c, std::ostream* os) {
  *os << (c.channelwise ? "dropout2d " : "dropout ") << c.shape.c << "x" << c.shape.h << "x"
      << c.shape.w << " p" << c.p << " layer " << c.layer_index;
}

class CudaDropout : public CudaLayers, public ::testing::WithParamInterface<DropoutCase> {};

// Same masks as the CPU: y = x * m and dx = dy * m bit for bit, and with
// x = 1 the output is the mask itself.
TEST_P(CudaDropout, DrawsTheCpusMasksBitForBit) {
  const DropoutCase c = GetParam();
  const int n = 9;
  std::unique_ptr<Layer> cpu;
  absl::StatusOr<std::unique_ptr<Layer>> gpu;
  if (c.channelwise) {
    cpu = std::make_unique<cpu::Dropout2d>("drop", c.shape, c.p, c.layer_index, 16);
    gpu = cuda::Dropout2d::Create(*context_, "drop", c.shape, c.p, c.layer_index, 16);
  } else {
    cpu = std::make_unique<cpu::Dropout>("drop", c.shape, c.p, c.layer_index, 16);
    gpu = cuda::Dropout::Create(*context_, "drop", c.shape, c.p, c.layer_index, 16);
  }
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  Inputs in = RandomInputs(*cpu, n, 700 + c.layer_index);
  Outputs want = RunCpu(*cpu, in);
  std::vector<Outputs> passes = RunCuda(**gpu, in);
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    EXPECT_EQ(passes[pass].y, want.y) << PassName(pass);
    EXPECT_EQ(passes[pass].dx, want.dx) << PassName(pass);
  }
  in.x.assign(in.x.size(), 1.0f);
  want = RunCpu(*cpu, in);
  passes = RunCuda(**gpu, in);
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    const std::vector<float>& mask = passes[pass].y;
    EXPECT_EQ(mask, want.y) << PassName(pass);
    const int64_t dropped = std::count(mask.begin(), mask.end(), 0.0f);
    EXPECT_GT(dropped, 0) << PassName(pass);
    EXPECT_LT(dropped, static_cast<int64_t>(mask.size())) << PassName(pass);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layers, CudaDropout,
    ::testing::Values(DropoutCase{{50, 1, 1}, 0.5f, false, 9},     // mnist_cnn fc1_drop
                      DropoutCase{{20, 8, 8}, 0.5f, true, 4},      // mnist_cnn conv2_drop
                      DropoutCase{{64, 12, 12}, 0.25f, false, 5},  // cnn_large drop1
                      DropoutCase{{7, 3, 5}, 0.3f, true, 2}));     // odd shape

TEST_F(CudaLayers, DropoutIsTheIdentityWhenNotTraining) {
  auto gpu = cuda::Dropout2d::Create(*context_, "drop", {20, 8, 8}, 0.5f, 4, 16);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  Inputs in = RandomInputs(**gpu, 5, 800);
  in.training = false;
  const std::vector<Outputs> passes = RunCuda(**gpu, in);
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    EXPECT_EQ(passes[pass].y, in.x) << PassName(pass);
    EXPECT_EQ(passes[pass].dx, in.dy) << PassName(pass);
  }
}

TEST_F(CudaLayers, DropoutRefusesToTrainWithoutKeys) {
  auto gpu = cuda::Dropout::Create(*context_, "drop", {50, 1, 1}, 0.5f, 9, 16);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const BatchContext ctx{4, /*training=*/true, 1, nullptr};
  EXPECT_EQ((*gpu)->Forward(ctx, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// --- LogSoftmaxNll ----------------------------------------------------------

TEST_F(CudaLayers, LogSoftmaxNllMatchesTheCpu) {
  const int n = 37, classes = 10;
  std::vector<float> logits = RandomVector(n * classes, -5.0f, 5.0f, 900);
  for (int j = 0; j < classes; ++j) logits[j] = 1.5f;  // row 0: all tied
  for (int i = 1; i < 8; ++i) {                        // rows 1-7: ties at the top
    for (int j = 0; j < classes; ++j) logits[i * classes + j] = std::round(logits[i * classes + j]);
  }
  SplitMix64 rng(901);
  std::vector<int32_t> labels(n);
  for (int32_t& label : labels) label = static_cast<int32_t>(rng.Below(classes));
  labels[0] = 0;

  cpu::LogSoftmaxNll cpu(classes);
  std::vector<float> cpu_log_probs(n * classes), cpu_dlogits(n * classes);
  const absl::StatusOr<double> cpu_loss =
      cpu.Forward(n, logits.data(), labels.data(), cpu_log_probs.data());
  ASSERT_TRUE(cpu_loss.ok()) << cpu_loss.status();
  cpu.Backward(n, cpu_log_probs.data(), labels.data(), cpu_dlogits.data());
  int64_t cpu_correct = 0;
  for (int i = 0; i < n; ++i) {
    const float* row = logits.data() + i * classes;
    cpu_correct += std::max_element(row, row + classes) - row == labels[i];
  }

  cuda::LogSoftmaxNll gpu(classes);
  PSTRAIN_EXPECT_OK(gpu.CheckLabels(n, labels.data()));
  const auto d_logits = ToDevice(logits);
  const auto d_labels = ToDevice(labels);
  const PlacedBuffer log_probs(Sentinels(n * classes), 0), stats(Sentinels(2 * n), 0);
  const PlacedBuffer dlogits(Sentinels(n * classes), 0);
  for (int pass = 0; pass < kPasses; ++pass) {
    PSTRAIN_EXPECT_OK(gpu.Forward(context_->stream(), n, d_logits.data(), d_labels.data(),
                                  log_probs.data(), stats.data()));
    PSTRAIN_EXPECT_OK(
        gpu.Backward(context_->stream(), n, log_probs.data(), d_labels.data(), dlogits.data()));
    const std::vector<float> host_stats = stats.Download("stats");
    const std::string at = PassName(pass);
    ExpectRelativeError(at + "log_probs", log_probs.Download("log_probs"), cpu_log_probs, 1e-6);
    ExpectRelativeError(at + "dlogits", dlogits.Download("dlogits"), cpu_dlogits, 1e-6);
    EXPECT_NEAR(cuda::LogSoftmaxNll::MeanLoss(n, host_stats.data()), *cpu_loss, 1e-6 * *cpu_loss);
    EXPECT_EQ(cuda::LogSoftmaxNll::Correct(n, host_stats.data()), cpu_correct) << at;
    EXPECT_EQ(host_stats[n], 1.0f) << at;  // row 0, all tied, picks class 0, its label
  }
}

// Host-side, so these run with or without a GPU.
TEST(CudaLogSoftmaxNll, RejectsTheLabelsTheCpuRejectsWithItsMessages) {
  cpu::LogSoftmaxNll cpu(10);
  cuda::LogSoftmaxNll gpu(10);
  const std::vector<float> logits(40, 0.0f);
  std::vector<float> log_probs(40);
  for (int32_t bad : {-1, 10, 1 << 30}) {
    const std::vector<int32_t> labels = {3, 9, bad, 0};
    const absl::Status want =
        cpu.Forward(4, logits.data(), labels.data(), log_probs.data()).status();
    EXPECT_EQ(gpu.CheckLabels(4, labels.data()), want);
  }
  const std::vector<int32_t> good = {3, 9, 0, 0};
  PSTRAIN_EXPECT_OK(gpu.CheckLabels(4, good.data()));
  EXPECT_EQ(gpu.CheckLabels(0, good.data()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaLogSoftmaxNll, SumsTheLossInExampleOrderInDouble) {
  // stats: [log p(label) for each example..., hit flags...]
  const std::vector<float> stats = {-0.5f, -1.25f, -2.0f, 1.0f, 0.0f, 1.0f};
  EXPECT_DOUBLE_EQ(cuda::LogSoftmaxNll::MeanLoss(3, stats.data()), 3.75 / 3);
  EXPECT_EQ(cuda::LogSoftmaxNll::Correct(3, stats.data()), 2);
}

}  // namespace
}  // namespace pstrain::models

// Tests of the CPU layers: hand-worked forward cases, and a finite-difference
// gradient check for every layer (see layer_grad_check.h).
//
// Tolerances: errors are |fd - analytic| / max(1, |analytic|), eps = 1e-2.
// Conv, linear, relu, max-pool and dropout are piecewise linear, so only
// float rounding remains: measured worst 2.1e-5 (conv), 1.1e-5 (linear),
// 3.5e-7 (dropout), 0 (relu, max-pool); held to 2e-4. log_softmax + NLL:
// measured worst 6.9e-6 absolute, held to 5e-5.

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/cpu/conv2d.h"
#include "models/cpu/dropout.h"
#include "models/cpu/linear.h"
#include "models/cpu/log_softmax_nll.h"
#include "models/cpu/max_pool2d.h"
#include "models/cpu/relu.h"
#include "models/dropout_mask.h"
#include "tests/models/layer_grad_check.h"

namespace pstrain::models::cpu {
namespace {

using ::pstrain::models::testing::AwayFromZero;
using ::pstrain::models::testing::DistinctValues;
using ::pstrain::models::testing::LayerGradCheck;
using ::pstrain::models::testing::RandomVector;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatEq;

constexpr double kEps = 1e-2;
constexpr double kPiecewiseLinearTolerance = 2e-4;
constexpr int kAll = 1 << 30;

BatchContext TrainingBatch(int n) { return {n, /*training=*/true, /*seed=*/1, nullptr}; }

// --- Conv2d -----------------------------------------------------------------

TEST(Conv2d, ComputesAHandWorkedExample) {
  // x = [1 2 3; 4 5 6; 7 8 9], w = [1 2; 3 4], b = 0.5:
  // y[0,0] = 1*1 + 2*2 + 3*4 + 4*5 + 0.5 = 37.5, and so on.
  Conv2d conv("conv", {1, 3, 3}, 1, 2, 1);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<float> params = {1, 2, 3, 4, 0.5f};
  std::vector<float> y(4);
  ASSERT_TRUE(conv.Forward(TrainingBatch(1), params.data(), x.data(), y.data()).ok());
  EXPECT_THAT(y, ElementsAre(37.5f, 47.5f, 67.5f, 77.5f));

  // dy picks y[0,0]: dw is its window of x, db 1, dx the kernel at the corner.
  const std::vector<float> dy = {1, 0, 0, 0};
  std::vector<float> dx(9), dparams(5);
  ASSERT_TRUE(conv.Backward(TrainingBatch(1), params.data(), x.data(), y.data(), dy.data(),
                            dx.data(), dparams.data())
                  .ok());
  EXPECT_THAT(dparams, ElementsAre(1, 2, 4, 5, 1));
  EXPECT_THAT(dx, ElementsAre(1, 2, 0, 3, 4, 0, 0, 0, 0));
}

TEST(Conv2d, DeclaresPyTorchParameterShapes) {
  Conv2d conv("conv1", {3, 8, 8}, 4, 3, 1);
  const std::vector<ParamSpec> params = conv.params();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "conv1.weight");
  EXPECT_THAT(params[0].dims, ElementsAre(4, 3, 3, 3));
  EXPECT_EQ(params[0].offset, 0);
  EXPECT_EQ(params[0].fan_in, 27);
  EXPECT_EQ(params[1].name, "conv1.bias");
  EXPECT_THAT(params[1].dims, ElementsAre(4));
  EXPECT_EQ(params[1].offset, 108);
  EXPECT_EQ(conv.output_shape(), (Shape{4, 6, 6}));
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  Conv2d conv("conv", {3, 7, 6}, 4, 3, 2);
  LayerGradCheck check(conv, TrainingBatch(2), RandomVector(2 * 3 * 7 * 6, -1, 1, 1),
                       RandomVector(conv.num_params(), -0.5f, 0.5f, 2), 3);
  EXPECT_LT(check.MaxInputError(kEps, kAll), kPiecewiseLinearTolerance);
  EXPECT_LT(check.MaxParamError(kEps, kAll), kPiecewiseLinearTolerance);
}

// Winograd's F(2x2, 3x3) (4 or more input channels, even output sizes).
TEST(Conv2d, WinogradGradientsMatchFiniteDifferences) {
  Conv2d conv("conv", {4, 18, 20}, 3, 3, 2);
  LayerGradCheck check(conv, TrainingBatch(2), RandomVector(2 * 4 * 18 * 20, -1, 1, 11),
                       RandomVector(conv.num_params(), -0.5f, 0.5f, 12), 13);
  EXPECT_LT(check.MaxInputError(kEps, 300), kPiecewiseLinearTolerance);
  EXPECT_LT(check.MaxParamError(kEps, kAll), kPiecewiseLinearTolerance);
}

// The textbook loops, in double: y, and dx, dw, db for a given dy.
struct ConvReference {
  std::vector<double> y, dx, dw, db;
};

ConvReference DirectConv(const std::vector<float>& x, const std::vector<float>& params,
                         const std::vector<float>& dy, int n, Shape in, Shape out, int k) {
  ConvReference ref{std::vector<double>(n * out.size()), std::vector<double>(x.size()),
                    std::vector<double>(out.c * in.c * k * k), std::vector<double>(out.c)};
  const float* bias = params.data() + ref.dw.size();
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out.c; ++o)
      for (int p = 0; p < out.h; ++p)
        for (int q = 0; q < out.w; ++q) {
          const int64_t yi = ((int64_t{i} * out.c + o) * out.h + p) * out.w + q;
          double sum = bias[o];
          ref.db[o] += dy[yi];
          for (int c = 0; c < in.c; ++c)
            for (int u = 0; u < k; ++u)
              for (int v = 0; v < k; ++v) {
                const int64_t xi = ((int64_t{i} * in.c + c) * in.h + p + u) * in.w + q + v;
                const int64_t wi = ((int64_t{o} * in.c + c) * k + u) * k + v;
                sum += double{params[wi]} * x[xi];
                ref.dw[wi] += double{dy[yi]} * x[xi];
                ref.dx[xi] += double{dy[yi]} * params[wi];
              }
          ref.y[yi] = sum;
        }
  return ref;
}

void ExpectNear(const std::vector<float>& actual, const std::vector<double>& expected,
                double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance * std::max(1.0, std::abs(expected[i])))
        << "at " << i;
  }
}

struct ConvCase {
  Shape in;
  int out_channels, kernel, n;
};

// The networks' shapes and odd ones: output rows that the kernels' vectors
// (4 or 8 lanes) divide or not (24, 8; 26, 4, 5), channel and tap counts
// that their register blocks divide or not; 3x3 convolutions that take
// Winograd's F(2x2, 3x3) (32 -> 64 on 26x26, and rows of tiles that the
// vectors divide or not).
class Conv2dShapes : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dShapes, MatchTheDirectConvolution) {
  const ConvCase c = GetParam();
  Conv2d conv("conv", c.in, c.out_channels, c.kernel, c.n);
  const Shape out = conv.output_shape();
  const std::vector<float> x = RandomVector(c.n * c.in.size(), -1, 1, 4);
  const std::vector<float> params = RandomVector(conv.num_params(), -0.2f, 0.2f, 5);
  const std::vector<float> dy = RandomVector(c.n * out.size(), -1, 1, 6);
  std::vector<float> y(dy.size()), dx(x.size()), dparams(params.size());
  ASSERT_TRUE(conv.Forward(TrainingBatch(c.n), params.data(), x.data(), y.data()).ok());
  ASSERT_TRUE(conv.Backward(TrainingBatch(c.n), params.data(), x.data(), y.data(), dy.data(),
                            dx.data(), dparams.data())
                  .ok());
  const ConvReference ref = DirectConv(x, params, dy, c.n, c.in, out, c.kernel);
  ExpectNear(y, ref.y, 1e-5);
  ExpectNear(dx, ref.dx, 1e-5);
  std::vector<double> dparams_ref = ref.dw;
  dparams_ref.insert(dparams_ref.end(), ref.db.begin(), ref.db.end());
  // dw and db are float sums of up to n * 24 * 24 = 11,520 terms: looser.
  ExpectNear(dparams, dparams_ref, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dShapes,
    ::testing::Values(ConvCase{{1, 28, 28}, 10, 5, 20}, ConvCase{{10, 12, 12}, 20, 5, 7},
                      ConvCase{{1, 28, 28}, 32, 3, 3}, ConvCase{{32, 26, 26}, 64, 3, 2},
                      ConvCase{{2, 28, 28}, 5, 5, 3}, ConvCase{{3, 7, 6}, 4, 3, 5},
                      ConvCase{{2, 9, 13}, 7, 5, 3}, ConvCase{{1, 4, 4}, 1, 4, 2},
                      ConvCase{{4, 18, 18}, 6, 3, 3}, ConvCase{{5, 20, 22}, 9, 3, 2}));

TEST(Conv2d, SkipsTheInputGradientWhenDxIsNull) {
  Conv2d conv("conv", {1, 5, 5}, 2, 3, 1);
  const std::vector<float> x = RandomVector(25, -1, 1, 7), params = RandomVector(20, -1, 1, 8);
  std::vector<float> y(18), dy(18, 1.0f), dparams(20);
  ASSERT_TRUE(conv.Forward(TrainingBatch(1), params.data(), x.data(), y.data()).ok());
  ASSERT_TRUE(conv.Backward(TrainingBatch(1), params.data(), x.data(), y.data(), dy.data(), nullptr,
                            dparams.data())
                  .ok());
  EXPECT_FLOAT_EQ(dparams[18], 9.0f);  // db = sum of a 3x3 dy of ones
}

// --- MaxPool2d --------------------------------------------------------------

TEST(MaxPool2d, TakesWindowMaximaAndRemembersWhere) {
  MaxPool2d pool("pool", {1, 4, 4}, 2, 1);
  // clang-format off
  const std::vector<float> x = { 1,  9,    2, 3,
                                 4,  5,    8, 1,
                                -1, -2,    0, 7,
                                -3, -0.5f, 6, 6};
  // clang-format on
  std::vector<float> y(4);
  ASSERT_TRUE(pool.Forward(TrainingBatch(1), nullptr, x.data(), y.data()).ok());
  EXPECT_THAT(y, ElementsAre(9, 8, -0.5f, 7));
  EXPECT_THAT(std::vector<int32_t>(pool.argmax(), pool.argmax() + 4), ElementsAre(1, 6, 13, 11));

  const std::vector<float> dy = {10, 20, 30, 40};
  std::vector<float> dx(16);
  ASSERT_TRUE(
      pool.Backward(TrainingBatch(1), nullptr, x.data(), y.data(), dy.data(), dx.data(), nullptr)
          .ok());
  EXPECT_THAT(dx, ElementsAre(0, 10, 0, 0, 0, 0, 20, 0, 0, 0, 0, 40, 0, 30, 0, 0));
}

TEST(MaxPool2d, TiesGoToTheFirstMaximumInRowMajorOrder) {
  MaxPool2d pool("pool", {2, 2, 2}, 2, 1);
  const std::vector<float> x = {3, 3, 3, 3,  //
                                1, 5, 5, 5};
  std::vector<float> y(2), dx(8);
  const std::vector<float> dy = {1, 2};
  ASSERT_TRUE(pool.Forward(TrainingBatch(1), nullptr, x.data(), y.data()).ok());
  ASSERT_TRUE(
      pool.Backward(TrainingBatch(1), nullptr, x.data(), y.data(), dy.data(), dx.data(), nullptr)
          .ok());
  EXPECT_THAT(dx, ElementsAre(1, 0, 0, 0, 0, 2, 0, 0));
}

TEST(MaxPool2d, FloorLeavesTheLastRowAndColumnOut) {
  MaxPool2d pool("pool", {1, 5, 5}, 2, 1);
  EXPECT_EQ(pool.output_shape(), (Shape{1, 2, 2}));
  std::vector<float> x(25, 0.0f);
  for (int i = 0; i < 5; ++i) x[4 * 5 + i] = x[i * 5 + 4] = 100;  // largest, but left over
  x[0] = x[3] = x[15] = x[18] = 1;
  std::vector<float> y(4), dx(25);
  const std::vector<float> dy = {1, 1, 1, 1};
  ASSERT_TRUE(pool.Forward(TrainingBatch(1), nullptr, x.data(), y.data()).ok());
  EXPECT_THAT(y, ElementsAre(1, 1, 1, 1));
  ASSERT_TRUE(
      pool.Backward(TrainingBatch(1), nullptr, x.data(), y.data(), dy.data(), dx.data(), nullptr)
          .ok());
  std::vector<float> expected(25, 0.0f);
  expected[0] = expected[3] = expected[15] = expected[18] = 1;
  EXPECT_THAT(dx, ElementsAreArray(expected));
}

// A window at a time, in row-major order: the first maximum wins, a NaN
// wins over anything before it. Returns the argmax within the plane.
int32_t ReferenceArgmax(const float* plane, int w, int k, int p, int q) {
  int32_t best = p * k * w + q * k;
  for (int u = 0; u < k; ++u) {
    for (int v = 0; v < k; ++v) {
      const int32_t i = (p * k + u) * w + q * k + v;
      if (plane[i] > plane[best] || std::isnan(plane[i])) best = i;
    }
  }
  return best;
}

// k = 2 runs in vectors of 4 or 8 windows with an overlapping last block;
// every row width from 4 to 17 windows (odd input sizes too), values with
// many ties and NaNs.
TEST(MaxPool2d, EveryRowWidthMatchesAWindowAtATimeScan) {
  const float kValues[] = {-1.0f, 0.0f, 2.0f, 2.0f, std::nanf("")};
  for (int w = 8; w <= 35; ++w) {
    const int h = 4 + w % 3, n = 2, c = 3;
    MaxPool2d pool("pool", {c, h, w}, 2, n);
    const Shape out = pool.output_shape();
    SplitMix64 rng(w);
    std::vector<float> x(n * c * h * w);
    for (float& v : x) v = kValues[rng.Below(5)];
    std::vector<float> y(n * out.size());
    ASSERT_TRUE(pool.Forward(TrainingBatch(n), nullptr, x.data(), y.data()).ok());
    for (int plane = 0; plane < n * c; ++plane) {
      for (int i = 0; i < out.h * out.w; ++i) {
        const int32_t want = ReferenceArgmax(x.data() + plane * h * w, w, 2, i / out.w, i % out.w);
        const int j = plane * out.h * out.w + i;
        ASSERT_EQ(pool.argmax()[j], want) << "w=" << w << " plane " << plane << " window " << i;
        const float expected = x[plane * h * w + want];
        ASSERT_TRUE(y[j] == expected || (std::isnan(y[j]) && std::isnan(expected)));
      }
    }
  }
}

TEST(MaxPool2d, GradientsMatchFiniteDifferences) {
  MaxPool2d pool("pool", {3, 6, 8}, 2, 2);
  // Values 0.05 apart and eps = 0.01: no perturbation changes an argmax.
  LayerGradCheck check(pool, TrainingBatch(2), DistinctValues(2 * 3 * 6 * 8, 0.05f, 9), {}, 10);
  EXPECT_LT(check.MaxInputError(kEps, kAll), kPiecewiseLinearTolerance);
}

// --- Relu -------------------------------------------------------------------

TEST(Relu, ClampsNegativesAndPassesTheGradientWhereTheOutputIsPositive) {
  Relu relu("relu", {4, 1, 1}, 1);
  const std::vector<float> x = {-2, -0.0f, 0, 3}, dy = {1, 1, 1, 1};
  std::vector<float> y(4), dx(4);
  ASSERT_TRUE(relu.Forward(TrainingBatch(1), nullptr, x.data(), y.data()).ok());
  EXPECT_THAT(y, ElementsAre(0, 0, 0, 3));
  ASSERT_TRUE(
      relu.Backward(TrainingBatch(1), nullptr, x.data(), y.data(), dy.data(), dx.data(), nullptr)
          .ok());
  EXPECT_THAT(dx, ElementsAre(0, 0, 0, 1));  // 0 at the kink, as PyTorch
}

TEST(Relu, GradientsMatchFiniteDifferences) {
  Relu relu("relu", {3, 5, 4}, 3);
  LayerGradCheck check(relu, TrainingBatch(3), AwayFromZero(3 * 60, 11), {}, 12);
  EXPECT_LT(check.MaxInputError(kEps, kAll), kPiecewiseLinearTolerance);
}

// --- Linear -----------------------------------------------------------------

TEST(Linear, ComputesAHandWorkedExample) {
  // W = [1 2 3; 4 5 6], b = [0.5, -1], x = [1 0 -1; 2 1 0].
  Linear fc("fc", {3, 1, 1}, 2, 2);
  const std::vector<float> params = {1, 2, 3, 4, 5, 6, 0.5f, -1};
  const std::vector<float> x = {1, 0, -1, 2, 1, 0};
  std::vector<float> y(4);
  ASSERT_TRUE(fc.Forward(TrainingBatch(2), params.data(), x.data(), y.data()).ok());
  EXPECT_THAT(y, ElementsAre(-1.5f, -3, 4.5f, 12));

  // dy = I: dW = dy^T x = x, db = [1, 1], dx = dy W = W.
  const std::vector<float> dy = {1, 0, 0, 1};
  std::vector<float> dx(6), dparams(8);
  ASSERT_TRUE(fc.Backward(TrainingBatch(2), params.data(), x.data(), y.data(), dy.data(), dx.data(),
                          dparams.data())
                  .ok());
  EXPECT_THAT(dparams, ElementsAre(1, 0, -1, 2, 1, 0, 1, 1));
  EXPECT_THAT(dx, ElementsAre(1, 2, 3, 4, 5, 6));
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Linear fc("fc", {2, 3, 4}, 7, 3);  // a flattened 2x3x4 input
  EXPECT_EQ(fc.num_params(), 7 * 24 + 7);
  LayerGradCheck check(fc, TrainingBatch(3), RandomVector(3 * 24, -1, 1, 13),
                       RandomVector(fc.num_params(), -0.5f, 0.5f, 14), 15);
  EXPECT_LT(check.MaxInputError(kEps, kAll), kPiecewiseLinearTolerance);
  EXPECT_LT(check.MaxParamError(kEps, kAll), kPiecewiseLinearTolerance);
}

// --- Dropout and Dropout2d --------------------------------------------------

constexpr uint64_t kDropoutSeed = 77;
constexpr int kDropoutLayer = 4;

std::vector<uint64_t> Keys(int n, uint64_t first) {
  std::vector<uint64_t> keys(n);
  for (int i = 0; i < n; ++i) keys[i] = first + 3 * i;
  return keys;
}

BatchContext DropoutBatch(const std::vector<uint64_t>& keys, bool training = true) {
  return {static_cast<int>(keys.size()), training, kDropoutSeed, keys.data()};
}

// Fraction of zeros in y, checking that every other element is x / (1 - p).
double ZeroFractionCheckingScale(const std::vector<float>& x, const std::vector<float>& y,
                                 float p) {
  int64_t zeros = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0f) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(y[i], x[i] / (1.0f - p)) << "at " << i;
    }
  }
  return static_cast<double>(zeros) / y.size();
}

TEST(Dropout, ZeroesAboutPAndScalesTheRestByOneOverOneMinusP) {
  const int n = 250;  // 100,000 elements: the zero rate's sd is 0.0015
  const std::vector<uint64_t> keys = Keys(n, 1000);
  Dropout dropout("drop", {4, 10, 10}, 0.3f, kDropoutLayer, n);
  const std::vector<float> x = AwayFromZero(n * 400, 16);
  std::vector<float> y(x.size());
  ASSERT_TRUE(dropout.Forward(DropoutBatch(keys), nullptr, x.data(), y.data()).ok());
  EXPECT_NEAR(ZeroFractionCheckingScale(x, y, 0.3f), 0.3, 0.01);
}

TEST(Dropout, MaskIsDropoutScaleOfTheElementIndexWithinTheExample) {
  const Shape shape{2, 3, 5};
  const std::vector<uint64_t> keys = Keys(3, 5);
  Dropout dropout("drop", shape, 0.5f, kDropoutLayer, 3);
  const std::vector<float> x(3 * shape.size(), 1.0f);
  std::vector<float> y(x.size());
  ASSERT_TRUE(dropout.Forward(DropoutBatch(keys), nullptr, x.data(), y.data()).ok());
  for (int i = 0; i < 3; ++i) {
    for (uint32_t e = 0; e < shape.size(); ++e) {
      EXPECT_EQ(y[i * shape.size() + e],
                DropoutScale(kDropoutSeed, kDropoutLayer, keys[i], e, false, 0.5f));
    }
  }
}

TEST(Dropout, SameKeyGivesTheSameMaskWhateverItsPositionInTheBatch) {
  const Shape shape{3, 4, 4};
  const int64_t size = shape.size();
  Dropout dropout("drop", shape, 0.5f, kDropoutLayer, 3);
  const std::vector<float> x = AwayFromZero(size, 17);
  std::vector<float> batch_x;
  for (int i = 0; i < 3; ++i) batch_x.insert(batch_x.end(), x.begin(), x.end());
  std::vector<float> y(3 * size), alone(size);
  const std::vector<uint64_t> keys = {12, 10, 11}, key = {10};
  ASSERT_TRUE(dropout.Forward(DropoutBatch(keys), nullptr, batch_x.data(), y.data()).ok());
  ASSERT_TRUE(dropout.Forward(DropoutBatch(key), nullptr, x.data(), alone.data()).ok());
  EXPECT_EQ(std::vector<float>(y.begin() + size, y.begin() + 2 * size), alone);
  EXPECT_NE(std::vector<float>(y.begin(), y.begin() + size), alone);  // other keys, other masks
}

TEST(Dropout, IsTheIdentityWhenNotTraining) {
  Dropout dropout("drop", {5, 1, 1}, 0.5f, kDropoutLayer, 2);
  const std::vector<float> x = AwayFromZero(10, 18), dy = AwayFromZero(10, 19);
  std::vector<float> y(10), dx(10);
  const BatchContext eval{2, /*training=*/false, kDropoutSeed, nullptr};
  ASSERT_TRUE(dropout.Forward(eval, nullptr, x.data(), y.data()).ok());
  ASSERT_TRUE(
      dropout.Backward(eval, nullptr, x.data(), y.data(), dy.data(), dx.data(), nullptr).ok());
  EXPECT_EQ(y, x);
  EXPECT_EQ(dx, dy);
}

TEST(Dropout, TrainingWithoutExampleKeysIsAnError) {
  Dropout dropout("drop", {5, 1, 1}, 0.5f, kDropoutLayer, 1);
  std::vector<float> x(5, 1.0f), y(5);
  EXPECT_EQ(dropout.Forward(TrainingBatch(1), nullptr, x.data(), y.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Dropout, GradientsMatchFiniteDifferences) {
  const std::vector<uint64_t> keys = Keys(2, 20);
  Dropout dropout("drop", {3, 4, 5}, 0.4f, kDropoutLayer, 2);
  LayerGradCheck check(dropout, DropoutBatch(keys), AwayFromZero(120, 21), {}, 22);
  EXPECT_LT(check.MaxInputError(kEps, kAll), kPiecewiseLinearTolerance);
}

TEST(Dropout2d, DropsWholeChannelsWithTheChannelIndexAsElement) {
  const int n = 500;  // 10,000 channels
  const Shape shape{20, 2, 3};
  const std::vector<uint64_t> keys = Keys(n, 3000);
  Dropout2d dropout("drop2d", shape, 0.5f, kDropoutLayer, n);
  const std::vector<float> x = AwayFromZero(n * shape.size(), 23);
  std::vector<float> y(x.size());
  ASSERT_TRUE(dropout.Forward(DropoutBatch(keys), nullptr, x.data(), y.data()).ok());
  EXPECT_NEAR(ZeroFractionCheckingScale(x, y, 0.5f), 0.5, 0.02);
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < shape.c; ++c) {
      const float scale = DropoutScale(kDropoutSeed, kDropoutLayer, keys[i], c, true, 0.5f);
      for (int j = 0; j < 6; ++j) {
        const int64_t at = (int64_t{i} * shape.c + c) * 6 + j;
        ASSERT_EQ(y[at], x[at] * scale) << "example " << i << " channel " << c;
      }
    }
  }
}

TEST(Dropout2d, GradientsMatchFiniteDifferences) {
  const std::vector<uint64_t> keys = Keys(3, 40);
  Dropout2d dropout("drop2d", {6, 3, 3}, 0.5f, kDropoutLayer, 3);
  LayerGradCheck check(dropout, DropoutBatch(keys), AwayFromZero(3 * 54, 24), {}, 25);
  EXPECT_LT(check.MaxInputError(kEps, kAll), kPiecewiseLinearTolerance);
}

// --- LogSoftmaxNll ----------------------------------------------------------

TEST(LogSoftmaxNll, EqualLogitsGiveLogOfTheNumberOfClasses) {
  LogSoftmaxNll loss(10);
  const std::vector<float> logits(20, 3.0f);
  const std::vector<int32_t> labels = {0, 9};
  std::vector<float> log_probs(20);
  absl::StatusOr<double> mean = loss.Forward(2, logits.data(), labels.data(), log_probs.data());
  ASSERT_TRUE(mean.ok());
  EXPECT_NEAR(*mean, std::log(10.0), 1e-6);
  EXPECT_THAT(log_probs, ::testing::Each(FloatEq(-std::log(10.0f))));
}

TEST(LogSoftmaxNll, StaysFiniteForLargeLogits) {
  LogSoftmaxNll loss(3);
  const std::vector<float> logits = {1000, 0, -1000};
  const std::vector<int32_t> labels = {1};
  std::vector<float> log_probs(3), dlogits(3);
  absl::StatusOr<double> mean = loss.Forward(1, logits.data(), labels.data(), log_probs.data());
  ASSERT_TRUE(mean.ok());
  EXPECT_NEAR(*mean, 1000.0, 1e-3);
  EXPECT_THAT(log_probs, ElementsAre(0, -1000, -2000));
  loss.Backward(1, log_probs.data(), labels.data(), dlogits.data());
  EXPECT_THAT(dlogits, ElementsAre(1, -1, 0));
}

TEST(LogSoftmaxNll, RejectsLabelsOutsideTheClassesAndEmptyBatches) {
  LogSoftmaxNll loss(4);
  const std::vector<float> logits(4, 0.0f);
  std::vector<float> log_probs(4);
  for (int32_t label : {-1, 4}) {
    EXPECT_EQ(loss.Forward(1, logits.data(), &label, log_probs.data()).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  const int32_t label = 0;
  EXPECT_EQ(loss.Forward(0, logits.data(), &label, log_probs.data()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LogSoftmaxNll, GradientMatchesFiniteDifferences) {
  const int n = 4, classes = 10;
  LogSoftmaxNll loss(classes);
  std::vector<float> logits = RandomVector(n * classes, -3, 3, 26), log_probs(n * classes),
                     dlogits(n * classes);
  const std::vector<int32_t> labels = {3, 0, 9, 3};
  ASSERT_TRUE(loss.Forward(n, logits.data(), labels.data(), log_probs.data()).ok());
  loss.Backward(n, log_probs.data(), labels.data(), dlogits.data());
  for (int i = 0; i < n * classes; ++i) {
    const float saved = logits[i];
    logits[i] = static_cast<float>(saved + kEps);
    const double plus = *loss.Forward(n, logits.data(), labels.data(), log_probs.data());
    logits[i] = static_cast<float>(saved - kEps);
    const double minus = *loss.Forward(n, logits.data(), labels.data(), log_probs.data());
    logits[i] = saved;
    EXPECT_NEAR((plus - minus) / (2 * kEps), dlogits[i], 5e-5) << "logit " << i;
  }
}

// --- Batch bounds -----------------------------------------------------------

TEST(CpuLayers, RejectBatchesOutsideOneToMaxBatch) {
  Conv2d conv("conv", {1, 4, 4}, 1, 3, 2);
  MaxPool2d pool("pool", {1, 4, 4}, 2, 2);
  Relu relu("relu", {1, 4, 4}, 2);
  Linear fc("fc", {1, 4, 4}, 1, 2);
  std::vector<float> buffer(3 * 16 + 16, 0.5f), out(3 * 16);
  for (Layer* layer : std::vector<Layer*>{&conv, &pool, &relu, &fc}) {
    for (int n : {0, -1, 3}) {
      const absl::Status status =
          layer->Forward(TrainingBatch(n), buffer.data(), buffer.data(), out.data());
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << layer->name() << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace pstrain::models::cpu

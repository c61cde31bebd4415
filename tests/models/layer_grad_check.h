#pragma once

// Finite-difference gradient check for a Layer, shared by the layer tests.
//
// The scalar checked is L = sum_j r[j] * y[j] with y = Forward(x, params) and
// a fixed random r, summed in double. Backward with dy = r gives dL/dx and
// dL/dparams; each checked element v is compared with the central
// difference (L(v + eps) - L(v - eps)) / (2 eps).
//
// The layer's forward pass is in float, so the difference carries rounding
// noise of about 1e-7 * |L| / eps; the tests choose eps = 1e-2 and inputs
// away from kinks (relu at 0, max-pool ties), see the helpers below.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/random.h"
#include "gtest/gtest.h"
#include "models/layer.h"

namespace pstrain::models::testing {

// Uniform floats in [lo, hi).
inline std::vector<float> RandomVector(int64_t size, float lo, float hi, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> v(size);
  for (float& x : v) x = rng.Uniform(lo, hi);
  return v;
}

// Floats with |x| in [0.1, 1) and a random sign: at least 0.1 away from
// relu's kink at 0.
inline std::vector<float> AwayFromZero(int64_t size, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> v(size);
  for (float& x : v) x = rng.Uniform(0.1f, 1.0f) * (rng.Next() & 1 ? 1.0f : -1.0f);
  return v;
}

// A random permutation of {0, spacing, 2*spacing, ...} shifted by -size*spacing/2:
// distinct values, so that a max-pool window never has a near tie.
inline std::vector<float> DistinctValues(int64_t size, float spacing, uint64_t seed) {
  std::vector<float> v(size);
  for (int64_t i = 0; i < size; ++i) v[i] = (static_cast<float>(i) - size / 2.0f) * spacing;
  SplitMix64 rng(seed);
  for (int64_t i = size - 1; i > 0; --i) std::swap(v[i], v[rng.Below(i + 1)]);
  return v;
}

class LayerGradCheck {
 public:
  // x: [ctx.n, input shape]; params: the layer's slice (may be empty).
  LayerGradCheck(Layer& layer, const BatchContext& ctx, std::vector<float> x,
                 std::vector<float> params, uint64_t seed)
      : layer_(layer), ctx_(ctx), x_(std::move(x)), params_(std::move(params)) {
    y_.resize(ctx.n * layer.output_shape().size());
    r_ = RandomVector(static_cast<int64_t>(y_.size()), -1.0f, 1.0f, seed);
    dx_.resize(x_.size());
    dparams_.resize(params_.size());
    const absl::Status forward = layer_.Forward(ctx_, params_.data(), x_.data(), y_.data());
    EXPECT_TRUE(forward.ok()) << forward;
    const absl::Status backward = layer_.Backward(ctx_, params_.data(), x_.data(), y_.data(),
                                                  r_.data(), dx_.data(), dparams_.data());
    EXPECT_TRUE(backward.ok()) << backward;
  }

  const std::vector<float>& dx() const { return dx_; }
  const std::vector<float>& dparams() const { return dparams_; }

  // Largest |fd - analytic| / max(1, |analytic|) over `count` random
  // elements of x (all of them when count >= x.size()).
  double MaxInputError(double eps, int count) { return MaxError(x_, dx_, eps, count); }
  double MaxParamError(double eps, int count) { return MaxError(params_, dparams_, eps, count); }

 private:
  double Objective() {
    EXPECT_TRUE(layer_.Forward(ctx_, params_.data(), x_.data(), y_.data()).ok());
    double sum = 0;
    for (size_t j = 0; j < y_.size(); ++j) sum += double{r_[j]} * y_[j];
    return sum;
  }

  double MaxError(std::vector<float>& v, const std::vector<float>& analytic, double eps,
                  int count) {
    const int64_t size = static_cast<int64_t>(v.size());
    SplitMix64 rng(size * 31 + count);
    double worst = 0;
    for (int64_t k = 0; k < std::min<int64_t>(count, size); ++k) {
      const int64_t i = count >= size ? k : static_cast<int64_t>(rng.Below(size));
      const float saved = v[i];
      v[i] = static_cast<float>(saved + eps);
      const double plus = Objective();
      v[i] = static_cast<float>(saved - eps);
      const double minus = Objective();
      v[i] = saved;
      const double step = double{static_cast<float>(saved + eps)} - static_cast<float>(saved - eps);
      const double fd = (plus - minus) / step;
      const double scale = std::max(1.0, std::abs(double{analytic[i]}));
      worst = std::max(worst, std::abs(fd - analytic[i]) / scale);
    }
    return worst;
  }

  Layer& layer_;
  BatchContext ctx_;
  std::vector<float> x_, params_, y_, r_, dx_, dparams_;
};

}  // namespace pstrain::models::testing

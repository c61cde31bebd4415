#include "models/cpu/conv2d.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"
#include "models/cpu/simd.h"
#include "models/net_spec.h"

namespace pstrain::models::cpu {
namespace {

using simd::kLanes;

// dW's images per pass of its register blocks: their inputs and output
// gradients (~11 KB per image for mnist_cnn's conv2) stay in the L1 cache
// while every block of channels x taps sweeps them.
constexpr int64_t kWeightGradChunkBytes = 32 << 10;

Shape ConvOutput(Shape in, int out_channels, int kernel) {
  return {out_channels, in.h - kernel + 1, in.w - kernel + 1};
}

// The textbook loops, for outputs narrower than a vector (none of the
// named networks; tests): y for one image.
void ScalarForward(const ConvGeometry& g, const float* w, const float* b, const float* x,
                   float* y) {
  const int positions = g.out.h * g.out.w;
  for (int o = 0; o < g.out.c; ++o) {
    for (int j = 0; j < positions; ++j) {
      const int base = (j / g.out.w) * g.in.w + j % g.out.w;
      float sum = b[o];
      for (int t = 0; t < g.taps; ++t) sum += w[o * g.taps + t] * x[g.tap_offsets[t] + base];
      y[o * positions + j] = sum;
    }
  }
}

// dw [O, K] += and, unless null, dx [C, H, W] += one image's gradients.
void ScalarBackward(const ConvGeometry& g, const float* w, const float* x, const float* dy,
                    float* dw, float* dx) {
  const int positions = g.out.h * g.out.w;
  for (int o = 0; o < g.out.c; ++o) {
    for (int j = 0; j < positions; ++j) {
      const int base = (j / g.out.w) * g.in.w + j % g.out.w;
      const float d = dy[o * positions + j];
      for (int t = 0; t < g.taps; ++t) {
        dw[o * g.taps + t] += d * x[g.tap_offsets[t] + base];
        if (dx != nullptr) dx[g.tap_offsets[t] + base] += d * w[o * g.taps + t];
      }
    }
  }
}

}  // namespace

// Profiled on an AMD EPYC at batch 128 (mnist_cnn), the im2col + Eigen GEMM
// layer spent 27% of its time outside the GEMMs (im2col in both passes,
// transposes to and from channel-major, col2im), and the GEMMs ran at
// 35-69 GFLOP/s on these skinny shapes (10 or 20 output channels, 25 or 250
// taps). The kernels need none of the copies but col2im.
Conv2d::Conv2d(std::string name, Shape input, int out_channels, int kernel, int max_batch)
    : CpuLayer(std::move(name), input, ConvOutput(input, out_channels, kernel), max_batch),
      geometry_(input, out_channels, kernel) {
  CHECK(out_channels >= 1 && kernel >= 1 && kernel <= input.h && kernel <= input.w)
      << this->name() << ": conv " << kernel << "x" << kernel << " on " << input.h << "x"
      << input.w;
  if (Winograd3x3::Applies(input, out_channels, kernel)) {
    winograd_ = std::make_unique<Winograd3x3>(input, out_channels);
    return;
  }
  dcols_.resize(int64_t{geometry_.taps} * geometry_.vectors * kLanes);
  dw_lanes_.resize(int64_t{out_channels} * geometry_.taps * kLanes);
  const int64_t image_bytes = sizeof(float) * (input.size() + output_shape().size());
  chunk_ = static_cast<int>(std::clamp<int64_t>(kWeightGradChunkBytes / image_bytes, 1, max_batch));
}

std::vector<ParamSpec> Conv2d::params() const {
  return Conv2dParams(name(), input_shape().c, output_shape().c, geometry_.kernel);
}

absl::Status Conv2d::Forward(const BatchContext& ctx, const float* params, const float* x,
                             float* y) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  const int64_t in_size = input_shape().size(), out_size = output_shape().size();
  const float* bias = params + int64_t{output_shape().c} * geometry_.taps;
  if (winograd_ != nullptr) {
    winograd_->Forward(ctx.n, params, bias, x, y);
    return absl::OkStatus();
  }
  for (int i = 0; i < ctx.n; ++i) {
    const float* x_i = x + i * in_size;
    float* y_i = y + i * out_size;
    if (geometry_.KernelsApply()) {
      ConvForwardImage(geometry_, params, bias, x_i, y_i);
    } else {
      ScalarForward(geometry_, params, bias, x_i, y_i);
    }
  }
  return absl::OkStatus();
}

// db sums each image's planes, image after image; dw sums images in each
// lane, then the lanes; dx is per image.
absl::Status Conv2d::Backward(const BatchContext& ctx, const float* params, const float* x,
                              const float* y, const float* dy, float* dx, float* dparams) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  const Shape out = output_shape();
  const int64_t out_size = out.size(), plane = out.h * out.w;
  float* db = dparams + int64_t{out.c} * geometry_.taps;
  std::fill_n(db, out.c, 0.0f);
  for (int i = 0; i < ctx.n; ++i) {
    for (int o = 0; o < out.c; ++o) db[o] += DeterministicSum(dy + i * out_size + o * plane, plane);
  }
  if (winograd_ != nullptr) {
    winograd_->Backward(ctx.n, params, x, dy, dx, dparams);
    return absl::OkStatus();
  }
  // The direct paths add every tap's share into dx.
  if (dx != nullptr) std::fill_n(dx, ctx.n * input_shape().size(), 0.0f);
  if (geometry_.KernelsApply()) {
    KernelsBackward(ctx.n, params, x, dy, dx, dparams);
  } else {
    std::fill_n(dparams, int64_t{out.c} * geometry_.taps, 0.0f);
    for (int i = 0; i < ctx.n; ++i) {
      const int64_t in_size = input_shape().size();
      ScalarBackward(geometry_, params, x + i * in_size, dy + i * out_size, dparams,
                     dx == nullptr ? nullptr : dx + i * in_size);
    }
  }
  return absl::OkStatus();
}

void Conv2d::KernelsBackward(int n, const float* params, const float* x, const float* dy, float* dx,
                             float* dw) {
  const int64_t in_size = input_shape().size(), out_size = output_shape().size();
  std::fill(dw_lanes_.begin(), dw_lanes_.end(), 0.0f);
  for (int first = 0; first < n; first += chunk_) {
    ConvWeightGrad(geometry_, x + first * in_size, dy + first * out_size,
                   std::min(chunk_, n - first), dw_lanes_.data());
  }
  const int64_t weights = int64_t{output_shape().c} * geometry_.taps;
  for (int64_t j = 0; j < weights; ++j) dw[j] = simd::SumLanes(simd::Load(&dw_lanes_[j * kLanes]));
  if (dx == nullptr) return;
  for (int i = 0; i < n; ++i) {
    ConvTapGradImage(geometry_, params, dy + i * out_size, dcols_.data());
    Col2ImImage(geometry_, dcols_.data(), dx + i * in_size);
  }
}

}  // namespace pstrain::models::cpu

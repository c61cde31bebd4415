#include "models/cpu/conv_kernels.h"

#include <algorithm>

#include "glog/logging.h"
#include "models/cpu/block_kernels.h"
#include "models/cpu/simd.h"

namespace pstrain::models::cpu {

using simd::kLanes;
using simd::Vec;

ConvGeometry::ConvGeometry(Shape input, int out_channels, int kernel_size)
    : in(input),
      out{out_channels, input.h - kernel_size + 1, input.w - kernel_size + 1},
      kernel(kernel_size),
      taps(input.c * kernel_size * kernel_size) {
  CHECK(out_channels >= 1 && kernel >= 1 && out.h >= 1 && out.w >= 1);
  for (int c = 0; c < in.c; ++c) {
    for (int u = 0; u < kernel; ++u) {
      for (int v = 0; v < kernel; ++v) tap_offsets.push_back((c * in.h + u) * in.w + v);
    }
  }
  for (int o = 0; o < out.c; ++o) channel_planes.push_back(o * out.h * out.w);
  if (!KernelsApply()) {
    vectors = 0;
    return;
  }
  std::vector<int> starts;
  for (int q0 = 0; q0 < out.w; q0 += kLanes) starts.push_back(std::min(q0, out.w - kLanes));
  vectors = out.h * static_cast<int>(starts.size());
  for (int p = 0; p < out.h; ++p) {
    for (size_t j = 0; j < starts.size(); ++j) {
      const int q0 = starts[j], covered = j == 0 ? 0 : starts[j - 1] + kLanes;
      input_bases.push_back(p * in.w + q0);
      output_bases.push_back(p * out.w + q0);
      column_bases.push_back(static_cast<int32_t>(column_bases.size()) * kLanes);
      overlaps.push_back(q0 < covered);
      for (int l = 0; l < kLanes; ++l) masks.push_back(q0 + l < covered ? 0.0f : 1.0f);
    }
  }
}

bool ConvGeometry::KernelsApply() const { return out.w >= kLanes; }

void ConvForwardImage(const ConvGeometry& g, const float* weight, const float* bias,
                      const float* x, float* y) {
  const BlockProduct p{weight, g.taps, 1, g.taps, x, g.tap_offsets.data(), g.input_bases.data(),
                       bias, y, int64_t{g.out.h} * g.out.w, g.output_bases.data()};
  RunBlockProduct(p, g.out.c, g.vectors);
}

void ConvWeightGrad(const ConvGeometry& g, const float* x, const float* dy, int count,
                    float* dw_lanes) {
  const LaneDot d{dy, g.out.size(), g.channel_planes.data(), g.output_bases.data(),
                  x, g.in.size(), g.tap_offsets.data(), g.input_bases.data(),
                  count, g.vectors, g.overlaps.data(), g.masks.data(), dw_lanes};
  RunLaneDot(d, g.out.c, g.taps);
}

void ConvTapGradImage(const ConvGeometry& g, const float* weight, const float* dy,
                      float* dcols) {
  const BlockProduct p{weight, 1, g.taps, g.out.c, dy, g.channel_planes.data(),
                       g.output_bases.data(), nullptr, dcols, int64_t{g.vectors} * kLanes,
                       g.column_bases.data()};
  RunBlockProduct(p, g.taps, g.vectors);
}

// Taps in the order (c, v, u) and vectors in order, so that two successive
// read-modify-writes of dx never overlap (a load that overlaps a store
// still in flight waits for it).
void Col2ImImage(const ConvGeometry& g, const float* dcols, float* dx) {
  const int k = g.kernel;
  const int64_t row = int64_t{g.vectors} * kLanes;
  for (int c = 0; c < g.in.c; ++c) {
    for (int v = 0; v < k; ++v) {
      for (int u = 0; u < k; ++u) {
        const float* src = dcols + ((c * k + u) * k + v) * row;
        float* dst = dx + (int64_t{c} * g.in.h + u) * g.in.w + v;
        for (int r = 0; r < g.vectors; ++r, src += kLanes) {
          float* d = dst + g.input_bases[r];
          Vec add = simd::Load(src);
          if (g.overlaps[r]) add *= simd::Load(&g.masks[r * kLanes]);
          simd::Store(d, simd::Load(d) + add);
        }
      }
    }
  }
}

}  // namespace pstrain::models::cpu

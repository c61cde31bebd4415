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

void ConvForwardImage(const ConvGeometry& g, const float* weight, const float* bias, const float* x,
                      float* y) {
  BlockProduct p{};
  p.a = weight;
  p.a_row = g.taps;
  p.a_col = 1;
  p.depth = g.taps;
  p.b = x;
  p.b_offsets = g.tap_offsets.data();
  p.b_bases = g.input_bases.data();
  p.init = bias;
  p.out = y;
  p.out_row = int64_t{g.out.h} * g.out.w;
  p.out_bases = g.output_bases.data();
  RunBlockProduct(p, g.out.c, g.vectors);
}

void ConvWeightGrad(const ConvGeometry& g, const float* x, const float* dy, int count,
                    float* dw_lanes) {
  LaneDot d{};
  d.a = dy;
  d.a_image = g.out.size();
  d.a_offsets = g.channel_planes.data();
  d.a_bases = g.output_bases.data();
  d.b = x;
  d.b_image = g.in.size();
  d.b_offsets = g.tap_offsets.data();
  d.b_bases = g.input_bases.data();
  d.count = count;
  d.vectors = g.vectors;
  d.overlaps = g.overlaps.data();
  d.masks = g.masks.data();
  d.acc = dw_lanes;
  RunLaneDot(d, g.out.c, g.taps);
}

// dcols[t, r] = sum_o weight[o, t] dy[o, r]: weight read as its transpose.
void ConvTapGradImage(const ConvGeometry& g, const float* weight, const float* dy, float* dcols) {
  BlockProduct p{};
  p.a = weight;
  p.a_row = 1;
  p.a_col = g.taps;
  p.depth = g.out.c;
  p.b = dy;
  p.b_offsets = g.channel_planes.data();
  p.b_bases = g.output_bases.data();
  p.init = nullptr;
  p.out = dcols;
  p.out_row = int64_t{g.vectors} * kLanes;
  p.out_bases = g.column_bases.data();
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

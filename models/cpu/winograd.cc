#include "models/cpu/winograd.h"

#include <algorithm>
#include <cstdint>

#include "glog/logging.h"
#include "models/cpu/block_kernels.h"
#include "models/cpu/simd.h"

namespace pstrain::models::cpu {
namespace {

using simd::kLanes;
using simd::Vec;
using simd::Vec4;

constexpr int kPositions = 16;  // of a 4x4 tile
constexpr int kMinChannels = 4;
// A block's two tile buffers fit the L2 cache of every machine this runs on
// (1 MiB on an AMD EPYC); the weight gradient's passes take this many
// images, so that its accumulators are loaded and stored once per pass.
constexpr int64_t kBlockBytes = 256 << 10;
constexpr int kGradImages = 4;

int RoundUp(int n, int multiple) { return (n + multiple - 1) / multiple * multiple; }

// u [4x4] = G g G^T of the 3x3 filter whose (i, j) is g[i*si + j*sj].
void TransformFilter(const float* g, int si, int sj, float* u) {
  float gg[4][3];  // G g
  for (int j = 0; j < 3; ++j) {
    const float g0 = g[j * sj], g1 = g[si + j * sj], g2 = g[2 * si + j * sj];
    gg[0][j] = g0;
    gg[1][j] = 0.5f * (g0 + g1 + g2);
    gg[2][j] = 0.5f * (g0 - g1 + g2);
    gg[3][j] = g2;
  }
  for (int i = 0; i < 4; ++i) {
    const float a = gg[i][0], b = gg[i][1], c = gg[i][2];
    u[i * 4] = a;
    u[i * 4 + 1] = 0.5f * (a + b + c);
    u[i * 4 + 2] = 0.5f * (a - b + c);
    u[i * 4 + 3] = c;
  }
}

// dg [3x3] = G^T du G of a 4x4 du.
void TransformFilterGrad(const float* du, float* dg) {
  float q[3][4];  // G^T du
  for (int j = 0; j < 4; ++j) {
    const float half_sum = 0.5f * (du[4 + j] + du[8 + j]);
    q[0][j] = du[j] + half_sum;
    q[1][j] = 0.5f * (du[4 + j] - du[8 + j]);
    q[2][j] = half_sum + du[12 + j];
  }
  for (int i = 0; i < 3; ++i) {
    const float half_sum = 0.5f * (q[i][1] + q[i][2]);
    dg[i * 3] = q[i][0] + half_sum;
    dg[i * 3 + 1] = 0.5f * (q[i][1] - q[i][2]);
    dg[i * 3 + 2] = half_sum + q[i][3];
  }
}

// v[16] = B^T d B for the lanes of V tiles side by side: d[i][j] of tile l
// is rows[i*width + 2*l + j].
template <typename V>
void TransformInputTiles(const float* rows, int width, V* v) {
  constexpr int kN = simd::kLanesOf<V>;
  V d[4][4];
  for (int i = 0; i < 4; ++i) {
    const float* r = rows + i * width;
    const V a = simd::Load<V>(r), b = simd::Load<V>(r + kN);
    const V c = simd::Load<V>(r + 2), e = simd::Load<V>(r + 2 + kN);
    d[i][0] = simd::EvenLanes(a, b);
    d[i][1] = simd::OddLanes(a, b);
    d[i][2] = simd::EvenLanes(c, e);
    d[i][3] = simd::OddLanes(c, e);
  }
  V w[4][4];  // B^T d
  for (int j = 0; j < 4; ++j) {
    w[0][j] = d[0][j] - d[2][j];
    w[1][j] = d[1][j] + d[2][j];
    w[2][j] = d[2][j] - d[1][j];
    w[3][j] = d[1][j] - d[3][j];
  }
  for (int i = 0; i < 4; ++i) {
    v[i * 4] = w[i][0] - w[i][2];
    v[i * 4 + 1] = w[i][1] + w[i][2];
    v[i * 4 + 2] = w[i][2] - w[i][1];
    v[i * 4 + 3] = w[i][1] - w[i][3];
  }
}

// y[i][j] = (A^T m A)[i][j] + bias for the lanes of V tiles; m[16].
template <typename V>
void TransformOutputTiles(const V* m, float bias, V y[2][2]) {
  V z[2][4];  // A^T m
  for (int j = 0; j < 4; ++j) {
    z[0][j] = m[j] + m[4 + j] + m[8 + j];
    z[1][j] = m[4 + j] - m[8 + j] - m[12 + j];
  }
  for (int i = 0; i < 2; ++i) {
    y[i][0] = z[i][0] + z[i][1] + z[i][2] + bias;
    y[i][1] = z[i][1] - z[i][2] - z[i][3] + bias;
  }
}

// g[16] = A dy A^T for the lanes of V tiles: dy[i][j] of tile l is
// rows[i*width + 2*l + j].
template <typename V>
void TransformOutputGradTiles(const float* rows, int width, V* g) {
  constexpr int kN = simd::kLanesOf<V>;
  const V a = simd::Load<V>(rows), b = simd::Load<V>(rows + kN);
  const V c = simd::Load<V>(rows + width), e = simd::Load<V>(rows + width + kN);
  const V dy[2][2] = {{simd::EvenLanes(a, b), simd::OddLanes(a, b)},
                      {simd::EvenLanes(c, e), simd::OddLanes(c, e)}};
  V p[4][2];  // A dy
  for (int j = 0; j < 2; ++j) {
    p[0][j] = dy[0][j];
    p[1][j] = dy[0][j] + dy[1][j];
    p[2][j] = dy[0][j] - dy[1][j];
    p[3][j] = -dy[1][j];
  }
  for (int i = 0; i < 4; ++i) {
    g[i * 4] = p[i][0];
    g[i * 4 + 1] = p[i][0] + p[i][1];
    g[i * 4 + 2] = p[i][0] - p[i][1];
    g[i * 4 + 3] = -p[i][1];
  }
}

// One vector of tiles from the rows at `rows` into the 16 positions'
// buffers, position x at dst + x*stride; the forward transforms of the
// input (TransformInputTiles) or of the output gradient.
template <typename V, void (*kTiles)(const float*, int, V*)>
void TransformVector(const float* rows, int width, float* dst, int64_t stride) {
  V v[kPositions];
  kTiles(rows, width, v);
  for (int x = 0; x < kPositions; ++x) simd::Store(dst + x * stride, v[x]);
}

// One vector of tiles back from the 16 positions' buffers (position x at
// src + x*stride) into two output rows at dst, dst + width.
template <typename V>
void TransformVectorBack(const float* src, int64_t stride, float bias, float* dst, int width) {
  V m[kPositions];
  for (int x = 0; x < kPositions; ++x) m[x] = simd::Load<V>(src + x * stride);
  V y[2][2];
  TransformOutputTiles(m, bias, y);
  simd::StoreInterleaved(dst, y[0][0], y[0][1]);
  simd::StoreInterleaved(dst + width, y[1][0], y[1][1]);
}

std::vector<int32_t> RowOffsets(int rows, int stride) {
  std::vector<int32_t> offsets;
  for (int i = 0; i < rows; ++i) offsets.push_back(i * stride);
  return offsets;
}

}  // namespace

bool Winograd3x3::Applies(Shape input, int out_channels, int kernel) {
  const int out_h = input.h - 2, out_w = input.w - 2;
  return kernel == 3 && input.c >= kMinChannels && out_channels >= 1 && out_h >= 2 &&
         out_h % 2 == 0 && out_w % 2 == 0 && out_w / 2 >= kLanes;
}

// Blocks of tile rows whose two buffers (16 positions x the larger channel
// count x its lanes) fit kBlockBytes; of the block heights that do, the one
// whose lanes round up to whole vectors with the least waste.
Winograd3x3::Tiling::Tiling(int out_h, int out_w, int max_channels)
    : rows(out_h / 2), cols(out_w / 2) {
  const int64_t row_bytes = int64_t{kPositions} * max_channels * cols * sizeof(float);
  const int most = static_cast<int>(std::clamp<int64_t>(kBlockBytes / row_bytes, 1, rows));
  block_rows = 1;
  for (int b = 1; b <= most; ++b) {
    const double waste = double(RoundUp(b * cols, kLanes)) / (b * cols);
    if (waste <= double(RoundUp(block_rows * cols, kLanes)) / (block_rows * cols)) block_rows = b;
  }
  block_lanes = RoundUp(block_rows * cols, kLanes);
  int tx0 = 0;
  for (; tx0 + kLanes <= cols; tx0 += kLanes) vectors.push_back({tx0, kLanes});
  const int rest = cols - tx0;
  if (rest > 0 && rest <= 4) {
    vectors.push_back({cols - 4, 4});
  } else if (rest > 0) {
    vectors.push_back({cols - kLanes, kLanes});
  }
}

// Lanes no transform writes stay 0 (the products compute 0 there).
Winograd3x3::TileBuffer::TileBuffer(int channel_count, int lane_count)
    : channels(channel_count),
      lanes(lane_count),
      data(int64_t{kPositions} * channel_count * lane_count, 0.0f),
      rows(RowOffsets(channel_count, lane_count)) {}

Winograd3x3::Winograd3x3(Shape input, int out_channels)
    : in_(input),
      out_{out_channels, input.h - 2, input.w - 2},
      tiles_(out_.h, out_.w, std::max(in_.c, out_.c)),
      dx_tiles_(in_.h, in_.w, std::max(in_.c, out_.c)),
      grad_images_(kGradImages),
      filters_(int64_t{kPositions} * out_.c * in_.c),
      dx_filters_(filters_.size()),
      data_(in_.c, tiles_.block_lanes),
      products_(out_.c, tiles_.block_lanes),
      dx_data_(out_.c, dx_tiles_.block_lanes),
      dx_products_(in_.c, dx_tiles_.block_lanes),
      grad_data_(in_.c, RoundUp(kGradImages * tiles_.rows * tiles_.cols, kLanes)),
      grad_dy_(out_.c, grad_data_.lanes),
      padded_dy_(int64_t{out_.c} * (out_.h + 4) * (out_.w + 4), 0.0f),
      dw_lanes_(int64_t{kPositions} * out_.c * in_.c * kLanes) {
  CHECK(Applies(input, out_channels, 3));
  const int most_lanes = std::max({tiles_.block_lanes, dx_tiles_.block_lanes, grad_data_.lanes});
  bases_ = RowOffsets(most_lanes / kLanes, kLanes);
}

// filters_[x][o][c] and dx_filters_[x][c][o] for tile position x; the
// latter from the filter rotated 180 degrees (g(i, j) = w(2-i, 2-j)).
void Winograd3x3::SetFilters(const float* weight) {
  const int c_count = in_.c, o_count = out_.c;
  float u[kPositions];
  for (int o = 0; o < o_count; ++o) {
    for (int c = 0; c < c_count; ++c) {
      const float* g = weight + (int64_t{o} * c_count + c) * 9;
      TransformFilter(g, 3, 1, u);
      for (int x = 0; x < kPositions; ++x) filters_[(x * o_count + o) * c_count + c] = u[x];
      TransformFilter(g + 8, -3, -1, u);
      for (int x = 0; x < kPositions; ++x) dx_filters_[(x * c_count + c) * o_count + o] = u[x];
    }
  }
}

void Winograd3x3::TransformInput(const Tiling& t, int ty0, int ty1, const float* img, int lane0,
                                 TileBuffer* out) {
  const int width = 2 * t.cols + 2;
  const int64_t plane = int64_t{2 * t.rows + 2} * width;
  const int64_t stride = int64_t{out->channels} * out->lanes;
  for (int c = 0; c < out->channels; ++c) {
    for (int ty = ty0; ty < ty1; ++ty) {
      for (const TileVector& v : t.vectors) {
        const float* rows = img + c * plane + 2 * ty * width + 2 * v.first;
        float* dst = out->at(0, c) + lane0 + (ty - ty0) * t.cols + v.first;
        if (v.lanes == kLanes) {
          TransformVector<Vec, TransformInputTiles<Vec>>(rows, width, dst, stride);
        } else {
          TransformVector<Vec4, TransformInputTiles<Vec4>>(rows, width, dst, stride);
        }
      }
    }
  }
}

void Winograd3x3::TransformOutput(const Tiling& t, int ty0, int ty1, const TileBuffer& m,
                                  const float* bias, float* out) {
  const int width = 2 * t.cols;
  const int64_t plane = int64_t{2 * t.rows} * width;
  const int64_t stride = int64_t{m.channels} * m.lanes;
  for (int c = 0; c < m.channels; ++c) {
    const float b = bias == nullptr ? 0.0f : bias[c];
    for (int ty = ty0; ty < ty1; ++ty) {
      for (const TileVector& v : t.vectors) {
        const float* src = m.at(0, c) + (ty - ty0) * t.cols + v.first;
        float* dst = out + c * plane + 2 * ty * width + 2 * v.first;
        if (v.lanes == kLanes) {
          TransformVectorBack<Vec>(src, stride, b, dst, width);
        } else {
          TransformVectorBack<Vec4>(src, stride, b, dst, width);
        }
      }
    }
  }
}

void Winograd3x3::TransformOutputGrad(const float* dy, int lane0, TileBuffer* out) const {
  const Tiling& t = tiles_;
  const int64_t plane = int64_t{out_.h} * out_.w;
  const int64_t stride = int64_t{out->channels} * out->lanes;
  for (int o = 0; o < out_.c; ++o) {
    for (int ty = 0; ty < t.rows; ++ty) {
      for (const TileVector& v : t.vectors) {
        const float* rows = dy + o * plane + 2 * ty * out_.w + 2 * v.first;
        float* dst = out->at(0, o) + lane0 + ty * t.cols + v.first;
        if (v.lanes == kLanes) {
          TransformVector<Vec, TransformOutputGradTiles<Vec>>(rows, out_.w, dst, stride);
        } else {
          TransformVector<Vec4, TransformOutputGradTiles<Vec4>>(rows, out_.w, dst, stride);
        }
      }
    }
  }
}

void Winograd3x3::Multiply(const std::vector<float>& filters, const TileBuffer& data, int vectors,
                           TileBuffer* out) const {
  const int rows = out->channels, depth = data.channels;
  for (int x = 0; x < kPositions; ++x) {
    BlockProduct p{};
    p.a = filters.data() + int64_t{x} * rows * depth;
    p.a_row = depth;
    p.a_col = 1;
    p.depth = depth;
    p.b = data.at(x, 0);
    p.b_offsets = data.rows.data();
    p.b_bases = bases_.data();
    p.init = nullptr;
    p.out = out->at(x, 0);
    p.out_row = out->lanes;
    p.out_bases = bases_.data();
    RunBlockProduct(p, rows, vectors);
  }
}

void Winograd3x3::ConvolveImage(const Tiling& t, const float* img,
                                const std::vector<float>& filters, const float* bias,
                                TileBuffer* data, TileBuffer* products, float* out) {
  for (int ty0 = 0; ty0 < t.rows; ty0 += t.block_rows) {
    const int ty1 = std::min(t.rows, ty0 + t.block_rows);
    TransformInput(t, ty0, ty1, img, 0, data);
    Multiply(filters, *data, RoundUp((ty1 - ty0) * t.cols, kLanes) / kLanes, products);
    TransformOutput(t, ty0, ty1, *products, bias, out);
  }
}

void Winograd3x3::Forward(int n, const float* weight, const float* bias, const float* x, float* y) {
  SetFilters(weight);
  for (int i = 0; i < n; ++i) {
    ConvolveImage(tiles_, x + i * in_.size(), filters_, bias, &data_, &products_,
                  y + i * out_.size());
  }
}

void Winograd3x3::Backward(int n, const float* weight, const float* x, const float* dy, float* dx,
                           float* dw) {
  SetFilters(weight);
  std::fill(dw_lanes_.begin(), dw_lanes_.end(), 0.0f);
  for (int first = 0; first < n; first += grad_images_) {
    AccumulateWeightGrad(x + first * in_.size(), dy + first * out_.size(),
                         std::min(grad_images_, n - first));
  }
  FinishWeightGrad(dw);
  if (dx == nullptr) return;
  for (int i = 0; i < n; ++i) InputGradImage(dy + i * out_.size(), dx + i * in_.size());
}

// The images' tiles side by side in the lanes of grad_data_ and grad_dy_;
// the lanes after the last tile are zeroed, so they add nothing.
void Winograd3x3::AccumulateWeightGrad(const float* x, const float* dy, int count) {
  const int tiles = tiles_.rows * tiles_.cols;
  for (int i = 0; i < count; ++i) {
    TransformInput(tiles_, 0, tiles_.rows, x + i * in_.size(), i * tiles, &grad_data_);
    TransformOutputGrad(dy + i * out_.size(), i * tiles, &grad_dy_);
  }
  const int used = count * tiles, vectors = RoundUp(used, kLanes) / kLanes;
  const int o_count = out_.c, c_count = in_.c;
  for (int pos = 0; pos < kPositions; ++pos) {
    for (int c = 0; c < c_count; ++c) {
      float* row = grad_data_.at(pos, c);
      std::fill(row + used, row + vectors * kLanes, 0.0f);
    }
    LaneDot d{};
    d.a = grad_dy_.at(pos, 0);
    d.a_image = 0;
    d.a_offsets = grad_dy_.rows.data();
    d.a_bases = bases_.data();
    d.b = grad_data_.at(pos, 0);
    d.b_image = 0;
    d.b_offsets = grad_data_.rows.data();
    d.b_bases = bases_.data();
    d.count = 1;
    d.vectors = vectors;
    d.overlaps = nullptr;
    d.masks = nullptr;
    d.acc = dw_lanes_.data() + int64_t{pos} * o_count * c_count * kLanes;
    RunLaneDot(d, o_count, c_count);
  }
}

// dx = the forward pass on dy padded by 2 (zeros) with dx_filters_.
void Winograd3x3::InputGradImage(const float* dy, float* dx) {
  const int padded_w = out_.w + 4;
  for (int o = 0; o < out_.c; ++o) {
    for (int p = 0; p < out_.h; ++p) {
      std::copy_n(dy + (int64_t{o} * out_.h + p) * out_.w, out_.w,
                  padded_dy_.data() + (int64_t{o} * (out_.h + 4) + p + 2) * padded_w + 2);
    }
  }
  ConvolveImage(dx_tiles_, padded_dy_.data(), dx_filters_, nullptr, &dx_data_, &dx_products_, dx);
}

void Winograd3x3::FinishWeightGrad(float* dw) {
  const int o_count = out_.c, c_count = in_.c;
  float du[kPositions];
  for (int o = 0; o < o_count; ++o) {
    for (int c = 0; c < c_count; ++c) {
      for (int x = 0; x < kPositions; ++x) {
        du[x] = simd::SumLanes(
            simd::Load(&dw_lanes_[((int64_t{x} * o_count + o) * c_count + c) * kLanes]));
      }
      TransformFilterGrad(du, dw + (int64_t{o} * c_count + c) * 9);
    }
  }
}

}  // namespace pstrain::models::cpu

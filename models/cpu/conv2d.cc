#include "models/cpu/conv2d.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "glog/logging.h"
#include "models/net_spec.h"

namespace pstrain::models::cpu {
namespace {

// A group's column matrix is kept near this many floats (512 KiB): small
// enough to stay in L2 (2 MiB on Sapphire Rapids) beside the GEMM's packed
// copy, large enough that the GEMM's rows (group * positions) amortise its
// packing. Measured on mnist_cnn's layers at batch 128: 2^16 and 2^18
// floats were 2% and 7% slower, 2^14 and 2^20 11% and 20%.
constexpr int64_t kColsBudgetFloats = int64_t{1} << 17;

Shape ConvOutput(Shape in, int out_channels, int kernel) {
  return {out_channels, in.h - kernel + 1, in.w - kernel + 1};
}

// dst[0, n) = src[0, n). Rows of an image are short (8 floats for
// mnist_cnn's conv2), so a generic loop would spend its time in prologue and
// tail; this copies in 8-float blocks, the last block overlapping the one
// before when n is not a multiple of 8.
inline void CopyRow(const float* src, int n, float* dst) {
  constexpr int kBlock = 8;
  if (n < kBlock) {
    for (int i = 0; i < n; ++i) dst[i] = src[i];
    return;
  }
  for (int i = 0; i + kBlock < n; i += kBlock) {
    std::memcpy(dst + i, src + i, sizeof(float) * kBlock);
  }
  std::memcpy(dst + n - kBlock, src + n - kBlock, sizeof(float) * kBlock);
}

// cols [cin*k*k, count*ho*wo]: row (c,u,v) holds x[g, c, p+u, q+v] for every
// image g and output position (p, q), in that order. Seen as a column-major
// [count*ho*wo, cin*k*k] matrix it is the left operand of the forward GEMM.
void Im2Col(const float* x, Shape in, int k, int count, float* cols) {
  const int ho = in.h - k + 1, wo = in.w - k + 1;
  const int64_t plane = int64_t{in.h} * in.w;
  for (int c = 0; c < in.c; ++c) {
    for (int u = 0; u < k; ++u) {
      for (int v = 0; v < k; ++v) {
        for (int g = 0; g < count; ++g) {
          const float* src = x + g * in.size() + c * plane + u * in.w + v;
          for (int p = 0; p < ho; ++p, src += in.w, cols += wo) CopyRow(src, wo, cols);
        }
      }
    }
  }
}

// The adjoint of Im2Col: dx[g, c, p+u, q+v] += cols[(c,u,v), (g,p,q)], with
// dx [count, cin, h, w] zeroed first.
void Col2Im(const float* cols, Shape in, int k, int count, float* dx) {
  const int ho = in.h - k + 1, wo = in.w - k + 1;
  const int64_t plane = int64_t{in.h} * in.w;
  std::fill_n(dx, count * in.size(), 0.0f);
  for (int c = 0; c < in.c; ++c) {
    for (int u = 0; u < k; ++u) {
      for (int v = 0; v < k; ++v) {
        for (int g = 0; g < count; ++g) {
          float* dst = dx + g * in.size() + c * plane + u * in.w + v;
          for (int p = 0; p < ho; ++p, dst += in.w, cols += wo) {
            for (int q = 0; q < wo; ++q) dst[q] += cols[q];
          }
        }
      }
    }
  }
}

// out [cout, count*positions] (channel-major, the GEMM's result) ->
// y [count, cout, positions] (NCHW), adding bias [cout].
void ChannelMajorToNchw(const float* out, const float* bias, Shape shape, int count, float* y) {
  const int64_t positions = int64_t{shape.h} * shape.w;
  for (int g = 0; g < count; ++g) {
    for (int o = 0; o < shape.c; ++o) {
      const float* src = out + (int64_t{o} * count + g) * positions;
      const float b = bias[o];
      for (int64_t p = 0; p < positions; ++p) *y++ = src[p] + b;
    }
  }
}

// dy [count, cout, positions] (NCHW) -> out [cout, count*positions].
void NchwToChannelMajor(const float* dy, Shape shape, int count, float* out) {
  const int64_t positions = int64_t{shape.h} * shape.w;
  for (int g = 0; g < count; ++g) {
    for (int o = 0; o < shape.c; ++o) {
      std::copy_n(dy, positions, out + (int64_t{o} * count + g) * positions);
      dy += positions;
    }
  }
}

}  // namespace

Conv2d::Conv2d(std::string name, Shape input, int out_channels, int kernel, int max_batch)
    : CpuLayer(std::move(name), input, ConvOutput(input, out_channels, kernel), max_batch),
      kernel_(kernel),
      patch_(input.c * kernel * kernel),
      positions_(output_shape().h * output_shape().w) {
  CHECK(out_channels >= 1 && kernel >= 1 && kernel <= input.h && kernel <= input.w)
      << this->name() << ": conv " << kernel << "x" << kernel << " on " << input.h << "x"
      << input.w;
  const int64_t per_image = int64_t{patch_} * positions_;
  group_ = static_cast<int>(std::clamp<int64_t>(kColsBudgetFloats / per_image, 1, max_batch));
  cols_.resize(per_image * group_);
  out_.resize(int64_t{out_channels} * positions_ * group_);
}

std::vector<ParamSpec> Conv2d::params() const {
  return Conv2dParams(name(), input_shape().c, output_shape().c, kernel_);
}

absl::Status Conv2d::Forward(const BatchContext& ctx, const float* params, const float* x,
                             float* y) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  const int64_t in_size = input_shape().size(), out_size = output_shape().size();
  for (int first = 0; first < ctx.n; first += group_) {
    const int count = std::min(group_, ctx.n - first);
    ForwardGroup(params, x + first * in_size, count, y + first * out_size);
  }
  return absl::OkStatus();
}

// y = cols * w^T: [count*positions, patch] x [patch, cout], where the weight
// [cout, patch] row-major is read as the column-major [patch, cout] matrix.
void Conv2d::ForwardGroup(const float* params, const float* x, int count, float* y) {
  const int cout = output_shape().c;
  const int64_t rows = int64_t{count} * positions_;
  Im2Col(x, input_shape(), kernel_, count, cols_.data());
  MatrixMap out(out_.data(), rows, cout);
  out.noalias() = ConstMatrixMap(cols_.data(), rows, patch_) * ConstMatrixMap(params, patch_, cout);
  ChannelMajorToNchw(out_.data(), params + int64_t{patch_} * cout, output_shape(), count, y);
}

absl::Status Conv2d::Backward(const BatchContext& ctx, const float* params, const float* x,
                              const float* y, const float* dy, float* dx, float* dparams) {
  if (absl::Status status = CheckBatch(ctx); !status.ok()) return status;
  const int64_t in_size = input_shape().size(), out_size = output_shape().size();
  for (int first = 0; first < ctx.n; first += group_) {
    const int count = std::min(group_, ctx.n - first);
    BackwardGroup(params, x + first * in_size, dy + first * out_size, count, first > 0,
                  dx == nullptr ? nullptr : dx + first * in_size, dparams);
  }
  return absl::OkStatus();
}

// With D = dy as [count*positions, cout] and C = cols:
//   dw^T [patch, cout] (+)= C^T D,  db (+)= column sums of D,  dC = D w.
void Conv2d::BackwardGroup(const float* params, const float* x, const float* dy, int count,
                           bool accumulate, float* dx, float* dparams) {
  const int cout = output_shape().c;
  const int64_t rows = int64_t{count} * positions_;
  Im2Col(x, input_shape(), kernel_, count, cols_.data());
  NchwToChannelMajor(dy, output_shape(), count, out_.data());
  MatrixMap cols(cols_.data(), rows, patch_);
  const ConstMatrixMap d(out_.data(), rows, cout);
  MatrixMap dw(dparams, patch_, cout);
  VectorMap db(dparams + int64_t{patch_} * cout, cout);
  if (accumulate) {
    dw.noalias() += cols.transpose() * d;
  } else {
    dw.noalias() = cols.transpose() * d;
    db.setZero();
  }
  for (int o = 0; o < cout; ++o) db[o] += DeterministicSum(out_.data() + o * rows, rows);
  if (dx == nullptr) return;
  cols.noalias() = d * ConstMatrixMap(params, patch_, cout).transpose();
  Col2Im(cols_.data(), input_shape(), kernel_, count, dx);
}

}  // namespace pstrain::models::cpu

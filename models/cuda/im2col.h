#pragma once

// The layout kernels behind Conv2d's backward pass as GEMMs
// (models/cuda/conv2d.h): for `examples` examples of x [n, cin, h, w] and
// dy [n, cout, oh, ow] (stride 1, no padding, a k x k kernel), with
// P = oh * ow and columns j = b * P + p (example b, output position p):
//
//   cols [cin*k*k][examples * P]:  cols[(c*k + u)*k + v][b*P + ph*ow + pw]
//                                    = x[b, c, ph + u, pw + v]
//   rows [cout][examples * P]:     rows[o][b*P + p] = dy[b, o, p]
//
// so that dw [cout, cin*k*k] = rows * cols^T, one sum over every example and
// position; and, the other way, col2im gathers dcols (laid out as cols) into
//
//   dx[b, c, s, t] = sum over u, v (in that order, where s-u and t-v are
//                    output positions) of dcols[(c*k + u)*k + v][b*P + (s-u)*ow + t-v]
//
// Each kernel writes every element of its output once (no atomics): the
// first two are exact copies, and col2im's sums have a fixed order. REQUIRES: the output's element count is
// below 2^31 (Conv2d's chunking sees to it).

#include <cstdint>

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "models/layer.h"

namespace pstrain::models::cuda {

absl::Status LaunchIm2Col(const float* x, const Shape& in, int kernel, int examples, float* cols,
                          cudaStream_t stream);

absl::Status LaunchCol2Im(const float* dcols, const Shape& in, int kernel, int examples, float* dx,
                          cudaStream_t stream);

absl::Status LaunchChannelRows(const float* dy, int examples, int channels, int64_t plane,
                               float* rows, cudaStream_t stream);

// out[i] = (accumulate ? out[i] : 0) + partials[0][i] + partials[1][i] + ...
// + partials[slices-1][i], in that order, for i < count; partials is
// [slices][count]. The deterministic second half of a split-K GEMM.
absl::Status LaunchSumSlices(const float* partials, int slices, int64_t count, bool accumulate,
                             float* out, cudaStream_t stream);

}  // namespace pstrain::models::cuda

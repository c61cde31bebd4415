#pragma once

// The bias gradient of a convolution on the GPU: per channel, the sum of dy
// [n, c, hw] over the batch and the positions,
//
//   out[ch] = sum over i < n, j < hw of dy[(i * c + ch) * hw + j]
//
// in place of cudnnConvolutionBackwardBias, whose kernel
// (calc_bias_diff_nchw_packed) took 2.0 and 3.7 ms of mnist_cnn's 11.5 ms
// step at batch 4096 on an H200 (ncu, 2026-11-26): half the step, for a
// memory-bound sum of 94 MB.
//
// Two passes, both in a fixed order, so the result depends only on the
// inputs and n, c, hw (bitwise repeatable, as a sync run needs): each block
// sums one channel over one of `slices` runs of consecutive examples into
// `partials`, then one thread per channel adds its slices in order.

#include <cstdint>

#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace pstrain::models::cuda {

// How many runs of examples a channel's sum is cut into at most (fewer when
// n is smaller): enough blocks to fill a large GPU for c >= 2.
constexpr int kChannelSumSlices = 64;

// Queues the sum on `stream`. `partials` holds at least
// c * kChannelSumSlices floats of device memory; `out` c floats, overwritten.
// InvalidArgument unless n, c, hw >= 1; a launch error names the kernel.
absl::Status LaunchChannelSum(const float* dy, int n, int c, int64_t hw, float* partials,
                              float* out, cudaStream_t stream);

}  // namespace pstrain::models::cuda

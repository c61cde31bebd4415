#include "models/cuda/channel_sum.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/cuda/cuda_status.h"
#include "models/cuda/launch.h"

namespace pstrain::models::cuda {
namespace {

// Block (ch, slice): examples [first, last) of channel ch. Consecutive
// threads read consecutive positions of one example's plane (coalesced);
// each thread's running sum, then a tree over the block's threads.
__global__ void ChannelSumPartialKernel(const float* dy, int n, int c, int64_t hw, int slices,
                                        float* partials) {
  const int ch = blockIdx.x;
  const int slice = blockIdx.y;
  const int64_t first = int64_t{n} * slice / slices;
  const int64_t last = int64_t{n} * (slice + 1) / slices;
  float sum = 0.0f;
  for (int64_t i = first; i < last; ++i) {
    const float* plane = dy + (i * c + ch) * hw;
    for (int64_t j = threadIdx.x; j < hw; j += blockDim.x) sum += plane[j];
  }
  __shared__ float shared[kThreadsPerBlock];
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[ch * slices + slice] = shared[0];
}

__global__ void ChannelSumFinalKernel(const float* partials, int c, int slices, float* out) {
  PSTRAIN_GRID_STRIDE_LOOP(ch, c) {
    float sum = 0.0f;
    for (int s = 0; s < slices; ++s) sum += partials[ch * slices + s];
    out[ch] = sum;
  }
}

}  // namespace

absl::Status LaunchChannelSum(const float* dy, int n, int c, int64_t hw, float* partials,
                              float* out, cudaStream_t stream) {
  if (n < 1 || c < 1 || hw < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel sum of [", n, ", ", c, ", ", hw, "]: every size must be >= 1"));
  }
  const int slices = std::min(n, kChannelSumSlices);
  RETURN_IF_ERROR(LaunchKernel("ChannelSumPartialKernel", [&] {
    ChannelSumPartialKernel<<<dim3(c, slices), kThreadsPerBlock, 0, stream>>>(dy, n, c, hw, slices,
                                                                             partials);
  }));
  return LaunchKernel("ChannelSumFinalKernel", [&] {
    ChannelSumFinalKernel<<<BlocksFor(c), kThreadsPerBlock, 0, stream>>>(partials, c, slices, out);
  });
}

}  // namespace pstrain::models::cuda

#pragma once

// Launch geometry shared by the element-wise kernels of models/cuda/*.cu.
// Kernels walk their index space with a grid-stride loop, so any size runs
// with the capped grid below; indices are int64_t, so n * C*H*W may exceed
// 2^31.

#include <algorithm>
#include <cstdint>

namespace pstrain::models::cuda {

constexpr int kThreadsPerBlock = 256;

// Blocks for `work` > 0 items: one item per thread up to 2^16 blocks (16M
// threads, many waves on any current GPU), then a grid-stride loop.
inline unsigned int BlocksFor(int64_t work) {
  const int64_t blocks = (work + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned int>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 16));
}

}  // namespace pstrain::models::cuda

#if defined(__CUDACC__)
// for (int64_t i = first index of this thread; i < size; i += grid size)
#define PSTRAIN_GRID_STRIDE_LOOP(i, size)                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (size); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
#endif

#pragma once

// A fixed-width float vector for the CPU kernels the compiler does not
// vectorise well by itself (the convolution's blocked products), in GCC's
// and Clang's vector extensions: 8 lanes where the build targets AVX, else
// 4 (SSE2 and NEON, every 64-bit target). Each lane computes what scalar
// code would, in the same order, so the width changes speed, not results;
// a loop's order of summation is fixed by its indices, never by where a
// buffer happens to be aligned.

#include <cstring>

namespace pstrain::models::cpu::simd {

#ifdef __AVX__
inline constexpr int kLanes = 8;
#else
inline constexpr int kLanes = 4;
#endif

typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void Store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

inline Vec Broadcast(float x) { return Vec{} + x; }

// v[0] + v[1] + ... + v[kLanes-1], in that order.
inline float SumLanes(Vec v) {
  float sum = v[0];
  for (int l = 1; l < kLanes; ++l) sum += v[l];
  return sum;
}

}  // namespace pstrain::models::cpu::simd

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

// 4 floats on every target: for what is left of a row that a Vec does not
// divide. Where Vec has 4 lanes, it is Vec.
typedef float Vec4 __attribute__((vector_size(4 * sizeof(float))));

template <typename V>
inline constexpr int kLanesOf = sizeof(V) / sizeof(float);

template <typename V = Vec>
inline V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename V>
inline void Store(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// Every lane x. Written x - 0, which is x for every x: Vec{} + x is not
// (0 + -0 is +0), so the compiler adds before it broadcasts, an instruction
// per broadcast in the kernels' inner loops; a loop over the lanes became
// element-wise inserts there.
inline Vec Broadcast(float x) { return x - Vec{}; }

// Lanes 0, 2, 4, ... and 1, 3, 5, ... of the 2*kLanes floats a, b (a
// stride-2 load from two contiguous ones).
#ifdef __AVX__
inline Vec EvenLanes(Vec a, Vec b) {
  return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
}
inline Vec OddLanes(Vec a, Vec b) {
  return __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
}
#endif
inline Vec4 EvenLanes(Vec4 a, Vec4 b) { return __builtin_shufflevector(a, b, 0, 2, 4, 6); }
inline Vec4 OddLanes(Vec4 a, Vec4 b) { return __builtin_shufflevector(a, b, 1, 3, 5, 7); }

// Stores a[0], b[0], a[1], b[1], ... to p[0, 2*lanes): the inverse of
// EvenLanes and OddLanes.
#ifdef __AVX__
inline void StoreInterleaved(float* p, Vec a, Vec b) {
  Store(p, __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11));
  Store(p + kLanes, __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15));
}
#endif
inline void StoreInterleaved(float* p, Vec4 a, Vec4 b) {
  Store(p, __builtin_shufflevector(a, b, 0, 4, 1, 5));
  Store(p + 4, __builtin_shufflevector(a, b, 2, 6, 3, 7));
}

// v[0] + v[1] + ... + v[kLanes-1], in that order.
inline float SumLanes(Vec v) {
  float sum = v[0];
  for (int l = 1; l < kLanes; ++l) sum += v[l];
  return sum;
}

}  // namespace pstrain::models::cpu::simd

#pragma once

// Deterministic random numbers that every process, backend and build agrees
// on. Nothing here uses <random>'s distributions, whose output is
// implementation-defined.
//
// - Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
//   3", SC'11): a counter-based generator. The value for (key, counter) is a
//   pure function, so a dropout mask can be keyed by (seed, layer, example,
//   element) and come out the same on the CPU and the GPU, however a batch is
//   split across workers. Usable in CUDA device code.
// - SplitMix64 (Steele et al., OOPSLA'14): a tiny sequential generator for
//   permutations and parameter initialisation.

#include <cstdint>

#if defined(__CUDACC__)
#define PSTRAIN_HOST_DEVICE __host__ __device__
#else
#define PSTRAIN_HOST_DEVICE
#endif

namespace pstrain {

struct Philox4x32Result {
  uint32_t v[4];
};

// Philox4x32 with 10 rounds. key: 2 words, counter: 4 words.
PSTRAIN_HOST_DEVICE inline Philox4x32Result Philox4x32(uint32_t k0, uint32_t k1, uint32_t c0,
                                                      uint32_t c1, uint32_t c2, uint32_t c3) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Maps 32 random bits to a float uniform in [0, 1) with 24 bits of precision.
PSTRAIN_HOST_DEVICE inline float UniformFloat(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// A 64-bit mix of `x` (SplitMix64's finaliser). Also used to derive keys.
PSTRAIN_HOST_DEVICE inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    const uint64_t out = Mix64(state_);
    state_ += 0x9E3779B97F4A7C15ull;
    return out;
  }

  // Uniform in [0, bound), bound > 0 (modulo with rejection, unbiased).
  uint64_t Below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    for (;;) {
      const uint64_t x = Next();
      if (x < limit) return x % bound;
    }
  }

  // Uniform float in [lo, hi).
  float Uniform(float lo, float hi) {
    return lo + (hi - lo) * UniformFloat(static_cast<uint32_t>(Next() >> 32));
  }

 private:
  uint64_t state_;
};

}  // namespace pstrain

#pragma once

// Stable 64-bit hashing for fingerprints that travel between processes
// (plan fingerprint, job id). FNV-1a: the same bytes give the same value on
// every machine and in every build, unlike std::hash.

#include <cstdint>
#include "absl/strings/string_view.h"

namespace pstrain {

inline constexpr uint64_t kFnvOffsetBasis = 14695981039346656037ull;

// Folds `bytes` into `h`. Start with kFnvOffsetBasis.
constexpr uint64_t Fnv1a64(absl::string_view bytes, uint64_t h = kFnvOffsetBasis) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace pstrain

#pragma once

// Time helpers. Durations use the monotonic clock; wall-clock stamps (for
// aligning different processes' metrics) use the system clock.

#include <chrono>
#include <cstdint>

namespace pstrain {

inline int64_t MonotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Seconds elapsed since `start_us` (a MonotonicMicros value).
inline double SecondsSince(int64_t start_us) { return (MonotonicMicros() - start_us) * 1e-6; }

}  // namespace pstrain

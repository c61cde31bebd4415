#pragma once

// Time. Durations use the monotonic clock; wall-clock stamps (for aligning
// different processes' metrics) use the system clock.
//
// Code whose behaviour depends on elapsed time (liveness, timeouts, rate
// limits) takes a `Clock*` so that tests drive time by hand (FakeClock)
// instead of sleeping, as leveldb's Env does.

#include <atomic>
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

// The longest a thread waiting for a message looks for it before it
// sleeps (--busy_poll_us, of ps tasks and workers): 20 ms.
inline constexpr int kMaxBusyPollUs = 20'000;

// Seconds elapsed since `start_us` (a MonotonicMicros value).
inline double SecondsSince(int64_t start_us) { return (MonotonicMicros() - start_us) * 1e-6; }

// A monotonic time source. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMicros() const = 0;
};

// The process's monotonic clock.
class MonotonicClock final : public Clock {
 public:
  int64_t NowMicros() const override { return MonotonicMicros(); }
};

// The real clock, shared (stateless).
inline const Clock* RealClock() {
  static const MonotonicClock clock;
  return &clock;
}

// Time that moves only when a test says so.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_us = 1'000'000) : now_us_(start_us) {}
  int64_t NowMicros() const override { return now_us_.load(); }
  void AdvanceMicros(int64_t us) { now_us_ += us; }
  void AdvanceSeconds(double s) { now_us_ += static_cast<int64_t>(s * 1e6); }

 private:
  std::atomic<int64_t> now_us_;
};

}  // namespace pstrain

#pragma once

// A request to stop, passed in (as a Clock is: common/clock.h) to the code
// that waits: the ps's serving loop, a PsClient's waits, the launcher's
// supervision. Long-running loops poll it between waits and return
// Cancelled once it fires. Nothing in a library reads process-wide state to
// learn that it should stop: the process's SIGINT/SIGTERM become a
// Cancellation in main() (common/signals.h), and a test passes a
// CancellationFlag that it fires itself.

#include <atomic>
#include <string>

#include "absl/synchronization/mutex.h"

namespace pstrain {

// Thread-safe: fired on any thread, polled on any other.
class Cancellation {
 public:
  virtual ~Cancellation() = default;
  // Whether the work should stop. Cheap enough to poll on every wake-up.
  virtual bool cancelled() const = 0;
  // Why, for messages ("signal 15"); "" while not cancelled.
  virtual std::string reason() const = 0;
};

// A Cancellation that never fires: what a component uses when none is
// passed. Shared and stateless.
const Cancellation* NeverCancelled();

// A Cancellation fired by a call: for tests, and for an owner that stops a
// component from another thread.
class CancellationFlag final : public Cancellation {
 public:
  // Fires the flag; the first reason given is kept.
  void Cancel(std::string reason);
  bool cancelled() const override { return cancelled_.load(std::memory_order_acquire); }
  std::string reason() const override;

 private:
  mutable absl::Mutex mu_;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> cancelled_{false};
};

}  // namespace pstrain

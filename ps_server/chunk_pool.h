#pragma once

// Threads that help the ps's event loop with one job at a time: a job is
// `chunks` calls fn(0) ... fn(chunks - 1), independent of each other (an
// update's blocks, a gradient's sums), each made exactly once, on the
// calling thread or a helper. Run returns when every call has returned.
//
// The calling thread claims chunks too, so a helper that is slow to wake
// (a busy machine) costs nothing but its wake-up: the caller then does the
// chunks itself, and waits only for chunks a helper has claimed and not
// finished. What each chunk computes must not depend on which thread runs
// it; results that are combined (sums) are combined by the caller in chunk
// order after Run, so a job's result is the same with any number of
// helpers, bit for bit.
//
// Thread safety: Run from one thread at a time (the ps's event loop).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace pstrain {

class ChunkPool {
 public:
  // Starts `helpers` threads (0: Run calls every chunk on its caller).
  explicit ChunkPool(int helpers);
  ~ChunkPool();  // joins the helpers
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  int helpers() const { return static_cast<int>(threads_.size()); }

  // Calls fn(c) for every c in [0, chunks), each once, and returns when
  // all have returned. REQUIRES: chunks >= 0; not called concurrently.
  void Run(int chunks, absl::FunctionRef<void(int)> fn);

 private:
  // Claims the next chunk of job `job` (of `chunks`): its index, or -1
  // when none is left (or another job has started).
  int Claim(uint32_t job, int chunks);
  // Runs chunks of job `job` until none is left.
  void Work(uint32_t job, int chunks, absl::FunctionRef<void(int)> fn);
  void HelperLoop();

  // The job being run: its number in the high 32 bits, the next chunk to
  // claim in the low 32 (so a helper that wakes late never claims a chunk
  // of a later job).
  std::atomic<uint64_t> next_{0};
  std::atomic<int> done_{0};  // chunks of the current job finished

  // std::mutex, not absl::Mutex: ThreadSanitizer sees its waits (the
  // Debian absl it builds against is not instrumented, and
  // common/tsan_absl_mutex.cc covers only Lock and Unlock).
  std::mutex mu_;
  std::condition_variable job_posted_;                // helpers: a job, or stop
  std::condition_variable all_done_;                  // Run: the helpers' chunks are done
  uint32_t job_ = 0;                                  // guarded by mu_
  int chunks_ = 0;                                    // guarded by mu_
  const absl::FunctionRef<void(int)>* fn_ = nullptr;  // guarded by mu_
  bool stop_ = false;                                 // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace pstrain

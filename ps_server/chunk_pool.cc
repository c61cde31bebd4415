#include "ps_server/chunk_pool.h"

#include <pthread.h>

#include <optional>

#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr uint64_t kIndexMask = 0xffffffffu;

}  // namespace

ChunkPool::ChunkPool(int helpers) {
  CHECK_GE(helpers, 0);
  for (int i = 0; i < helpers; ++i) {
    threads_.emplace_back([this] { HelperLoop(); });
    // Named for profiles (perf, top -H).
    pthread_setname_np(threads_.back().native_handle(), "ps-update");
  }
}

ChunkPool::~ChunkPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  job_posted_.notify_all();
  for (std::thread& t : threads_) t.join();
}

int ChunkPool::Claim(uint32_t job, int chunks) {
  uint64_t v = next_.load(std::memory_order_acquire);
  for (;;) {
    if ((v >> 32) != job || static_cast<int>(v & kIndexMask) >= chunks) return -1;
    if (next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) {
      return static_cast<int>(v & kIndexMask);
    }
  }
}

void ChunkPool::Work(uint32_t job, int chunks, absl::FunctionRef<void(int)> fn) {
  for (int c; (c = Claim(job, chunks)) >= 0;) {
    fn(c);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      // The job's last chunk: Run may be waiting for it. Notified under
      // the lock, so that Run cannot check and then sleep past it.
      std::lock_guard<std::mutex> lock(mu_);
      all_done_.notify_one();
    }
  }
}

void ChunkPool::Run(int chunks, absl::FunctionRef<void(int)> fn) {
  CHECK_GE(chunks, 0);
  if (threads_.empty() || chunks <= 1) {
    for (int c = 0; c < chunks; ++c) fn(c);
    return;
  }
  uint32_t job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job = ++job_;
    chunks_ = chunks;
    fn_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    next_.store(uint64_t{job} << 32, std::memory_order_release);
  }
  job_posted_.notify_all();
  Work(job, chunks, fn);
  std::unique_lock<std::mutex> lock(mu_);
  all_done_.wait(lock, [&] { return done_.load(std::memory_order_acquire) == chunks; });
  fn_ = nullptr;  // a helper that looks after this takes nothing of this job
}

void ChunkPool::HelperLoop() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t job;
    int chunks;
    // A copy of Run's function reference, made while Run cannot have
    // returned (fn_ is cleared under the lock before it does). Called only
    // for a chunk this helper claimed, so while Run still waits for it.
    std::optional<absl::FunctionRef<void(int)>> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      job_posted_.wait(lock, [&] { return stop_ || job_ != seen; });
      if (stop_) return;
      seen = job = job_;
      chunks = chunks_;
      if (fn_ != nullptr) fn.emplace(*fn_);
    }
    if (fn.has_value()) Work(job, chunks, *fn);
  }
}

}  // namespace pstrain

#include "ps_server/chunk_pool.h"

#include <pthread.h>

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
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
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
      // The job's last chunk: Run may be waiting on a condition of mu_,
      // which is looked at again when mu_ is released.
      absl::MutexLock lock(&mu_);
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
    absl::MutexLock lock(&mu_);
    job = ++job_;
    chunks_ = chunks;
    fn_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    next_.store(uint64_t{job} << 32, std::memory_order_release);
  }  // helpers waiting for a job wake here
  Work(job, chunks, fn);
  absl::MutexLock lock(&mu_);
  const auto all_done = [this, chunks] { return done_.load(std::memory_order_acquire) == chunks; };
  mu_.Await(absl::Condition(&all_done));
  fn_ = nullptr;
}

void ChunkPool::HelperLoop() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t job;
    int chunks;
    const absl::FunctionRef<void(int)>* fn;
    {
      absl::MutexLock lock(&mu_);
      const auto woken = [this, &seen]()
                             ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || job_ != seen; };
      mu_.Await(absl::Condition(&woken));
      if (stop_) return;
      seen = job = job_;
      chunks = chunks_;
      fn = fn_;
    }
    // *fn lives while a chunk of this job can be claimed: Run returns only
    // once every chunk is done. A helper that comes after that claims none.
    if (fn != nullptr) Work(job, chunks, *fn);
  }
}

}  // namespace pstrain

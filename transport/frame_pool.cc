#include "transport/frame_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace pstrain {

struct FramePool::State {
  explicit State(size_t keep) : keep_bytes(keep) {}
  ~State() {
    for (const auto& [data, capacity] : free) std::free(data);
  }
  // Keeps `data` if the bounds allow, else frees it.
  void Give(char* data, size_t capacity) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (free.size() < kKeep && free_bytes + capacity <= keep_bytes) {
        free.emplace_back(data, capacity);
        free_bytes += capacity;
        return;
      }
    }
    std::free(data);
  }

  const size_t keep_bytes;
  mutable std::mutex mu;
  std::vector<std::pair<char*, size_t>> free;  // guarded by mu
  size_t free_bytes = 0;                       // guarded by mu
};

FramePool::Buffer::Buffer(Buffer&& other) noexcept
    : state_(std::move(other.state_)),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      reused_(std::exchange(other.reused_, false)) {}

FramePool::Buffer& FramePool::Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Return();
    state_ = std::move(other.state_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    reused_ = std::exchange(other.reused_, false);
  }
  return *this;
}

FramePool::Buffer::~Buffer() { Return(); }

void FramePool::Buffer::Return() {
  if (data_ != nullptr) state_->Give(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
  reused_ = false;
  state_.reset();
}

zmq::message_t FramePool::Buffer::Frame(size_t bytes) && {
  // The frame's hint: the buffer itself, moved to the heap until libzmq
  // calls the release with it (returned to the pool if the frame cannot
  // be made).
  auto held = std::make_unique<Buffer>(std::move(*this));
  zmq::message_t frame(
      held->data_, std::min(bytes, held->capacity_),
      [](void* /*data*/, void* hint) { delete static_cast<Buffer*>(hint); }, held.get());
  held.release();  // the frame owns it now
  return frame;
}

FramePool::FramePool(size_t keep_bytes) : state_(std::make_shared<State>(keep_bytes)) {}

FramePool::Buffer FramePool::Take(size_t capacity, bool reuse) {
  const size_t rounded = Rounded(capacity);
  if (reuse) {
    std::lock_guard<std::mutex> lock(state_->mu);
    // The smallest kept buffer that holds `rounded` and is at most twice it.
    auto best = state_->free.end();
    for (auto it = state_->free.begin(); it != state_->free.end(); ++it) {
      if (it->second < rounded || it->second / 2 > rounded) continue;
      if (best == state_->free.end() || it->second < best->second) best = it;
    }
    if (best != state_->free.end()) {
      Buffer got(state_, best->first, best->second, /*reused=*/true);
      state_->free_bytes -= best->second;
      state_->free.erase(best);
      return got;
    }
  }
  auto* data = static_cast<char*>(std::aligned_alloc(kAlign, rounded));
  if (data == nullptr) return Buffer();
  return Buffer(state_, data, rounded, /*reused=*/false);
}

size_t FramePool::kept() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->free.size();
}

size_t FramePool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->free_bytes;
}

}  // namespace pstrain

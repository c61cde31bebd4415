#pragma once

// Large buffers for message frames, used again once the frame made of one
// is released.
//
// A fresh allocation of tens of megabytes is mapped anew by malloc (over
// its mmap threshold, 32 MiB at most) and every page of it faulted in and
// zeroed by the kernel when first written; freeing it unmaps it again. A
// ps that put a 44.8 MB push together from its pieces paid that on every
// push (benchmarks/log/step_overhead.md). The pool keeps a few released
// buffers and hands one out again for a frame that fits it.
//
//   FramePool pool(/*keep_bytes=*/256 << 20);
//   FramePool::Buffer buf = pool.Take(capacity);  // uninitialised, aligned
//   if (buf.data() == nullptr) ...                // out of memory
//   std::memcpy(buf.data(), ..., n);
//   zmq::message_t frame = std::move(buf).Frame(n);  // n <= capacity
//
// A buffer used before is in memory whole (reused() says so); a new one
// is address space whose pages come as they are written.
// A buffer dropped before it becomes a frame returns to the pool at once;
// a frame's buffer when the frame is released (by whoever holds it last:
// libzmq's I/O thread for a frame sent). Bounds: at most kKeep buffers and
// keep_bytes in all are kept; a kept buffer is handed out only for a
// capacity of at least half its own (a small frame never holds a large
// buffer); what is not kept is freed. Buffers and frames may outlive the
// pool.
//
// Thread safety: Take() from any thread; a buffer or frame is released
// on whichever thread drops it.

#include <algorithm>
#include <cstddef>
#include <memory>

#include "zmq.hpp"

namespace pstrain {

class FramePool {
 public:
  static constexpr size_t kKeep = 4;
  // Every buffer's capacity is a multiple of this, and its data aligned to it.
  static constexpr size_t kAlign = 64;
  // The capacity a buffer taken for `capacity` bytes has, at least; a kept
  // one handed out for it has at most twice this.
  static size_t Rounded(size_t capacity) {
    return (std::max<size_t>(capacity, 1) + kAlign - 1) / kAlign * kAlign;
  }

  struct State;

  // One buffer of the pool, owned until dropped or made a frame.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    ~Buffer();

    char* data() const { return data_; }
    size_t capacity() const { return capacity_; }
    // Whether it was used before (and so is in memory whole).
    bool reused() const { return reused_; }
    // A frame of the first `bytes` (0 < bytes <= capacity()), holding the
    // buffer until it is released.
    zmq::message_t Frame(size_t bytes) &&;

   private:
    friend class FramePool;
    Buffer(std::shared_ptr<State> state, char* data, size_t capacity, bool reused)
        : state_(std::move(state)), data_(data), capacity_(capacity), reused_(reused) {}
    void Return();

    std::shared_ptr<State> state_;
    char* data_ = nullptr;
    size_t capacity_ = 0;
    bool reused_ = false;
  };

  explicit FramePool(size_t keep_bytes);
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;

  // A buffer of at least `capacity` (> 0) uninitialised bytes, aligned for
  // any float loop: a kept one if one fits and `reuse`, else a new one.
  // An empty buffer (data() null) when memory is out.
  Buffer Take(size_t capacity, bool reuse = true);

  // Buffers kept for reuse, and their bytes.
  size_t kept() const;
  size_t kept_bytes() const;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace pstrain

#pragma once

// A float buffer that outgoing ZeroMQ messages carry without a copy.
//
//   auto buf = std::make_shared<PinnedFloats>(std::vector<float>(n));
//   zmq::message_t frame = PinnedFloats::Frame(buf, 0, n);  // buf is held
//   socket.send(frame);                  // ZeroMQ's I/O thread reads buf
//   ...
//   if (!buf->held()) buf->data()[0] = 1;  // rewritten only once released
//
// Each frame holds the buffer (and keeps it alive) until ZeroMQ is done
// with the message (sent, or dropped with its socket), which libzmq says
// from its I/O thread. The owner rewrites the buffer only while nothing
// holds it: that is how a ps answers every pull of a version from one
// snapshot of its parameters, without copying them into each reply, and
// without a reply ever showing a later version than it was made for.
//
// Thread safety: held() and Frame() on the owner's thread; the release
// (the frame's free callback) on any thread. held() synchronises with
// every release it observes (release/acquire), so a write after a false
// held() never races with ZeroMQ's reads.

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "zmq.hpp"

namespace pstrain {

class PinnedFloats {
 public:
  explicit PinnedFloats(std::vector<float> data) : data_(std::move(data)) {}

  std::vector<float>& data() { return data_; }
  const std::vector<float>& data() const { return data_; }
  // Whether a message still carries (part of) the buffer.
  bool held() const { return holds_.load(std::memory_order_acquire) > 0; }

  // A message frame of data()[begin, begin + count) that holds `buffer`
  // until ZeroMQ releases it. REQUIRES: begin + count <= size, count > 0.
  static zmq::message_t Frame(const std::shared_ptr<PinnedFloats>& buffer, size_t begin,
                              size_t count);

 private:
  static void Release(void* data, void* hint);

  std::vector<float> data_;
  std::atomic<int> holds_{0};
};

}  // namespace pstrain

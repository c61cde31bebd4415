#include "transport/pinned_floats.h"

#include <atomic>
#include <cstdint>

#include "glog/logging.h"

namespace pstrain {
namespace {

// Orders each frame's making (the hint written on the owner's thread)
// before its release (the hint read on libzmq's I/O thread) where
// ThreadSanitizer can see it. libzmq's own pipes order them too, but
// libzmq is not instrumented, so TSan reported the hint's read as a race.
// One uncontended RMW per frame made and per frame released.
std::atomic<uint64_t> frames_handed_over{0};

}  // namespace

zmq::message_t PinnedFloats::Frame(const std::shared_ptr<PinnedFloats>& buffer, size_t begin,
                                   size_t count) {
  CHECK(count > 0 && begin + count <= buffer->data_.size());
  // The hint owns a reference: the buffer outlives its owner if need be.
  auto* hint = new std::shared_ptr<PinnedFloats>(buffer);
  buffer->holds_.fetch_add(1, std::memory_order_relaxed);
  frames_handed_over.fetch_add(1, std::memory_order_acq_rel);
  return zmq::message_t(buffer->data_.data() + begin, count * sizeof(float), &Release, hint);
}

void PinnedFloats::Release(void* /*data*/, void* hint) {
  frames_handed_over.fetch_add(1, std::memory_order_acq_rel);
  auto* owner = static_cast<std::shared_ptr<PinnedFloats>*>(hint);
  (*owner)->holds_.fetch_sub(1, std::memory_order_release);
  delete owner;
}

}  // namespace pstrain

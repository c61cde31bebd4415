#include "common/pinned_floats.h"

#include "glog/logging.h"

namespace pstrain {

zmq::message_t PinnedFloats::Frame(const std::shared_ptr<PinnedFloats>& buffer, size_t begin,
                                   size_t count) {
  CHECK(count > 0 && begin + count <= buffer->data_.size());
  // The hint owns a reference: the buffer outlives its owner if need be.
  auto* hint = new std::shared_ptr<PinnedFloats>(buffer);
  buffer->holds_.fetch_add(1, std::memory_order_relaxed);
  return zmq::message_t(buffer->data_.data() + begin, count * sizeof(float), &Release, hint);
}

void PinnedFloats::Release(void* /*data*/, void* hint) {
  auto* owner = static_cast<std::shared_ptr<PinnedFloats>*>(hint);
  (*owner)->holds_.fetch_sub(1, std::memory_order_release);
  delete owner;
}

}  // namespace pstrain

#include "transport/socket_monitor.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::StatusOr<SocketMonitor> SocketMonitor::Watch(zmq::context_t& context, zmq::socket_t& socket,
                                                   int events) {
  static std::atomic<uint64_t> next{0};
  const std::string endpoint = absl::StrCat("inproc://pstrain-monitor-", next++);
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), events) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot monitor the socket: ", zmq_strerror(zmq_errno())));
  }
  try {
    zmq::socket_t pair(context, zmq::socket_type::pair);
    pair.set(zmq::sockopt::linger, 0);
    // Unbounded on our side: a full pipe would stall libzmq's I/O thread.
    pair.set(zmq::sockopt::rcvhwm, 0);
    pair.connect(endpoint);
    return SocketMonitor(std::move(pair));
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("cannot read the socket's events: ", e.what()));
  }
}

// An event is two frames: [uint16 event, uint32 value] (6 bytes), then the
// endpoint's address.
bool SocketMonitor::Next(ConnectionEventRecord* out) {
  if (!events_) return false;
  for (;;) {
    zmq::message_t head;
    try {
      if (!events_.recv(head, zmq::recv_flags::dontwait)) return false;
      // The rest of the event (its address): a message arrives whole.
      for (bool more = head.more(); more;) {
        zmq::message_t rest;
        if (!events_.recv(rest, zmq::recv_flags::dontwait)) break;
        more = rest.more();
      }
    } catch (const zmq::error_t&) {
      return false;
    }
    if (head.size() != 6) continue;
    std::memcpy(&out->event, head.data(), sizeof(out->event));
    std::memcpy(&out->value, static_cast<const char*>(head.data()) + 2, sizeof(out->value));
    return true;
  }
}

bool SocketMonitor::Saw(ConnectionEvent event) {
  bool saw = false;
  for (ConnectionEventRecord e; Next(&e);) saw = saw || e.event == event;
  return saw;
}

}  // namespace pstrain

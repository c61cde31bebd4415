#include "worker/heartbeat.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "glog/logging.h"
#include "transport/transport.h"

namespace pstrain {
namespace {

std::vector<std::string> Names(const std::vector<HeartbeatTarget>& targets) {
  std::vector<std::string> names;
  for (const HeartbeatTarget& t : targets) names.push_back(t.name);
  return names;
}

}  // namespace

HeartbeatMonitor::HeartbeatMonitor(zmq::context_t& context, std::vector<HeartbeatTarget> targets,
                                   const proto::Header& base, const HeartbeatOptions& options)
    : context_(context),
      targets_(std::move(targets)),
      base_(base),
      options_(options),
      liveness_(Names(targets_), options.peer_timeout_s, RealClock()),
      thread_([this] { Loop(); }) {}

HeartbeatMonitor::~HeartbeatMonitor() {
  stop_ = true;
  thread_.join();
}

// One DEALER per ps, and a PAIR reading each one's connection events.
bool HeartbeatMonitor::Connect(std::vector<zmq::socket_t>* sockets,
                               std::vector<zmq::socket_t>* events) {
  for (size_t i = 0; i < targets_.size(); ++i) {
    const HeartbeatTarget& t = targets_[i];
    SocketOptions socket_options = t.socket;
    socket_options.max_message_bytes = options_.max_message_bytes;
    // Beats are not queued while a ps is unreachable: no burst on reconnect.
    socket_options.immediate = true;
    auto s = ConnectDealer(context_, t.endpoint, socket_options);
    if (!s.ok()) {
      liveness_.Latch(absl::InvalidArgumentError(absl::StrCat(t.name, ": ", s.status().message())));
      return false;
    }
    const std::string monitor =
        absl::StrCat("inproc://pstrain-heartbeat-", reinterpret_cast<uintptr_t>(this), "-", i);
    try {
      if (zmq_socket_monitor(s->handle(), monitor.c_str(),
                             ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0) {
        throw zmq::error_t();
      }
      zmq::socket_t e(context_, zmq::socket_type::pair);
      e.set(zmq::sockopt::linger, 0);
      e.connect(monitor);
      events->push_back(std::move(e));
    } catch (const zmq::error_t& e) {
      liveness_.Latch(absl::InternalError(absl::StrCat(t.name, ": cannot watch the connection: ", e.what())));
      return false;
    }
    sockets->push_back(*std::move(s));
  }
  return true;
}

void HeartbeatMonitor::Loop() {
  std::vector<zmq::socket_t> sockets;
  std::vector<zmq::socket_t> events;
  if (!Connect(&sockets, &events)) return;
  const int interval_ms = std::max(10, static_cast<int>(options_.interval_s * 1000));
  for (uint64_t id = 1; !stop_; ++id) {
    SendAll(sockets, id);
    // Wait out the interval in short slices so that stopping is prompt.
    const int64_t until = MonotonicMicros() + int64_t{interval_ms} * 1000;
    while (!stop_ && MonotonicMicros() < until) {
      ReceiveAll(sockets, 50);
      ReadEvents(events);
    }
    liveness_.CheckSilence();
  }
}

void HeartbeatMonitor::ReadEvents(std::vector<zmq::socket_t>& events) {
  for (size_t i = 0; i < events.size(); ++i) {
    for (;;) {
      zmq::message_t head;
      zmq::message_t address;
      try {
        if (!events[i].recv(head, zmq::recv_flags::dontwait)) break;
        if (head.more()) (void)events[i].recv(address, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t&) {
        break;
      }
      if (head.size() != 6) continue;
      uint16_t event = 0;
      std::memcpy(&event, head.data(), sizeof(event));
      if (event == ZMQ_EVENT_DISCONNECTED) liveness_.OnDisconnected(i);
    }
  }
}

void HeartbeatMonitor::SendAll(std::vector<zmq::socket_t>& sockets, uint64_t request_id) {
  proto::Header h = base_;
  h.set_type(proto::HEARTBEAT);
  h.set_request_id(request_id);
  // A ps not connected yet refuses the send; ZeroMQ keeps reconnecting with
  // backoff (100 ms doubling to 2 s) and a later beat gets through.
  for (zmq::socket_t& s : sockets) (void)SendRequest(s, h, {}, false);
}

void HeartbeatMonitor::ReceiveAll(std::vector<zmq::socket_t>& sockets, int timeout_ms) {
  std::vector<zmq::socket_t*> ptrs;
  for (zmq::socket_t& s : sockets) ptrs.push_back(&s);
  auto readable = PollReadable(ptrs, timeout_ms);
  if (!readable.ok()) return;
  for (size_t i = 0; i < sockets.size(); ++i) {
    if (!(*readable)[i]) continue;
    for (;;) {
      auto reply = ReceiveReply(sockets[i]);
      if (!reply.ok()) break;
      liveness_.OnReply(i, reply->header);
    }
  }
}

}  // namespace pstrain

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

// One DEALER per ps, and a monitor of each one's connection.
bool HeartbeatMonitor::Connect(std::vector<zmq::socket_t>* sockets,
                               std::vector<SocketMonitor>* monitors) {
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
    auto monitor = SocketMonitor::Watch(context_, *s, kConnectionClosed);
    if (!monitor.ok()) {
      liveness_.Latch(absl::Status(monitor.status().code(),
                                   absl::StrCat(t.name, ": ", monitor.status().message())));
      return false;
    }
    monitors->push_back(*std::move(monitor));
    sockets->push_back(*std::move(s));
  }
  return true;
}

void HeartbeatMonitor::Loop() {
  std::vector<zmq::socket_t> sockets;
  std::vector<SocketMonitor> monitors;
  if (!Connect(&sockets, &monitors)) return;
  const int interval_ms = std::max(10, static_cast<int>(options_.interval_s * 1000));
  for (uint64_t id = 1; !stop_; ++id) {
    std::vector<bool> unsent(sockets.size(), true);
    SendAll(sockets, id, &unsent);
    // Wait out the interval in short slices so that stopping is prompt.
    const int64_t until = MonotonicMicros() + int64_t{interval_ms} * 1000;
    while (!stop_ && MonotonicMicros() < until) {
      ReceiveAll(sockets, 50);
      ReadEvents(monitors);
      SendAll(sockets, id, &unsent);
    }
    liveness_.CheckSilence();
  }
}

void HeartbeatMonitor::ReadEvents(std::vector<SocketMonitor>& monitors) {
  for (size_t i = 0; i < monitors.size(); ++i) {
    if (monitors[i].Saw(kConnectionClosed)) liveness_.OnDisconnected(i);
  }
}

void HeartbeatMonitor::SendAll(std::vector<zmq::socket_t>& sockets, uint64_t request_id,
                               std::vector<bool>* unsent) {
  proto::Header h = base_;
  h.set_type(proto::HEARTBEAT);
  h.set_request_id(request_id);
  // A ps not connected yet (or whose CURVE handshake is not done) refuses
  // the send; ZeroMQ keeps reconnecting with backoff (100 ms doubling to
  // 2 s) and the caller tries again.
  for (size_t i = 0; i < sockets.size(); ++i) {
    if ((*unsent)[i] && SendRequest(sockets[i], h, {}, false).ok()) (*unsent)[i] = false;
  }
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

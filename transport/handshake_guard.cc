#include "transport/handshake_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr int kWatchedEvents = kConnectionAccepted | kConnectionClosed | kHandshakeSucceeded;
// Work done per Serve(), so that a flood cannot starve the request loop.
constexpr int kMaxPerServe = 1024;
constexpr char kOtherAddresses[] = "other addresses";

// "ip" of a connected socket, "" when it is gone already.
std::string PeerIp(int fd) {
  sockaddr_storage addr = {};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  const void* where =
      addr.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr);
  if (::inet_ntop(addr.ss_family, where, text, sizeof(text)) == nullptr) return "";
  return text;
}

bool ReceiveAll(zmq::socket_t& socket, std::vector<zmq::message_t>* frames) {
  frames->clear();
  try {
    for (;;) {
      zmq::message_t frame;
      if (!socket.recv(frame, zmq::recv_flags::dontwait)) return !frames->empty();
      const bool more = frame.more();
      if (frames->size() < 16) frames->push_back(std::move(frame));
      if (!more) return true;
    }
  } catch (const zmq::error_t&) {
    return false;
  }
}

}  // namespace

HandshakeGuard::HandshakeGuard(zmq::context_t& context, const HandshakeGuardOptions& options)
    : context_(context),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : RealClock()) {}

absl::StatusOr<std::unique_ptr<HandshakeGuard>> HandshakeGuard::Create(
    zmq::context_t& context, const HandshakeGuardOptions& options) {
  std::unique_ptr<HandshakeGuard> guard(new HandshakeGuard(context, options));
  if (options.allowed_keys.empty()) return guard;
  try {
    guard->zap_ = zmq::socket_t(context, zmq::socket_type::rep);
    guard->zap_.set(zmq::sockopt::linger, 0);
    guard->zap_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("cannot bind the ZAP handler: ", e.what()));
  }
  return guard;
}

absl::Status HandshakeGuard::Watch(zmq::socket_t& socket) {
  auto monitor = SocketMonitor::Watch(context_, socket, kWatchedEvents);
  if (!monitor.ok()) return monitor.status();
  events_ = *std::move(monitor);
  return absl::OkStatus();
}

std::vector<zmq::socket_t*> HandshakeGuard::sockets() {
  std::vector<zmq::socket_t*> out;
  if (zap_) out.push_back(&zap_);
  if (events_.socket() != nullptr) out.push_back(events_.socket());
  return out;
}

void HandshakeGuard::Serve() {
  if (zap_) ServeZap();
  ServeEvents();
  FlushLogs(/*force=*/false);
}

void HandshakeGuard::ServeZap() {
  std::vector<zmq::message_t> request;
  for (int i = 0; i < kMaxPerServe && ReceiveAll(zap_, &request); ++i) AnswerZap(request);
}

// RFC 27: [version, request id, domain, address, identity, mechanism,
// credentials...] -> [version, request id, status, text, user id, metadata].
void HandshakeGuard::AnswerZap(std::vector<zmq::message_t>& request) {
  std::string user_id;
  if (request.size() >= 7 && request[5].to_string_view() == "CURVE" &&
      request[6].size() == kCurveKeyBytes) {
    CurveKey key;
    std::memcpy(key.data(), request[6].data(), key.size());
    auto it = options_.allowed_keys.find(key);
    if (it != options_.allowed_keys.end()) user_id = it->second;
  }
  const bool ok = !user_id.empty();
  const std::string request_id = request.size() > 1 ? request[1].to_string() : "";
  const std::string reply[] = {
      "1.0", request_id, ok ? "200" : "400", ok ? "OK" : "not a task of this job", user_id, ""};
  try {
    for (size_t i = 0; i < 6; ++i) {
      zmq::message_t frame(reply[i]);
      zap_.send(frame, i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    LOG_FIRST_N(WARNING, 5) << "cannot answer a ZAP request: " << e.what();
  }
}

int HandshakeGuard::ServeEvents() {
  int i = 0;
  for (ConnectionEventRecord e; i < kMaxPerServe && events_.Next(&e); ++i) {
    OnEvent(e.event, e.value);
  }
  return i;
}

// A connection is refused when it closes before its handshake succeeded:
// a protocol error, a key ZAP refused, or bytes that are not ZMTP at all
// (libzmq reports no failure event for those). libzmq's events carry the fd
// for ACCEPTED and DISCONNECTED but not for HANDSHAKE_SUCCEEDED, so each
// success is credited to the oldest connection still waiting for one: exact
// when handshakes finish in the order they began, and the total is right
// once every connection has closed. The address is read when the ACCEPTED
// event is: a connection already closed by then (garbage is dropped within
// microseconds) is logged under "an unknown address".
void HandshakeGuard::OnEvent(uint16_t event, uint32_t value) {
  const int fd = static_cast<int>(value);
  switch (event) {
    case kConnectionAccepted: {
      if (open_.size() >= 4 * options_.max_addresses) open_.clear();
      open_[fd] = {PeerIp(fd), false, next_accept_++};
      return;
    }
    case kHandshakeSucceeded: {
      Connection* oldest = nullptr;
      for (auto& [open_fd, c] : open_) {
        if (!c.handshaken && (oldest == nullptr || c.order < oldest->order)) oldest = &c;
      }
      if (oldest != nullptr) oldest->handshaken = true;
      return;
    }
    case kConnectionClosed: {
      if (closed_.size() < kMaxClosed) closed_.push_back(fd);
      auto it = open_.find(fd);
      if (it == open_.end()) return;
      if (!it->second.handshaken) {
        NoteRefused(it->second.address.empty() ? "an unknown address" : it->second.address);
      }
      open_.erase(it);
      return;
    }
    default:
      return;
  }
}

std::vector<int> HandshakeGuard::TakeClosed() {
  // Every queued event: a close left unread would be taken for a later
  // connection's of the same number.
  while (ServeEvents() == kMaxPerServe) {
  }
  std::vector<int> out;
  out.swap(closed_);
  return out;
}

void HandshakeGuard::NoteRefused(const std::string& address) {
  ++refused_;
  std::string key = address;
  if (by_address_.count(key) == 0 && by_address_.size() >= options_.max_addresses) {
    key = kOtherAddresses;
  }
  AddressLog& log = by_address_[key];
  ++log.refused;
  if (log.refused == 1) {
    LOG(WARNING) << "refused a connection from " << key
                 << " at the handshake (no valid key of this job); further refusals from it "
                    "are counted and logged at most every "
                 << options_.log_interval_s << " s";
    log.last_log_us = clock_->NowMicros();
    return;
  }
  ++log.unlogged;
}

void HandshakeGuard::FlushLogs(bool force) {
  const int64_t now = clock_->NowMicros();
  const int64_t interval_us = static_cast<int64_t>(options_.log_interval_s * 1e6);
  if (!force && now - last_flush_us_ < 1'000'000) return;
  last_flush_us_ = now;
  for (auto& [address, log] : by_address_) {
    if (log.unlogged == 0 || (!force && now - log.last_log_us < interval_us)) continue;
    LOG(WARNING) << "refused " << log.unlogged << " more connection(s) from " << address
                 << " at the handshake (" << log.refused << " in all)";
    log.unlogged = 0;
    log.last_log_us = now;
  }
}

}  // namespace pstrain

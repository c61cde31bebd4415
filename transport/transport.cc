#include "transport/transport.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

absl::Status ZmqError(const zmq::error_t& e, absl::string_view what) {
  if (e.num() == EAGAIN || e.num() == EHOSTUNREACH) {
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
  }
  if (e.num() == EINTR) return absl::CancelledError(absl::StrCat(what, ": interrupted"));
  return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
}

bool IsIpLiteral(const std::string& host) {
  if (host.find(':') != std::string::npos) return true;  // IPv6
  std::vector<std::string> parts = absl::StrSplit(host, '.');
  if (parts.size() != 4) return false;
  for (const auto& p : parts) {
    if (p.empty() || p.size() > 3) return false;
    for (char c : p) {
      if (!absl::ascii_isdigit(c)) return false;
    }
  }
  return true;
}

zmq::const_buffer KeyBuffer(const CurveKey& key) { return zmq::buffer(key.data(), key.size()); }

void ApplySecurity(zmq::socket_t& s, const SocketOptions& options) {
  if (options.curve_server_keys) {
    s.set(zmq::sockopt::curve_server, 1);
    s.set(zmq::sockopt::curve_secretkey, KeyBuffer(options.curve_server_keys->secret_key));
    s.set(zmq::sockopt::zap_domain, kZapDomain);
  }
  if (options.curve_client_keys && options.curve_server_public_key) {
    s.set(zmq::sockopt::curve_serverkey, KeyBuffer(*options.curve_server_public_key));
    s.set(zmq::sockopt::curve_publickey, KeyBuffer(options.curve_client_keys->public_key));
    s.set(zmq::sockopt::curve_secretkey, KeyBuffer(options.curve_client_keys->secret_key));
  }
}

// The ZAP User-Id a frame arrived with, "" when the connection has none.
std::string UserIdOf(zmq::message_t& frame) {
  // The C call, not cppzmq's gets(): that throws for a missing property
  // (EINVAL under the NULL mechanism), and a throw per request cost the
  // --insecure ps a few microseconds of every round trip.
  const char* id = zmq_msg_gets(frame.handle(), "User-Id");
  return id == nullptr ? std::string() : std::string(id);
}

void ApplyCommonOptions(zmq::socket_t& s, const SocketOptions& options, bool ipv6) {
  ApplySecurity(s, options);
  s.set(zmq::sockopt::linger, options.linger_ms);
  s.set(zmq::sockopt::maxmsgsize, options.max_message_bytes);
  s.set(zmq::sockopt::tcp_keepalive, 1);
  if (ipv6) s.set(zmq::sockopt::ipv6, 1);
}

zmq::message_t HeaderFrame(const proto::Header& header) {
  zmq::message_t frame(header.ByteSizeLong());
  header.SerializeWithCachedSizesToArray(static_cast<uint8_t*>(frame.data()));
  return frame;
}

}  // namespace

void Message::CopyPayloadTo(absl::Span<float> out) const {
  if (out.empty()) return;
  std::memcpy(out.data(), payload.data(), out.size() * sizeof(float));
}

absl::Span<const float> Message::PayloadFloats(std::vector<float>* scratch) const {
  const size_t n = payload_floats();
  if (n == 0) return {};
  if (reinterpret_cast<uintptr_t>(payload.data()) % alignof(float) == 0) {
    return {static_cast<const float*>(payload.data()), n};
  }
  scratch->resize(n);
  CopyPayloadTo(absl::MakeSpan(*scratch));
  return *scratch;
}

Message MakeMessage(proto::Header header, absl::Span<const float> payload) {
  Message m;
  m.header = std::move(header);
  if (!payload.empty()) {
    m.payload = zmq::message_t(payload.data(), payload.size() * sizeof(float));
    m.has_payload = true;
  }
  return m;
}

Message MakeMessageTaking(proto::Header header, MallocBuffer bytes, size_t size) {
  Message m;
  m.header = std::move(header);
  if (bytes == nullptr || size == 0) return m;
  m.payload = zmq::message_t(
      bytes.release(), size, [](void* data, void*) { std::free(data); }, nullptr);
  m.has_payload = true;
  return m;
}

uint64_t RandomId() {
  std::random_device device;
  return device() | (uint64_t{device()} << 32);
}

std::string BindEndpoint(const HostPort& address) {
  if (IsLoopbackHost(address.host)) {
    return absl::StrCat("tcp://", address.host == "::1" ? "[::1]" : "127.0.0.1", ":", address.port);
  }
  if (IsIpLiteral(address.host)) return absl::StrCat("tcp://", address.ToString());
  return absl::StrCat("tcp://*:", address.port);
}

std::string ConnectEndpoint(const HostPort& address) {
  if (absl::AsciiStrToLower(address.host) == "localhost") {
    return absl::StrCat("tcp://127.0.0.1:", address.port);
  }
  return absl::StrCat("tcp://", address.ToString());
}

absl::StatusOr<zmq::socket_t> BindRouter(zmq::context_t& context, const std::string& endpoint,
                                         const SocketOptions& options) {
  try {
    zmq::socket_t s(context, zmq::socket_type::router);
    ApplyCommonOptions(s, options, endpoint.find('[') != std::string::npos);
    s.set(zmq::sockopt::router_mandatory, 1);
    s.bind(endpoint);
    return s;
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", endpoint, ": ", e.what()));
  }
}

absl::StatusOr<zmq::socket_t> ConnectDealer(zmq::context_t& context, const std::string& endpoint,
                                            const SocketOptions& options) {
  try {
    zmq::socket_t s(context, zmq::socket_type::dealer);
    ApplyCommonOptions(s, options, endpoint.find('[') != std::string::npos);
    s.set(zmq::sockopt::immediate, options.immediate ? 1 : 0);
    s.set(zmq::sockopt::reconnect_ivl, 100);
    s.set(zmq::sockopt::reconnect_ivl_max, 2000);
    s.connect(endpoint);
    return s;
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot connect to ", endpoint, ": ", e.what()));
  }
}

absl::Status SendRequest(zmq::socket_t& dealer, const proto::Header& header,
                         absl::Span<const float> payload, bool zero_copy) {
  return SendRequestBytes(dealer, header,
                          absl::MakeConstSpan(reinterpret_cast<const char*>(payload.data()),
                                              payload.size() * sizeof(float)),
                          zero_copy);
}

absl::Status SendRequestBytes(zmq::socket_t& dealer, const proto::Header& header,
                              absl::Span<const char> payload, bool zero_copy) {
  CHECK_EQ(payload.size() % sizeof(float), 0u) << "a payload of whole 32-bit words";
  try {
    zmq::message_t head = HeaderFrame(header);
    const bool more = !payload.empty();
    auto flags =
        zmq::send_flags::dontwait | (more ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (!dealer.send(head, flags))
      return absl::UnavailableError("peer not connected or queue full");
    if (more) {
      zmq::message_t body = zero_copy ? zmq::message_t(const_cast<char*>(payload.data()),
                                                       payload.size(), nullptr, nullptr)
                                      : zmq::message_t(payload.data(), payload.size());
      // The first frame is queued, so the second cannot be refused for lack
      // of a peer: ZeroMQ delivers multipart messages whole or not at all.
      (void)dealer.send(body, zmq::send_flags::dontwait);
    }
    return absl::OkStatus();
  } catch (const zmq::error_t& e) {
    return ZmqError(e, "send");
  }
}

namespace {

// Orders each shared frame's making (its hint written on the sending
// thread) before its release (the hint deleted on libzmq's I/O thread)
// where ThreadSanitizer can see it, as transport/pinned_floats.cc does:
// libzmq's pipes order them, but libzmq is not instrumented. One
// uncontended RMW per frame made and per frame released.
std::atomic<uint64_t> shared_frames_handed_over{0};

}  // namespace

zmq::message_t SharedFrame(std::shared_ptr<const std::vector<float>> floats, size_t begin,
                           size_t count) {
  if (count == 0) return zmq::message_t();
  const float* data = floats->data() + begin;
  // The hint owns a reference, dropped when libzmq releases the message
  // (from its I/O thread).
  auto* hint = new std::shared_ptr<const std::vector<float>>(std::move(floats));
  shared_frames_handed_over.fetch_add(1, std::memory_order_acq_rel);
  return zmq::message_t(
      const_cast<float*>(data), count * sizeof(float),
      [](void*, void* h) {
        shared_frames_handed_over.fetch_add(1, std::memory_order_acq_rel);
        delete static_cast<std::shared_ptr<const std::vector<float>>*>(h);
      },
      hint);
}

zmq::message_t CopyFrame(absl::Span<const float> floats) {
  if (floats.empty()) return zmq::message_t();
  return zmq::message_t(floats.data(), floats.size() * sizeof(float));
}

absl::Status FitsOneMessage(size_t bytes, int64_t max_message_bytes,
                            absl::FunctionRef<std::string()> what, absl::string_view remedy) {
  if (max_message_bytes <= 0 || bytes <= static_cast<uint64_t>(max_message_bytes)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s is %.2f MB in one message, over the %.2f MB a task takes (--max_message_mb): %s", what(),
      static_cast<double>(bytes) / (1 << 20), static_cast<double>(max_message_bytes) / (1 << 20),
      remedy));
}

zmq::context_t NewContext(int io_threads) { return zmq::context_t(std::max(1, io_threads)); }

absl::Status SendRouted(zmq::socket_t& router, absl::string_view identity,
                        const proto::Header& header, absl::Span<const float> payload) {
  return SendRoutedFrame(router, identity, header, CopyFrame(payload));
}

absl::Status SendRoutedFrame(zmq::socket_t& router, absl::string_view identity,
                             const proto::Header& header, zmq::message_t body) {
  try {
    zmq::message_t id(identity.data(), identity.size());
    if (!router.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return absl::UnavailableError("peer queue full");
    }
    zmq::message_t head = HeaderFrame(header);
    const bool more = body.size() > 0;
    (void)router.send(head, more ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (more) (void)router.send(body, zmq::send_flags::none);
    return absl::OkStatus();
  } catch (const zmq::error_t& e) {
    return ZmqError(e, "reply");
  }
}

absl::StatusOr<Message> ParseFrames(std::vector<zmq::message_t> frames) {
  if (frames.empty()) return absl::InvalidArgumentError("empty message");
  if (frames.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected 1 or 2 frames (header, payload), got ", frames.size()));
  }
  if (frames[0].size() == 0 || frames[0].size() > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("header frame of ", frames[0].size(),
                                                   " bytes (expected 1..", kMaxHeaderBytes, ")"));
  }
  Message m;
  if (!m.header.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("header frame of ", frames[0].size(), " bytes is not a pstrain header"));
  }
  if (frames.size() == 2) {
    if (frames[1].size() % sizeof(float) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("payload of ", frames[1].size(), " bytes is not whole f32 values"));
    }
    m.payload = std::move(frames[1]);
    m.has_payload = true;
  }
  return m;
}

namespace {

// Reads every frame of the next message. Keeps at most three (a malformed
// message is reported, not buffered) and counts the rest, so a peer cannot
// make us hold an unbounded list. Unavailable when nothing is queued.
struct Drained {
  std::vector<zmq::message_t> frames;
  size_t count = 0;
  size_t bytes = 0;
};

absl::StatusOr<Drained> DrainMessage(zmq::socket_t& socket) {
  Drained d;
  try {
    for (;;) {
      zmq::message_t frame;
      if (!socket.recv(frame, zmq::recv_flags::dontwait)) {
        if (d.count == 0) return absl::UnavailableError("no message");
        break;  // parts of a message arrive together; defensive only
      }
      const bool more = frame.more();
      ++d.count;
      d.bytes += frame.size();
      if (d.frames.size() < 3) d.frames.push_back(std::move(frame));
      if (!more) break;
    }
  } catch (const zmq::error_t& e) {
    return ZmqError(e, "receive");
  }
  return d;
}

absl::StatusOr<Message> ParseDrained(Drained d, size_t skip) {
  if (d.count - skip > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected 1 or 2 frames (header, payload), got ", d.count - skip));
  }
  d.frames.erase(d.frames.begin(), d.frames.begin() + static_cast<long>(skip));
  return ParseFrames(std::move(d.frames));
}

}  // namespace

bool CanSend(zmq::socket_t& socket) {
  return (socket.get(zmq::sockopt::events) & ZMQ_POLLOUT) != 0;
}

RoutedMessage ReceiveRouted(zmq::socket_t& router) {
  RoutedMessage out;
  auto drained = DrainMessage(router);
  if (!drained.ok()) {
    out.message = drained.status();
    return out;
  }
  out.identity = drained->frames.front().to_string();
  if (drained->frames.size() > 1) {
    out.user_id = UserIdOf(drained->frames[1]);
    // The connection's file descriptor (-1 where the transport has none):
    // how the ps ties a peer's partial message to the connection it came
    // on, whose close the socket monitor reports by descriptor.
    out.fd = zmq_msg_get(drained->frames[1].handle(), ZMQ_SRCFD);
  }
  out.wire_bytes = drained->bytes - out.identity.size();
  out.message = ParseDrained(*std::move(drained), 1);
  return out;
}

absl::StatusOr<Message> ReceiveReply(zmq::socket_t& dealer) {
  auto drained = DrainMessage(dealer);
  if (!drained.ok()) return drained.status();
  return ParseDrained(*std::move(drained), 0);
}

int64_t LookMicros(int timeout_ms, int busy_poll_us) {
  if (timeout_ms <= 0 || busy_poll_us <= 0) return 0;
  return std::min<int64_t>(busy_poll_us, int64_t{timeout_ms} * 1000);
}

int SleepAfterLookMs(int timeout_ms, int64_t looked_us) {
  const int64_t left_ms = int64_t{timeout_ms} - (looked_us + 999) / 1000;
  return static_cast<int>(std::clamp<int64_t>(left_ms, 0, timeout_ms));
}

absl::StatusOr<std::vector<bool>> PollReadable(absl::Span<zmq::socket_t* const> sockets,
                                               int timeout_ms, int busy_poll_us) {
  return Poll(sockets, {}, timeout_ms, busy_poll_us);
}

absl::StatusOr<std::vector<bool>> Poll(absl::Span<zmq::socket_t* const> sockets,
                                       absl::Span<PollFd> fds, int timeout_ms, int busy_poll_us) {
  std::vector<zmq::pollitem_t> items;
  items.reserve(sockets.size() + fds.size());
  for (zmq::socket_t* s : sockets) items.push_back({s->handle(), 0, ZMQ_POLLIN, 0});
  for (const PollFd& f : fds) {
    const short events = static_cast<short>(((f.events & POLLIN) != 0 ? ZMQ_POLLIN : 0) |
                                            ((f.events & POLLOUT) != 0 ? ZMQ_POLLOUT : 0));
    items.push_back({nullptr, f.fd, events, 0});
  }
  try {
    const int64_t look_us = LookMicros(timeout_ms, busy_poll_us);
    if (look_us > 0) {
      // Looking without sleeping, then (nothing came) sleeping for the
      // rest: the whole wait is still at most timeout_ms.
      const int64_t start_us = MonotonicMicros();
      int64_t looked_us = 0;
      bool came = false;
      while (!came && looked_us < look_us) {
        came = zmq::poll(items.data(), items.size(), std::chrono::milliseconds(0)) > 0;
        looked_us = MonotonicMicros() - start_us;
      }
      timeout_ms = came ? 0 : SleepAfterLookMs(timeout_ms, looked_us);
    }
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t& e) {
    return ZmqError(e, "poll");
  }
  std::vector<bool> readable(sockets.size());
  for (size_t i = 0; i < sockets.size(); ++i) readable[i] = (items[i].revents & ZMQ_POLLIN) != 0;
  for (size_t i = 0; i < fds.size(); ++i) {
    const short r = items[sockets.size() + i].revents;
    fds[i].revents = static_cast<short>(((r & ZMQ_POLLIN) != 0 ? POLLIN : 0) |
                                        ((r & ZMQ_POLLOUT) != 0 ? POLLOUT : 0) |
                                        ((r & ZMQ_POLLERR) != 0 ? POLLERR : 0));
  }
  return readable;
}

}  // namespace pstrain

#pragma once

// ZeroMQ framing for pstrain messages. Every other file sees Status values:
// cppzmq's zmq::error_t is caught here and nowhere else.
//
// A message is [header] or [header, payload]: the header is a serialized
// proto::Header, the payload the raw little-endian floats of one shard range.
// A ROUTER (ps) sees one more frame in front, the peer's routing identity.
//
// Thread safety: a zmq::socket_t belongs to one thread; these functions are
// safe to call concurrently on different sockets.

#include <poll.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/cluster_spec.h"
#include "proto/pstrain.pb.h"
#include "transport/job_secret.h"
#include "zmq.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "pstrain sends raw little-endian floats; big-endian hosts need a byte swap");

namespace pstrain {

// The ZAP domain of pstrain's CURVE sockets.
inline constexpr char kZapDomain[] = "pstrain";

// Upper bound for a header frame; anything larger is malformed.
inline constexpr size_t kMaxHeaderBytes = 64 * 1024;

struct Message {
  proto::Header header;
  zmq::message_t payload;
  bool has_payload = false;

  size_t payload_bytes() const { return has_payload ? payload.size() : 0; }
  // The payload's bytes in place (empty when there is none).
  absl::Span<const char> PayloadBytes() const {
    return {static_cast<const char*>(payload.data()), payload_bytes()};
  }
  // Number of whole floats in the payload.
  size_t payload_floats() const { return payload_bytes() / sizeof(float); }
  // Copies the payload's floats into `out`. REQUIRES: out.size() ==
  // payload_floats(). Safe whatever the payload's alignment.
  void CopyPayloadTo(absl::Span<float> out) const;
  // The payload's floats in place when the frame is aligned for floats
  // (libzmq's own buffers are), else copied into `scratch` (a copy, not a
  // misaligned read). Valid while this message and `scratch` live.
  absl::Span<const float> PayloadFloats(std::vector<float>* scratch) const;
};

// A message of `header` and a payload frame holding a copy of `payload`
// (none when it is empty), as ParseFrames gives one: a request handed to
// the ps's handler without a socket (a standby's adopted state, tests,
// benchmarks).
Message MakeMessage(proto::Header header, absl::Span<const float> payload = {});
// A buffer from malloc, freed with free.
struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using MallocBuffer = std::unique_ptr<char, FreeDeleter>;

// The same, the frame taking over `bytes` (`size` of them) instead of a
// copy (a state put together from its parts: transport/state_parts.h).
Message MakeMessageTaking(proto::Header header, MallocBuffer bytes, size_t size);

// What a ROUTER received: the sender's identity and, unless the frames were
// malformed (InvalidArgument, with what was wrong), the message.
struct RoutedMessage {
  std::string identity;  // the ROUTER's routing id of the sender
  // The peer's authenticated name (the ZAP handler's User-Id, e.g.
  // "worker:1") on a CURVE socket; "" on an unauthenticated one.
  std::string user_id;
  absl::StatusOr<Message> message = absl::UnknownError("not received");
  size_t wire_bytes = 0;  // all frames, identity excluded
  // It came over a ps's Unix socket (transport/local_links.h), not ZeroMQ.
  bool local = false;
  // The connection the message came on, as a file descriptor (-1: not
  // known). Unique among open connections only: a closed one's number is
  // reused (HandshakeGuard::TakeClosed reports closes in order).
  int fd = -1;
};

struct SocketOptions {
  // Largest message accepted from a peer; a peer that sends more is
  // disconnected by ZeroMQ before the bytes are buffered.
  int64_t max_message_bytes = int64_t{1} << 30;
  // Time a closing socket keeps trying to deliver queued messages.
  int linger_ms = 0;
  // DEALER only: queue messages only to a completed connection
  // (ZMQ_IMMEDIATE), so a send fails while nothing listens. Beware: libzmq
  // then also drops replies still unread when the peer disconnects, so
  // request sockets that must see a peer's last reply leave this off.
  bool immediate = false;
  // CURVE (transport/security.h sets these). A ROUTER with server keys is a
  // CURVE server whose clients the ZAP handler of its context checks; a
  // DEALER with client keys and the server's public key is a CURVE client.
  // Without them a socket uses the NULL mechanism.
  std::optional<CurveKeyPair> curve_server_keys;
  std::optional<CurveKeyPair> curve_client_keys;
  std::optional<CurveKey> curve_server_public_key;
};

// Whether a message of `bytes` fits what every task takes: a task's ZeroMQ
// drops the connection of a peer that sends a frame over its
// SocketOptions::max_message_bytes (--max_message_mb, the same on every
// task), and a request so sent would wait for an answer that never comes;
// a message in pieces (transport/pieces.h) is held to the same bound by
// its receiver. OK when it fits (or max_message_bytes <= 0: no limit),
// else ResourceExhausted:
// "<what()> is X MB in one message, over the Y MB a task takes
// (--max_message_mb): <remedy>". `what` is called only then: every message
// sent is checked, and naming it costs strings.
absl::Status FitsOneMessage(size_t bytes, int64_t max_message_bytes,
                            absl::FunctionRef<std::string()> what, absl::string_view remedy);

// A ZeroMQ context with `io_threads` I/O threads (at least 1): one per
// process or per thread of sockets (the ps, a worker's client).
zmq::context_t NewContext(int io_threads);

// A payload frame holding a copy of `floats` (an empty frame for none),
// for SendRoutedFrame.
zmq::message_t CopyFrame(absl::Span<const float> floats);
// A frame of floats[begin, begin + count) without a copy: it holds
// `floats` (immutable) until ZeroMQ is done with the message. count 0:
// an empty frame.
zmq::message_t SharedFrame(std::shared_ptr<const std::vector<float>> floats, size_t begin,
                           size_t count);

// 64 random bits from the OS: a client's session id, a ps's instance id.
uint64_t RandomId();

// "tcp://ip:port" to bind for a task's address. Loopback names bind
// 127.0.0.1, IP literals bind themselves, other host names bind every
// interface (as TensorFlow's servers do), since a pod's DNS name may not map
// to an interface.
std::string BindEndpoint(const HostPort& address);
// "tcp://host:port" to connect to.
std::string ConnectEndpoint(const HostPort& address);

// Binds a ROUTER socket. Unavailable (naming the endpoint and the OS error,
// e.g. "Address already in use") when the bind fails.
absl::StatusOr<zmq::socket_t> BindRouter(zmq::context_t& context, const std::string& endpoint,
                                         const SocketOptions& options);

// Creates a DEALER socket connected to `endpoint`. Connecting is
// asynchronous: with options.immediate, sends fail with Unavailable until the
// TCP connection is up; without, they are queued until it is.
absl::StatusOr<zmq::socket_t> ConnectDealer(zmq::context_t& context, const std::string& endpoint,
                                            const SocketOptions& options);

// Sends [header, payload?] without blocking. The payload is copied unless
// `zero_copy`, in which case the caller keeps `payload` alive and unchanged
// until the socket is closed or the peer has answered. Unavailable when the
// peer is not connected or its queue is full.
absl::Status SendRequest(zmq::socket_t& dealer, const proto::Header& header,
                         absl::Span<const float> payload, bool zero_copy);
// The same with a payload of bytes (an encoded gradient,
// common/wire_codec.h). REQUIRES: payload.size() is a multiple of 4.
absl::Status SendRequestBytes(zmq::socket_t& dealer, const proto::Header& header,
                              absl::Span<const char> payload, bool zero_copy);

// Sends [identity, header, payload?] from a ROUTER; the payload is copied.
// Returns Unavailable when the peer is gone (ZMQ_ROUTER_MANDATORY).
absl::Status SendRouted(zmq::socket_t& router, absl::string_view identity,
                        const proto::Header& header, absl::Span<const float> payload);
// The same with the payload frame made by the caller (sent as it is, e.g.
// without a copy: transport/pinned_floats.h); an empty `body` sends none.
absl::Status SendRoutedFrame(zmq::socket_t& router, absl::string_view identity,
                             const proto::Header& header, zmq::message_t body);

// Receives one whole multipart message from a ROUTER. REQUIRES: the socket
// is readable (poll said so). Frames are always drained, even when malformed.
RoutedMessage ReceiveRouted(zmq::socket_t& router);

// Whether `socket` takes a message now without blocking: for a DEALER
// made with SocketOptions::immediate, whether a connection is up.
bool CanSend(zmq::socket_t& socket);

// Receives one whole message from a DEALER without blocking. Unavailable if
// none is queued; InvalidArgument if malformed.
absl::StatusOr<Message> ReceiveReply(zmq::socket_t& dealer);

// Parses frames [header, payload?] into a Message (InvalidArgument on a bad
// header, too many frames, or a payload that is not whole floats).
absl::StatusOr<Message> ParseFrames(std::vector<zmq::message_t> frames);

// Polls `sockets` for input for up to `timeout_ms` (0: do not wait; -1:
// no limit, and no looking), the first `busy_poll_us` of it without
// sleeping (--busy_poll_us: a thread that sleeps is woken later than one
// that looks again, by a core that may have gone idle meanwhile). Returns,
// per socket, whether it is readable. Cancelled on EINTR (a signal that
// comes while it looks is seen by the caller's next check, at most
// timeout_ms later).
absl::StatusOr<std::vector<bool>> PollReadable(absl::Span<zmq::socket_t* const> sockets,
                                               int timeout_ms, int busy_poll_us = 0);

// A descriptor polled beside ZeroMQ sockets (a Unix socket's:
// transport/local_links.h): poll(2)'s POLLIN and POLLOUT in `events`;
// `revents` gets POLLIN, POLLOUT and POLLERR (an error or a hang-up:
// reading says which).
struct PollFd {
  int fd = -1;
  short events = 0;
  short revents = 0;
};

// PollReadable with descriptors too: each one's revents are set.
absl::StatusOr<std::vector<bool>> Poll(absl::Span<zmq::socket_t* const> sockets,
                                       absl::Span<PollFd> fds, int timeout_ms,
                                       int busy_poll_us = 0);

// PollReadable's budget: how long it looks (microseconds, at most the
// timeout), and how long it then sleeps after looking `looked_us` in vain
// (milliseconds, the timeout's rest rounded down: never past it).
int64_t LookMicros(int timeout_ms, int busy_poll_us);
int SleepAfterLookMs(int timeout_ms, int64_t looked_us);

}  // namespace pstrain

#pragma once

// A socket's connection events, read without blocking: libzmq's socket
// monitor (an inproc PAIR that libzmq writes one event to per connection
// change), behind one type.
//
//   ASSIGN_OR_RETURN(SocketMonitor m,
//                    SocketMonitor::Watch(context, socket, ConnectionEvent::kDisconnected));
//   ... poll m.socket() beside the others, or just call Next() now and then ...
//   for (ConnectionEventRecord e; m.Next(&e);) if (e.event == kDisconnected) ...
//
// Who watches what: a worker's heartbeat thread each ps connection and a
// ps's replicator its standby's (a disconnect is a peer's death seen at
// once); the ps's handshake guard its ROUTER (accepts, handshakes, closes).
//
// Thread safety: the monitor belongs to the thread that reads it, which
// need not be the watched socket's (libzmq writes the events from its I/O
// thread).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "zmq.hpp"

namespace pstrain {

// The events a monitor can watch (a bit mask: values combine with |).
enum ConnectionEvent : uint16_t {
  kConnectionAccepted = ZMQ_EVENT_ACCEPTED,
  kConnectionClosed = ZMQ_EVENT_DISCONNECTED,
  kHandshakeSucceeded = ZMQ_EVENT_HANDSHAKE_SUCCEEDED,
};

struct ConnectionEventRecord {
  uint16_t event = 0;
  // For kConnectionAccepted and kConnectionClosed, the connection's file
  // descriptor (unique among open connections only); 0 for the rest.
  uint32_t value = 0;
};

class SocketMonitor {
 public:
  SocketMonitor() = default;  // watches nothing; Next() is always false

  // Starts watching `socket` for `events` (ConnectionEvent values or'd).
  // `context` is the socket's and must outlive the monitor; the socket may
  // close first (its events then stop). Internal on a libzmq failure.
  static absl::StatusOr<SocketMonitor> Watch(zmq::context_t& context, zmq::socket_t& socket,
                                             int events);

  SocketMonitor(SocketMonitor&&) = default;
  SocketMonitor& operator=(SocketMonitor&&) = default;

  // The next queued event, without blocking: false when none is queued.
  // A malformed event is skipped.
  bool Next(ConnectionEventRecord* out);

  // Whether any queued event is `event`; reads every queued one.
  bool Saw(ConnectionEvent event);

  // The PAIR socket the events arrive on, to poll beside other sockets
  // (null when watching nothing).
  zmq::socket_t* socket() { return events_ ? &events_ : nullptr; }

 private:
  explicit SocketMonitor(zmq::socket_t events) : events_(std::move(events)) {}

  zmq::socket_t events_;
};

}  // namespace pstrain

#pragma once

// The gate in front of a ps's ROUTER socket. It
//  - answers ZeroMQ's ZAP requests (RFC 27) for the socket's context: a
//    CURVE client is accepted only when its public key is one of the job's
//    task keys, and its messages then carry the task's name as User-Id;
//  - watches the socket's handshake events, so that every peer refused at
//    the handshake (no key, wrong key, not ZMTP at all) is counted, and
//    logged once per address, then at most once per log interval with a
//    count, never once per attempt.
//
//   ASSIGN_OR_RETURN(auto guard, HandshakeGuard::Create(context, keys, clock));
//   ... bind the router ...
//   RETURN_IF_ERROR(guard->Watch(router));
//   poll guard->sockets() with the router; guard->Serve() when readable.
//
// Without keys (insecure) no ZAP handler is bound; handshake failures are
// still counted. Thread safety: none; the ps's event loop owns it.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "transport/job_secret.h"
#include "transport/socket_monitor.h"
#include "zmq.hpp"

namespace pstrain {

struct HandshakeGuardOptions {
  // Public key -> the name its holder is known by ("worker:1"). Empty: no
  // ZAP handler (insecure).
  std::map<CurveKey, std::string> allowed_keys;
  // After the first line for an address, at most one line per interval.
  double log_interval_s = 60.0;
  // Addresses tracked one by one; the rest are counted together.
  size_t max_addresses = 1024;
  const Clock* clock = nullptr;  // null: the real clock
};

class HandshakeGuard {
 public:
  // Binds the ZAP endpoint in `context` when keys are given. REQUIRES: no
  // other ZAP handler in `context`, and no CURVE socket of `context` bound
  // yet (libzmq lets clients in unchecked while no handler is bound).
  static absl::StatusOr<std::unique_ptr<HandshakeGuard>> Create(
      zmq::context_t& context, const HandshakeGuardOptions& options);

  // Starts watching `socket`'s handshake events. Call once, after binding.
  absl::Status Watch(zmq::socket_t& socket);

  // The sockets to poll for input beside the router.
  std::vector<zmq::socket_t*> sockets();

  // Answers the queued ZAP requests, reads the queued events, and writes
  // the rate-limited log lines that are due. Never blocks.
  void Serve();

  // Peers refused at the handshake so far.
  int64_t refused() const { return refused_; }

  // The file descriptors of the connections that closed since the last
  // call, in the order they closed (reads the queued events first). A
  // message received before this call that came on one of them
  // (RoutedMessage::fd) came on the closed connection, not on a later one
  // given the same number: libzmq reports the close before it accepts the
  // next connection, which speaks only after that.
  std::vector<int> TakeClosed();

  // Writes every pending rate-limited log line now (at exit).
  void FlushLogs() { FlushLogs(/*force=*/true); }

 private:
  struct Connection {
    std::string address;  // "" when it was gone before it could be read
    bool handshaken = false;
    uint64_t order = 0;  // accept order
  };
  struct AddressLog {
    int64_t refused = 0;
    int64_t unlogged = 0;
    int64_t last_log_us = 0;
  };

  HandshakeGuard(zmq::context_t& context, const HandshakeGuardOptions& options);
  void ServeZap();
  void AnswerZap(std::vector<zmq::message_t>& request);
  // Reads up to kMaxPerServe queued events; returns how many.
  int ServeEvents();
  void OnEvent(uint16_t event, uint32_t value);
  void NoteRefused(const std::string& address);
  void FlushLogs(bool force);  // force: ignore the interval

  zmq::context_t& context_;
  HandshakeGuardOptions options_;
  const Clock* clock_;
  zmq::socket_t zap_;               // REP at inproc://zeromq.zap.01 (secure only)
  SocketMonitor events_;            // the router's connections
  std::map<int, Connection> open_;  // by fd: accepted, not yet disconnected
  // Closed since TakeClosed (bounded: the ps takes them every wake).
  static constexpr size_t kMaxClosed = 4096;
  std::vector<int> closed_;
  uint64_t next_accept_ = 0;
  std::map<std::string, AddressLog> by_address_;
  int64_t refused_ = 0;
  int64_t last_flush_us_ = 0;
};

}  // namespace pstrain

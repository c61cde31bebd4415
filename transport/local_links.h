#pragma once

// Both ends of a ps's Unix socket (transport/local_route.h: where it is,
// and why a worker may trust it), each connection a StreamLink
// (transport/stream_link.h).
//
// Admission, before any request, in which the password (the key of the
// name, JobSecret::LocalPassword) never goes on the wire:
//   1. The worker connects, and asks the kernel who listens
//      (SO_PEERCRED): it goes on only when that is the ps process that
//      said, over CURVE, that it listens there, and of this user.
//   2. The ps, which checked that the peer is of its user, greets it:
//      "PSTRAIN-LINK/2" and a random nonce.
//   3. The worker answers with its task's name, a nonce of its own and a
//      MAC of both nonces and the name under its key (keyed BLAKE2b-256,
//      LinkMac).
//   4. The ps checks the MAC in constant time against the name's key, and
//      answers "PSTRAIN-LINK-OK" with a MAC of its own, which the worker
//      checks: each has shown the other it holds the job's secret, and a
//      process that took the path's place learns nothing it could use
//      later. The link's requests are that task's from then on, as a
//      CURVE peer's are its key's. Anything else, or no whole answer
//      within kLocalHelloTimeoutS, and the ps closes the connection
//      (counted with the handshakes refused).
//
// Bounds on the ps: a link per kMaxLinksPerTask of each task at most, all
// links within kMaxLocalLinks and a quarter of the process's descriptors,
// kMaxLocalHellos not admitted yet; each Serve reads at most
// kMaxMessagesPerServe requests; a link's replies queue up to
// kMaxQueuedReplies and kMaxQueuedReplyBytes (then a send fails, as a full
// ZeroMQ queue's does). A frame that breaks the stream's rules closes its
// link.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "transport/stream_link.h"
#include "transport/transport.h"

namespace pstrain {

inline constexpr double kLocalHelloTimeoutS = 10.0;
inline constexpr size_t kMaxLocalLinks = 1024;
inline constexpr size_t kMaxLinksPerTask = 8;
inline constexpr size_t kMaxLocalHellos = 64;
inline constexpr size_t kMaxMessagesPerServe = 1024;
inline constexpr size_t kMaxQueuedReplies = 1024;
// Beyond one message of --max_message_mb.
inline constexpr size_t kMaxQueuedReplyBytes = size_t{256} << 20;

// The ps's end: its listening socket and the links of its workers.
class LocalLinks {
 public:
  // Binds and listens at Unix socket `path` (a file there is replaced).
  // `passwords`: a task's name -> its password. Unavailable naming the
  // path and the OS error when it cannot.
  static absl::StatusOr<std::unique_ptr<LocalLinks>> Listen(
      const std::string& path, std::map<std::string, std::string> passwords,
      int64_t max_message_bytes, double hello_timeout_s = kLocalHelloTimeoutS);
  // Closes every link and the listening socket (the file stays: the ps
  // removes it, RemoveLocalEndpoint).
  ~LocalLinks();

  // The descriptors to poll: the listening socket and every connection
  // (POLLOUT too where replies wait).
  void AddPollFds(std::vector<PollFd>* fds) const;
  // After a poll of AddPollFds' descriptors (their revents): admits,
  // reads, writes. Every whole request goes to `out` (RoutedMessage::
  // local set, user_id the task's name, identity the link's route), about
  // `budget` bytes of them a link at most, kMaxMessagesPerServe in all
  // (the rest wait in their sockets for the next poll). Also expires
  // hellos that are late.
  void Serve(absl::Span<const PollFd> polled, size_t budget, std::vector<RoutedMessage>* out);
  // Writes what the links' queues hold, waiting up to `timeout_ms` for
  // their workers to read it (the ps's last replies, as it exits); what
  // they still send meanwhile is read and dropped.
  void Linger(int timeout_ms);
  // Whether `route` has the form of a link's (one of these, or one that
  // was). A ZeroMQ peer may give itself such a routing id: the ps drops
  // its messages.
  static bool IsLinkRoute(absl::string_view route);
  // Queues a reply on `route`'s link and writes what it takes now.
  // Unavailable when the link is gone, not admitted, or its queue full.
  absl::Status Send(absl::string_view route, const proto::Header& header, zmq::message_t body);
  // The descriptors of admitted links closed since the last call, in
  // order (a closed one's number is reused: a partial message of it is
  // given up).
  std::vector<int> TakeClosed();
  // Connections refused: no hello, a wrong password, another user, too
  // many.
  int64_t refused() const { return refused_; }
  size_t size() const { return links_.size(); }

 private:
  struct Conn {
    std::string route;
    std::string name;                  // the task, once admitted
    std::string nonce;                 // the ps's, in its greeting
    std::string hello;                 // the worker's answer's bytes so far
    int64_t deadline_us = 0;           // for the answer
    std::unique_ptr<StreamLink> link;  // owns the descriptor
    bool admitted = false;
  };
  LocalLinks(int listen_fd, std::map<std::string, std::string> passwords, int64_t max_message_bytes,
             double hello_timeout_s);
  void Accept();
  // Reads the worker's answer on `c`, and admits it once it is whole and
  // right.
  void ReadHello(Conn& c);
  // Closes a connection; `refused`: one not admitted, counted.
  void Close(int fd, const std::string& why, bool refused = false);

  int listen_fd_;
  std::map<std::string, std::string> passwords_;
  size_t max_payload_bytes_;  // --max_message_mb (0: no limit)
  size_t max_queued_bytes_;   // a link's replies: one message and kMaxQueuedReplyBytes
  int64_t hello_timeout_us_;
  uint64_t next_route_ = 1;
  size_t max_links_;                      // kMaxLocalLinks, or fewer where descriptors are few
  absl::flat_hash_map<int, Conn> links_;  // by descriptor
  absl::flat_hash_map<std::string, int> routes_;       // route -> descriptor
  absl::flat_hash_map<std::string, size_t> per_task_;  // admitted links by task
  std::vector<int> closed_;
  int64_t refused_ = 0;
  size_t hellos_ = 0;  // connections not admitted yet
  // accept failed for want of descriptors: the listening socket is not
  // polled until then (it would wake every poll).
  int64_t accept_paused_until_us_ = 0;
};

// The worker's end: a link to the ps at Unix socket `path`, which process
// `pid` said (over CURVE) it listens at, as task `name` whose key is
// `password`. Connects, checks the listener is that process of this user,
// then the admission above, each read at most `timeout_s`.
// FailedPrecondition saying why when the peer is not that ps, refused, or
// does not know the key; Unavailable when it cannot connect.
absl::StatusOr<std::unique_ptr<StreamLink>> ConnectLocal(const std::string& path, int64_t pid,
                                                         const std::string& name,
                                                         const std::string& password,
                                                         int64_t max_message_bytes,
                                                         double timeout_s);

// The admission's MAC: keyed BLAKE2b-256 (key: `key`, 16 to 64 bytes) of
// `label`, `first`, `second` and `name`.
std::array<uint8_t, 32> LinkMac(absl::string_view key, absl::string_view label,
                                absl::string_view first, absl::string_view second,
                                absl::string_view name);

}  // namespace pstrain

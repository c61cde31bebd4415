#pragma once

// A worker's view of whether its ps tasks are alive, kept by a background
// thread with its own DEALER sockets (a socket belongs to one thread).
//
// The thread sends HEARTBEAT to every ps each interval (a beat a ps's
// connection was not up for is sent again each 50 ms slice of the interval
// until it goes out, so a job's start waits for the connection, not the
// interval); the ps tracks the worker's liveness from them, and their
// replies tell the worker the ps is alive. The thread only moves messages
// and connection events: the verdicts (a rejoin status for a ps that
// closed its connection, restarted or went silent for peer_timeout_s; a
// ps's error) are PeerLiveness's (worker/peer_liveness.h), which the
// training thread checks while it waits on the ps. A ps that never
// answered is the caller's to judge (PsClient's WaitForServers deadline).

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "proto/pstrain.pb.h"
#include "transport/socket_monitor.h"
#include "transport/transport.h"
#include "worker/peer_liveness.h"

namespace pstrain {

struct HeartbeatTarget {
  std::string name;      // "ps:1 (localhost:2241)"
  std::string endpoint;  // "tcp://127.0.0.1:2241"
  SocketOptions socket;  // CURVE keys for this ps (transport/security.h)
};

struct HeartbeatOptions {
  double interval_s = 1.0;
  double peer_timeout_s = 60.0;
  int64_t max_message_bytes = int64_t{1} << 20;
};

class HeartbeatMonitor {
 public:
  // `base` is the header every heartbeat carries (job id, sender, rank).
  // The thread starts at once. `context` must outlive the monitor.
  HeartbeatMonitor(zmq::context_t& context, std::vector<HeartbeatTarget> targets,
                   const proto::Header& base, const HeartbeatOptions& options);
  ~HeartbeatMonitor();  // stops and joins the thread

  HeartbeatMonitor(const HeartbeatMonitor&) = delete;
  HeartbeatMonitor& operator=(const HeartbeatMonitor&) = delete;

  // OK while no failure was seen; the first failure afterwards (latched).
  absl::Status status() const { return liveness_.status(); }

  // Names of the targets that have not answered yet (empty once all have).
  std::vector<std::string> Unanswered() const { return liveness_.Unanswered(); }
  // Which targets answered, and what each serves (worker/shard_routes.h).
  std::vector<PsView> Views() const { return liveness_.Views(); }
  std::vector<LocalSocket> LocalSockets() const { return liveness_.LocalSockets(); }
  // The ps tasks are being shut down: their closing connections are no
  // failure (PeerLiveness::StopJudging).
  void StopJudging() { liveness_.StopJudging(); }

 private:
  void Loop();
  bool Connect(std::vector<zmq::socket_t>* sockets, std::vector<SocketMonitor>* monitors);
  // Sends beat `request_id` to every socket whose `unsent` is true, and
  // clears it for those it went out on.
  void SendAll(std::vector<zmq::socket_t>& sockets, uint64_t request_id, std::vector<bool>* unsent);
  void ReceiveAll(std::vector<zmq::socket_t>& sockets, int timeout_ms);
  void ReadEvents(std::vector<SocketMonitor>& monitors);

  zmq::context_t& context_;
  const std::vector<HeartbeatTarget> targets_;
  const proto::Header base_;
  const HeartbeatOptions options_;
  std::atomic<bool> stop_{false};
  PeerLiveness liveness_;

  std::thread thread_;  // last: starts after every member is ready
};

}  // namespace pstrain

#pragma once

// A worker's view of whether its ps tasks are alive, kept by a background
// thread with its own DEALER sockets (a socket belongs to one thread).
//
// The thread sends HEARTBEAT to every ps each interval; the ps tracks the
// worker's liveness from them, and their replies tell the worker the ps is
// alive. The monitor latches an error, which the training thread checks
// while it waits on the ps:
//  - a rejoin status (common/rejoin.h) for a ps that answered before and
//    whose connection closed (the process died or exited), whose replies
//    come from another process (it restarted), or that has not answered
//    for peer_timeout_s (dead or frozen): requests in flight to it may be
//    lost, and the worker registers again once it is back;
//  - the error of a ps whose reply carries one (the job failed; or this ps
//    serves another job).
// A ps that never answered is the caller's to judge (PsClient's
// WaitForServers deadline).

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/transport.h"
#include "proto/pstrain.pb.h"
#include "zmq.hpp"

namespace pstrain {

struct HeartbeatTarget {
  std::string name;      // "ps:1 (localhost:2241)"
  std::string endpoint;  // "tcp://127.0.0.1:2241"
  SocketOptions socket;  // CURVE keys for this ps (common/security.h)
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
  absl::Status status() const;

  // Names of the targets that have not answered yet (empty once all have).
  std::vector<std::string> Unanswered() const;

 private:
  void Loop();
  bool Connect(std::vector<zmq::socket_t>* sockets, std::vector<zmq::socket_t>* events);
  void SendAll(std::vector<zmq::socket_t>& sockets, uint64_t request_id);
  void ReceiveAll(std::vector<zmq::socket_t>& sockets, int timeout_ms);
  void ReadEvents(std::vector<zmq::socket_t>& events);
  void CheckSilence();
  // Latches `status` unless an error is latched already; true if it did.
  bool Latch(const absl::Status& status);

  zmq::context_t& context_;
  const std::vector<HeartbeatTarget> targets_;
  const proto::Header base_;
  const HeartbeatOptions options_;
  std::atomic<bool> stop_{false};

  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> last_answer_us_ ABSL_GUARDED_BY(mu_);  // 0: never
  std::vector<uint64_t> instances_ ABSL_GUARDED_BY(mu_);  // 0: none seen yet

  std::thread thread_;  // last: starts after every member is ready
};

}  // namespace pstrain

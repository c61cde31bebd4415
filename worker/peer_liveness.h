#pragma once

// What a worker concludes about its ps tasks from what it hears of them:
// the decisions of the HeartbeatMonitor, kept apart from its sockets and
// its thread so that tests drive them message by message on a FakeClock
// (common/clock.h), without sleeping or a real ps.
//
//   PeerLiveness live({"ps:0 (...)", "ps:1 (...)"}, /*peer_timeout_s=*/10, clock);
//   live.OnReply(0, reply_header);   // a heartbeat reply from ps:0
//   live.OnDisconnected(1);          // ps:1's connection closed
//   live.CheckSilence();             // once per heartbeat interval
//   if (!live.status().ok()) ...     // the first verdict, latched
//
// Verdicts (the first one is kept until the object is replaced):
//  - a rejoin status (common/rejoin.h) for a ps that answered before and
//    whose connection closed (it died, exited or restarted), whose reply
//    comes from another process (its instance id changed: it restarted),
//    or that has not answered for peer_timeout_s (dead or frozen);
//  - the error of a reply that carries one (the job failed, or the ps
//    serves another job), as the ps gave it.
// A ps that never answered is not judged here: that is the caller's
// connect deadline (PsClient::WaitForServers).
//
// Thread safety: every method may be called from any thread.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "proto/pstrain.pb.h"
#include "transport/local_route.h"
#include "worker/shard_routes.h"

namespace pstrain {

// Where a ps's Unix socket is (transport/local_route.h), as its last
// HEARTBEAT reply said; endpoint "" when it has none.
struct LocalSocket {
  std::string endpoint;
  int64_t pid = 0;
  LocalFileId file;
};

class PeerLiveness {
 public:
  // `names[i]` names target i in verdicts ("ps:1 (localhost:2241)").
  // `clock` must outlive this object.
  PeerLiveness(std::vector<std::string> names, double peer_timeout_s, const Clock* clock);

  // A reply from target i (heartbeat or request). Each of these returns
  // true when it latched a verdict (none was latched before).
  bool OnReply(size_t i, const proto::Header& reply);
  // Target i's connection closed.
  bool OnDisconnected(size_t i);
  // Judges targets that answered once and have been silent too long.
  bool CheckSilence();

  // OK until a verdict; the first verdict afterwards.
  absl::Status status() const;
  // Latches `status` unless a verdict is latched already; true if it did.
  bool Latch(const absl::Status& status);
  // The job is ending (the chief shuts the ps tasks down): from now on a
  // closing connection, a silence or a new instance is what an ending job
  // looks like, not a failure; none is latched or logged. A reply's error
  // still is.
  void StopJudging();
  // Names of the targets that have never answered.
  std::vector<std::string> Unanswered() const;
  // Per target: whether it answered, and the shards its last HEARTBEAT or
  // STATS reply said it serves (worker/shard_routes.h).
  std::vector<PsView> Views() const;
  // Where each ps's Unix socket is, from its last HEARTBEAT reply.
  std::vector<LocalSocket> LocalSockets() const;

 private:
  bool LatchRejoin(const std::string& why);

  const std::vector<std::string> names_;
  const double peer_timeout_s_;
  const Clock* const clock_;

  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool judging_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<int64_t> last_answer_us_ ABSL_GUARDED_BY(mu_);  // 0: never
  std::vector<uint64_t> instances_ ABSL_GUARDED_BY(mu_);      // 0: none seen yet
  std::vector<std::vector<proto::ShardPlacement>> hosted_ ABSL_GUARDED_BY(mu_);
  std::vector<LocalSocket> local_sockets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#pragma once

// The shards one ps serves: its own, and (failover, --failover_after_s) the
// shard of the ps it is the standby of, while that ps is away.
//
//   HostedShards shards(options);            // ps j: its own shard j
//   shards.Handle(peer, message, &replies);  // to the handler of its shard
//
// With --ps_replicas=1, ps j keeps a replica of shard k = (j - 1) mod n
// (RequestHandler::replica()). When ps k dies and does not come back
// within the chief's failover delay, the chief sends ps j ADOPT for shard
// k: a second RequestHandler serves shard k from that replica, at the next
// placement term, beside shard j, and the workers route shard k here
// (worker/shard_routes.h). Nothing a worker saw is lost: the replica has
// every state a worker was answered with (ps_server/replicator.h). When ps
// k is back (restarted empty, or a frozen ps that woke up), the chief sends
// RELEASE: ps j gives shard k up, keeps its state as the replica again, and
// the chief restores ps k from it (RESTORE from_payload, at the term after
// that); so the placement returns to the spec's, and ps j is again ps k's
// standby.
//
// Dispatch, by message:
//  - ADOPT and RELEASE: here, after the own handler's identity checks (only
//    the chief may send them). Both are idempotent: a repeat of one that
//    took effect is answered OK again.
//  - HEARTBEAT: to every hosted handler (each keeps its own view of which
//    workers are alive); the own handler answers it.
//  - REPLICATE of a shard served here: refused (its primary was frozen and
//    the shard adopted meanwhile); others, and FETCH_REPLICA: the own
//    handler, which keeps the replica.
//  - anything else: the handler of Header.shard_index; a request for a
//    shard this ps gave back is refused with a rejoin status (the sender
//    routes to where the shard is now), any other goes to the own handler,
//    which checks it as before.
// Every reply carries this ps's instance id.
//
// Thread safety: none; the ps's event loop owns it.

#include <memory>
#include <set>
#include <vector>

#include "ps_server/request_handler.h"

namespace pstrain {

class HostedShards {
 public:
  explicit HostedShards(const RequestHandlerOptions& own);

  // Handles one well-formed message (see above). Returns the handler that
  // handled it, or null (ADOPT, RELEASE, refused here).
  RequestHandler* Handle(const Peer& peer, const Message& request, std::vector<Reply>* out);

  // Judges the first piece of a message in pieces for the shard it names
  // (RequestHandler::AdmitPieces; a shard given back: a rejoin refusal).
  absl::StatusOr<size_t> AdmitPieces(const Peer& peer, const proto::Header& first);

  RequestHandler& own() { return own_; }
  const RequestHandler& own() const { return own_; }
  // The adopted shard's handler; null while none is adopted.
  RequestHandler* adopted() { return adopted_.get(); }
  // The initialised handler serving `shard` here, or null.
  const RequestHandler* Serving(int shard) const;
  // Every shard served here, initialised, with its term (for HEARTBEAT and
  // STATS replies).
  std::vector<proto::ShardPlacement> Placements() const;
  // Every hosted shard was told to shut down.
  bool shutdown_requested() const;

 private:
  void HandleAdopt(const Peer& peer, const Message& m, std::vector<Reply>* out);
  void HandleRelease(const Peer& peer, const Message& m, std::vector<Reply>* out);
  void HandleHeartbeat(const Peer& peer, const Message& m, std::vector<Reply>* out);
  void RefuseStaleReplicate(const Peer& peer, const proto::Header& h, std::vector<Reply>* out);
  void RefuseMoved(const Peer& peer, const proto::Header& h, std::vector<Reply>* out);
  void Refuse(const Peer& peer, const proto::Header& request, const absl::Status& status,
              std::vector<Reply>* out) const;
  // An ADOPT or RELEASE reply, with the state's ReplicaState.
  void Answer(const Peer& peer, proto::Header reply, const proto::ReplicaState& state,
              std::vector<Reply>* out) const;

  const RequestHandlerOptions options_;
  RequestHandler own_;
  std::unique_ptr<RequestHandler> adopted_;
  std::set<int> released_;  // shards this ps adopted and gave back
};

}  // namespace pstrain

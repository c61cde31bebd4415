#pragma once

// Who sent a request to a ps, and whether that sender may make it: checks
// 1-3 of ps_server/request_handler.h, before a request touches any state.
//
//  1. the envelope: not a reply, this protocol version, a known message
//     type, this job's id (a sparse ps knows none until the chief's INIT
//     or RESTORE tells it: SetJobId);
//  2. the sender: on an authenticated socket the peer's task comes from its
//     CURVE identity (Peer::user_id, set by the ZAP handler), never from
//     the header, and a header that claims another rank is refused.
//     Without authentication (--insecure) the header's sender and rank are
//     taken at their word;
//  3. the role: the chief may do anything; a worker REGISTERs, trains
//     (PUSH, PULL, PUSH_PULL, BARRIER) and sends HEARTBEAT and STATS; a ps
//     sends STATS, HEARTBEAT and REPLICATE; the client tool reads STATS.
//
// Every refusal names what was wrong, never the ps's own values (its job
// id, plan or range). Thread safety: none; the ps's event loop owns it.

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// Who sent a request, as far as the transport can tell.
struct Peer {
  std::string route;    // ROUTER routing id: where replies go
  std::string user_id;  // the authenticated task ("worker:1", "client"); "" if none
};

enum class Role { kChief, kWorker, kPs, kClient };

// "the chief", "a worker", "a ps", "a client".
const char* RoleName(Role role);

// An authenticated identity: its role and, for the chief and workers, rank.
struct Principal {
  Role role = Role::kClient;
  int rank = -1;
  int ps_index = -1;  // a ps: its task index
};

// Whether a header's sender is a chief or worker task.
bool IsWorkerSender(const proto::TaskId& t);

struct AccessControlOptions {
  // Authenticated peers by user id. Non-empty: every request must come
  // from one of them (CURVE). Empty: the header's claims are trusted.
  std::map<std::string, Principal> principals;
  int num_ranks = 1;    // chief + worker tasks of the spec
  uint64_t job_id = 0;  // the job's id (ClusterSpec::JobId)
  // A sparse ps: the job's id is not known (job_id 0) until the chief's
  // INIT or RESTORE says it (SetJobId); until then any is let through.
  bool job_id_from_init = false;
};

class AccessControl {
 public:
  explicit AccessControl(AccessControlOptions options) : options_(std::move(options)) {}

  // A refusal, and which check made it.
  struct Refusal {
    absl::Status status;
    bool unauthorized = false;  // checks 2-3 (else the envelope, check 1)
  };

  // The sender of `h` from `peer`, when it may make `h`; else why not.
  // Never reads or changes anything but this object.
  absl::StatusOr<Principal> Check(const Peer& peer, const proto::Header& h,
                                  Refusal* refusal = nullptr) const;

  // The job's id, once known (a sparse ps: from the chief's INIT).
  uint64_t job_id() const { return options_.job_id; }
  void SetJobId(uint64_t job_id) { options_.job_id = job_id; }
  bool authenticated() const { return !options_.principals.empty(); }

 private:
  absl::Status CheckEnvelope(const proto::Header& h) const;
  absl::StatusOr<Principal> Authenticate(const Peer& peer, const proto::Header& h) const;
  absl::Status Authorize(const Principal& who, const proto::Header& h) const;

  AccessControlOptions options_;
};

}  // namespace pstrain

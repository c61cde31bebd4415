#pragma once

// Which requests a ps has already seen, so that none is applied twice.
//
// A client instance (one PsClient) picks a random 64-bit session and
// numbers its requests upwards from 1; a request is named by (rank,
// session, request_id). For each rank this keeps:
//  - every session the rank has used on this ps (at most kMaxSessions);
//    the newest is the rank's current session, and every earlier one is
//    retired for good: a restarted worker's old client, or a second
//    process started as the same task;
//  - for the kRecentSessions most recent sessions, the session's highest
//    request id and the replies to its last kRememberedReplies requests.
//
// Classify() says what to do with a tracked request:
//  - kNew: apply it. Only a request of the current session (or of a
//    session never seen, which becomes current) above that session's
//    highest id is new.
//  - kCompleted: a repeat whose reply is remembered: send that reply again.
//  - kRepeat: a repeat (an id at or below its session's highest) whose
//    reply is not remembered any more, or that is still parked: answer it
//    if it is parked, else refuse it (AlreadyExists).
//  - kRetired: a request of a retired session that is not a remembered
//    repeat (a new id, or any id once the session is not among the recent
//    ones): refuse it (FailedPrecondition; not a rejoin: a client whose
//    rank moved on to a newer client has nothing left to do).
//  - kTooManySessions: a session never seen, of a rank that has used
//    kMaxSessions: refuse it (ResourceExhausted).
// So a request is applied at most once per (rank, session, request id)
// for as long as the ps process lives, whatever sessions come and go.
// A restarted ps starts with none of this (a worker rejoins it with a new
// session).
//
// Memory is bounded by the spec's ranks, never by messages: per rank at
// most kMaxSessions ids and kRecentSessions x kRememberedReplies replies.
// Thread safety: none; the ps's event loop owns it.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

struct RecordedReply {
  uint64_t request_id = 0;
  proto::Header header;
  bool with_params = false;
};

class RequestRepeats {
 public:
  // Replies remembered per session.
  static constexpr size_t kRememberedReplies = 8;
  // Sessions per rank whose highest id and replies are kept.
  static constexpr size_t kRecentSessions = 8;
  // Sessions a rank may use over the life of a ps.
  static constexpr size_t kMaxSessions = 4096;

  enum class Seen { kNew, kCompleted, kRepeat, kRetired, kTooManySessions };

  explicit RequestRepeats(int num_ranks);

  // Classifies a tracked request (see above) and, when it is new, records
  // its id as its session's highest and its session as the rank's current
  // one. `recorded` gets the reply of a kCompleted repeat (valid until the
  // next call). REQUIRES: 0 <= rank < num_ranks.
  Seen Classify(int rank, uint64_t session, uint64_t request_id, const RecordedReply** recorded);

  // Remembers the reply sent for a request of a recent session (a ring of
  // kRememberedReplies per session); nothing for a session not among the
  // rank's recent ones. REQUIRES: 0 <= rank < num_ranks.
  void Record(int rank, uint64_t session, uint64_t request_id, const proto::Header& reply,
              bool with_params);

  // The rank's current session (0: none yet).
  uint64_t current(int rank) const;
  // Whether `session` is one of the rank's retired sessions.
  bool retired(int rank, uint64_t session) const;
  // Sessions the rank has used on this ps.
  size_t sessions(int rank) const { return ranks_[rank].seen.size(); }

 private:
  struct Session {
    uint64_t id = 0;
    uint64_t highest_request_id = 0;
    std::deque<RecordedReply> replies;
  };
  struct Rank {
    absl::flat_hash_set<uint64_t> seen;  // every session, current included
    std::deque<Session> recent;          // oldest first; back() is current
  };

  // The rank's recent session `id`, or null.
  Session* FindRecent(Rank& r, uint64_t id);

  std::vector<Rank> ranks_;
};

}  // namespace pstrain

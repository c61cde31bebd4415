#include "ps_server/request_repeats.h"

#include <algorithm>

namespace pstrain {

RequestRepeats::RequestRepeats(int num_ranks)
    : ranks_(static_cast<size_t>(std::max(num_ranks, 0))) {}

RequestRepeats::Session* RequestRepeats::FindRecent(Rank& r, uint64_t id) {
  for (Session& s : r.recent) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

RequestRepeats::Seen RequestRepeats::Classify(int rank, uint64_t session, uint64_t request_id,
                                              const RecordedReply** recorded) {
  Rank& r = ranks_[rank];
  Session* s = FindRecent(r, session);
  if (s == nullptr) {
    // A session whose details were let go is still known, and retired.
    if (r.seen.contains(session)) return Seen::kRetired;
    if (r.seen.size() >= kMaxSessions) return Seen::kTooManySessions;
    r.seen.insert(session);
    r.recent.push_back({session, request_id, {}});
    if (r.recent.size() > kRecentSessions) r.recent.pop_front();
    return Seen::kNew;
  }
  if (request_id <= s->highest_request_id) {
    for (const RecordedReply& reply : s->replies) {
      if (reply.request_id == request_id) {
        *recorded = &reply;
        return Seen::kCompleted;
      }
    }
    return Seen::kRepeat;
  }
  if (s != &r.recent.back()) return Seen::kRetired;
  s->highest_request_id = request_id;
  return Seen::kNew;
}

void RequestRepeats::Record(int rank, uint64_t session, uint64_t request_id,
                            const proto::Header& reply, bool with_params) {
  Session* s = FindRecent(ranks_[rank], session);
  if (s == nullptr) return;
  s->replies.push_back({request_id, reply, with_params});
  while (s->replies.size() > kRememberedReplies) s->replies.pop_front();
}

uint64_t RequestRepeats::current(int rank) const {
  const Rank& r = ranks_[rank];
  return r.recent.empty() ? 0 : r.recent.back().id;
}

bool RequestRepeats::retired(int rank, uint64_t session) const {
  return session != current(rank) && ranks_[rank].seen.contains(session);
}

}  // namespace pstrain

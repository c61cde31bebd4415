#pragma once

// What a ps answers later, and the bounds on it: REGISTERs that came
// before the chief's INIT, pulls (and PUSH_PULL replies) waiting for a
// version or for SSP's staleness bound, and ranks waiting in a BARRIER.
// Nothing here decides when a request may be answered; the request
// handler asks with what it knows (UpdatePolicy::CanServe, who is alive).
//
// Bounds, from what honest workers need (a worker has at most one request
// in flight per shard): kMaxRegisters REGISTERs, kMaxPullsPerRank pulls
// per rank, kMaxBarriers open barriers with names of at most
// kMaxBarrierName bytes. Past them a request is refused, never held.
//
// A parked request is named by (rank, session, request id) like any other
// (ps_server/request_repeats.h): a repeat of it moves its answer to where
// the repeat came from (Reroute).
//
// Thread safety: none; the ps's event loop owns it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/pstrain.pb.h"
#include "ps_server/update_policy.h"

namespace pstrain {

// A request answered later: where the answer goes, and the reply made
// when it was parked (or, for a REGISTER before INIT, the request).
struct Parked {
  std::string peer;
  proto::Header header;
};

// A parked pull: what it waits for, and since when (Header.parked_us).
struct ParkedPull {
  Parked parked;
  PullRequest pull;
  int64_t since_us = 0;
};

class ParkedRequests {
 public:
  static constexpr size_t kMaxRegisters = 4096;
  static constexpr int kMaxPullsPerRank = 8;
  static constexpr size_t kMaxBarriers = 16;
  static constexpr size_t kMaxBarrierName = 64;

  // A REGISTER before INIT, kept with its request's header.
  // ResourceExhausted when kMaxRegisters are waiting.
  absl::Status ParkRegister(std::string peer, proto::Header request);
  // The REGISTERs parked so far, in arrival order; none stay parked.
  std::vector<Parked> TakeRegisters();

  // A pull that cannot be served yet: takes `parked` (moves from it). When
  // its rank has kMaxPullsPerRank parked, ResourceExhausted, and `parked`
  // is left as it was (to be refused).
  absl::Status ParkPull(Parked& parked, const PullRequest& pull, int64_t now_us);
  // The parked pulls `servable` says can be served now, in the order they
  // were parked; they are parked no longer.
  std::vector<ParkedPull> TakeServable(const std::function<bool(const PullRequest&)>& servable);

  // Rank `rank` (of `num_ranks`) arrives in barrier `name`, its answer
  // parked. InvalidArgument for a bad name, ResourceExhausted past
  // kMaxBarriers, AlreadyExists when the rank is in the barrier already.
  absl::Status Arrive(const std::string& name, int rank, int num_ranks, Parked parked);
  // Barrier `name`'s parked answers, once every rank that `waited_for`
  // has arrived (the barrier is then closed); none while one is missing.
  std::vector<Parked> Release(const std::string& name, const std::function<bool(int)>& waited_for);
  std::vector<std::string> barrier_names() const;

  // Sends the answer of the parked request that `repeat` repeats (same
  // rank, session and request id) to `peer` instead. False when none is
  // parked.
  bool Reroute(const proto::Header& repeat, const std::string& peer);
  // Drops what `rank` has parked (pulls, places in barriers): a newer
  // client of the rank registered, and nobody waits for the old answers.
  void ForgetRank(int rank);
  // Everything parked, to be answered with an error; nothing stays.
  std::vector<Parked> TakeAll();

  size_t pulls() const { return pulls_.size(); }

 private:
  struct Barrier {
    std::vector<bool> arrived;
    std::vector<Parked> waiting;
  };

  std::vector<Parked> registers_;
  std::vector<ParkedPull> pulls_;
  std::map<std::string, Barrier> barriers_;
};

}  // namespace pstrain

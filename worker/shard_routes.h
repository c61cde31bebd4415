#pragma once

// Which ps a worker sends each shard's requests to (failover;
// ps_server/hosted_shards.h).
//
// Shard k lives on ps k, unless ps k is away and the chief had its standby
// (ps k+1 mod n) adopt it. Every ps says, in each HEARTBEAT reply, which
// shards it serves initialised and at which placement term; a term grows
// with every move of a shard. So for each shard:
//  - the ps listing it at the highest term serves it (a frozen ps that
//    woke still listing a shard that was adopted meanwhile lists an older
//    term, and is passed over, once the adopter's listing has reached the
//    worker: until then the chief keeps the shard where it moved it,
//    PsClient::SetRoute); on a tie, its own ps;
//  - else its own ps, if that ps answers at all (a ps that restarted empty
//    is where the chief restores the shard, and where REGISTER waits);
//  - else nobody yet (-1).
// A worker that sends a shard to a ps that another ps outranks for it
// (FirstOutrankedRoute: its view lagged a move) rejoins, and routes anew.
//
// Thread safety: a pure function.

#include <vector>

#include "proto/pstrain.pb.h"

namespace pstrain {

// What the worker has heard from one ps.
struct PsView {
  bool answered = false;                      // it answered a heartbeat
  std::vector<proto::ShardPlacement> hosted;  // from its last HEARTBEAT reply
};

// route[k]: the index of the ps serving shard k, or -1. `ps` is indexed
// by ps task index; shards are 0 .. num_shards - 1.
std::vector<int> ChooseRoutes(int num_shards, const std::vector<PsView>& ps);

// Overrides `routes` (ChooseRoutes') with `pinned[k]`, the ps the chief
// moved shard k to itself (-1: none), while that ps answers: the views lag
// a move by up to a beat. A pin the views agree with is done (set to -1).
void KeepPinnedRoutes(const std::vector<PsView>& ps, std::vector<int>* pinned,
                      std::vector<int>* routes);

// The first shard k whose requests go to a ps (`in_use[k]`) that the ps
// the views choose now (`chosen[k]`, from ChooseRoutes and
// KeepPinnedRoutes) outranks: `chosen[k]` lists the shard, and `in_use[k]`
// lists it at a lower term or not at all (a ps that restarted empty while
// its shard was adopted); -1 if none. Where the chief moved a shard
// itself, its pin makes the two agree.
int FirstOutrankedRoute(const std::vector<int>& in_use, const std::vector<int>& chosen,
                        const std::vector<PsView>& ps);

// The term at which `view` lists `shard`; -1 if it does not.
int64_t ListedTerm(const PsView& view, int shard);

}  // namespace pstrain

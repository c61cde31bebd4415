#pragma once

// What a ps knows about each worker rank of its spec: whether it has
// registered, and when it was last heard from (authenticated, valid
// traffic only). The requests each rank has made are
// ps_server/request_repeats.h's.
//
// Liveness: a rank silent for longer than the peer timeout is declared
// dead (the ps stops waiting for it: sync versions, barriers, SSP's
// slowest clock) and is alive again as soon as it is heard from.
//
// Sized from the ps's own spec, never from a message. Thread safety: none;
// the ps's event loop owns it.

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"

namespace pstrain {

class WorkerTable {
 public:
  WorkerTable(int num_workers, const Clock* clock);

  int size() const { return static_cast<int>(workers_.size()); }

  // REQUIRES for every `rank` below: 0 <= rank < size().
  bool registered(int rank) const { return workers_[rank].registered; }
  // Registers `rank` from client `session`; returns true when an earlier
  // registration came from another session (a restarted or rejoining
  // client, whose old requests nobody waits for any more).
  bool MarkRegistered(int rank, uint64_t session);
  int num_registered() const;

  bool dead(int rank) const { return workers_[rank].dead; }
  void set_dead(int rank, bool dead) { workers_[rank].dead = dead; }
  int num_alive() const;  // ranks not declared dead

  void NoteAlive(int rank) {
    workers_[rank].last_seen_us = clock_->NowMicros();
    workers_[rank].heard = true;
  }
  // Whether the rank was ever heard from (or counted as just heard from).
  bool heard_from(int rank) const { return workers_[rank].heard; }
  // Dynamic workers: a rank slot nobody has taken yet (also dead: not
  // waited for). Its first request is a join, not a rejoin.
  bool absent(int rank) const { return workers_[rank].absent; }
  void set_absent(int rank, bool absent) { workers_[rank].absent = absent; }
  // Where the rank's requests last came from (its request socket).
  void NoteRoute(int rank, std::string route) { workers_[rank].route = std::move(route); }
  const std::string& route(int rank) const { return workers_[rank].route; }
  // Every rank counts as just heard from (a restored shard gives each the
  // full peer timeout to register).
  void NoteAllAlive();
  // Seconds since the rank was last heard from.
  double SilentSeconds(int rank) const;

 private:
  struct Worker {
    bool registered = false;
    bool dead = false;
    bool heard = false;
    bool absent = false;
    uint64_t registered_session = 0;
    std::string route;
    int64_t last_seen_us = 0;
  };

  const Clock* clock_;
  std::vector<Worker> workers_;
};

}  // namespace pstrain

#include "ps_server/worker_table.h"

#include <algorithm>

namespace pstrain {

WorkerTable::WorkerTable(int num_workers, const Clock* clock)
    : clock_(clock), workers_(static_cast<size_t>(std::max(num_workers, 0))) {
  const int64_t now = clock_->NowMicros();
  for (Worker& w : workers_) w.last_seen_us = now;
}

int WorkerTable::num_registered() const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(),
                                        [](const Worker& w) { return w.registered; }));
}

bool WorkerTable::MarkRegistered(int rank, uint64_t session) {
  Worker& w = workers_[rank];
  const bool replaced = w.registered && w.registered_session != session;
  w.registered = true;
  w.registered_session = session;
  return replaced;
}

int WorkerTable::num_alive() const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(),
                                        [](const Worker& w) { return !w.dead; }));
}

void WorkerTable::NoteAllAlive() {
  const int64_t now = clock_->NowMicros();
  for (Worker& w : workers_) {
    w.last_seen_us = now;
    w.heard = true;
  }
}

double WorkerTable::SilentSeconds(int rank) const {
  return static_cast<double>(clock_->NowMicros() - workers_[rank].last_seen_us) * 1e-6;
}

}  // namespace pstrain

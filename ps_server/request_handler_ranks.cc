// RequestHandler's view of the workers as a group: barriers, ranks that
// leave training, die or come back, and the job's SHUTDOWN.

#include "absl/strings/str_cat.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps_server/request_handler.h"

namespace pstrain {

void RequestHandler::HandleBarrier(const std::string& peer, const Message& m,
                                   std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  if (absl::Status s = parked_.Arrive(h.barrier_name(), h.rank(), job_.num_workers(),
                                      {peer, MakeReply(h)});
      !s.ok()) {
    return Refuse(peer, h, s, out);
  }
  if (h.has_report() && reports_.count(h.rank()) == 0) {
    reports_[h.rank()] = h.report();
    LeaveTraining(h.rank(), out);
  }
  MaybeReleaseBarrier(h.barrier_name(), out);
}

void RequestHandler::LeaveTraining(int rank, std::vector<Reply>* out) {
  // Its final report: it trains no more (its loop may have ended before
  // the others'), so nothing waits for it any longer.
  if (workers_.dead(rank)) return;
  if (SetWaitedFor(rank, false, out) || job_.mode() == proto::SSP) ReleaseParkedPulls(out);
  const std::vector<int64_t> clocks = policy_->Clocks();
  LOG(INFO) << "rank " << rank << " has finished (at step " << clocks[static_cast<size_t>(rank)]
            << "): the job goes on without it";
}

void RequestHandler::MaybeReleaseBarrier(const std::string& name, std::vector<Reply>* out) {
  // Not waited for: dead ranks, and ranks past their final report (a
  // rank that rejoined late finds the others gone through "done").
  auto waited_for = [this](int rank) { return !workers_.dead(rank) && !reported_done(rank); };
  for (Parked& p : parked_.Release(name, waited_for)) {
    out->push_back({std::move(p.peer), std::move(p.header), false, /*record=*/true});
  }
}

std::vector<int> RequestHandler::DeclareSilentDead(double peer_timeout_s, std::vector<Reply>* out) {
  std::vector<int> declared;
  if (!initialized() || !failure_.ok()) return declared;
  for (int rank = 0; rank < workers_.size(); ++rank) {
    if (workers_.dead(rank) || reported_done(rank)) continue;
    if (!workers_.registered(rank) && !restored_) continue;
    if (workers_.SilentSeconds(rank) <= peer_timeout_s) continue;
    SetDead(rank, true, out);
    declared.push_back(rank);
  }
  SettleEmbeddings();
  return declared;
}

void RequestHandler::SetDead(int rank, bool dead, std::vector<Reply>* out) {
  // Dynamic workers: a slot never heard from is absent, not dead; its
  // first request is a join.
  const bool joins = !dead && workers_.absent(rank);
  workers_.set_absent(rank, false);
  workers_.set_dead(rank, dead);
  if (dead) {
    stats_.set_workers_declared_dead(stats_.workers_declared_dead() + 1);
  } else if (joins) {
    stats_.set_workers_joined(stats_.workers_joined() + 1);
    LOG(INFO) << "rank " << rank << " joined: waited for from now on";
  } else {
    stats_.set_workers_rejoined(stats_.workers_rejoined() + 1);
    LOG(INFO) << "rank " << rank << " is back: waited for again";
  }
  if (!initialized()) return;
  const bool advanced = SetWaitedFor(rank, !dead, out);
  // A worker that joins (or comes back) starts at the slowest live
  // worker's clock: SSP would otherwise hold everybody back until it has
  // done as many steps as they have.
  if (!dead && options_.dynamic_workers) policy_->AdmitAtSlowestClock(rank);
  // A new version, or (SSP) a new slowest live rank, may release pulls.
  if (advanced || job_.mode() == proto::SSP) ReleaseParkedPulls(out);
  if (!dead) return;
  for (const std::string& name : parked_.barrier_names()) MaybeReleaseBarrier(name, out);
}

bool RequestHandler::SetWaitedFor(int rank, bool waited_for, std::vector<Reply>* out) {
  bool refused = false;
  const bool advanced = policy_->SetActive(rank, waited_for, &refused);
  if (refused) stats_.set_refused_updates(stats_.refused_updates() + 1);
  if (reducer_ != nullptr && reducer_->SetActive(rank, waited_for)) AnswerReduce(out);
  return advanced;
}

void RequestHandler::ForgetOldSession(int rank, std::vector<Reply>* out) {
  parked_.ForgetRank(rank);
  if (reducer_ != nullptr) reducer_->Forget(rank);
  // A new process of a rank that had finished trains again: waited for.
  if (reports_.erase(rank) > 0 && initialized() && !workers_.dead(rank)) {
    SetWaitedFor(rank, true, out);
  }
}

void RequestHandler::HandleShutdown(const std::string& peer, const Message& m,
                                    std::vector<Reply>* out) {
  // Only the chief gets here (Authorize).
  shutdown_requested_ = true;
  RemoveCheckpointsBefore(m.header.keep_from_step());
  AbortParked(JobFinishedError("the chief shut the job down: training is over"), out);
  out->push_back({peer, MakeReply(m.header), false, /*record=*/true});
  // A worker that was frozen, or declared dead, while the job finished
  // finds this notice on its request socket when it wakes, and exits 0
  // instead of waiting for a ps that is gone.
  for (int rank = 0; rank < workers_.size(); ++rank) {
    if (rank == m.header.rank() || reported_done(rank) || workers_.route(rank).empty()) continue;
    proto::Header notice = MakeReply(m.header);
    notice.set_rank(rank);
    notice.set_request_id(0);
    notice.set_job_finished(true);
    Reply r{workers_.route(rank), std::move(notice), false, false};
    r.notice = true;
    out->push_back(std::move(r));
  }
}

}  // namespace pstrain

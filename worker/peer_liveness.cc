#include "worker/peer_liveness.h"

#include "absl/strings/str_cat.h"
#include "common/rejoin.h"
#include "glog/logging.h"

namespace pstrain {

PeerLiveness::PeerLiveness(std::vector<std::string> names, double peer_timeout_s,
                           const Clock* clock)
    : names_(std::move(names)),
      peer_timeout_s_(peer_timeout_s),
      clock_(clock),
      last_answer_us_(names_.size(), 0),
      instances_(names_.size(), 0),
      hosted_(names_.size()),
      local_sockets_(names_.size()) {}

absl::Status PeerLiveness::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

bool PeerLiveness::Latch(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok() || status.ok()) return false;
  status_ = status;
  return true;
}

void PeerLiveness::StopJudging() {
  absl::MutexLock lock(&mu_);
  judging_ = false;
}

bool PeerLiveness::LatchRejoin(const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    if (!judging_) return false;
  }
  if (!Latch(RejoinError(why))) return false;
  LOG(WARNING) << why;
  return true;
}

std::vector<std::string> PeerLiveness::Unanswered() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (size_t i = 0; i < names_.size(); ++i) {
    if (last_answer_us_[i] == 0) out.push_back(names_[i]);
  }
  return out;
}

std::vector<PsView> PeerLiveness::Views() const {
  absl::MutexLock lock(&mu_);
  std::vector<PsView> out(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    out[i].answered = last_answer_us_[i] != 0;
    out[i].hosted = hosted_[i];
  }
  return out;
}

std::vector<LocalSocket> PeerLiveness::LocalSockets() const {
  absl::MutexLock lock(&mu_);
  return local_sockets_;
}

bool PeerLiveness::OnReply(size_t i, const proto::Header& reply) {
  if (i >= names_.size()) return false;
  bool latched = false;
  const proto::ErrorStatus& e = reply.error();
  if (e.code() != 0) {
    latched = Latch(absl::Status(static_cast<absl::StatusCode>(e.code()),
                                 absl::StrCat(names_[i], ": ", e.message())));
  }
  bool restarted = false;
  {
    absl::MutexLock lock(&mu_);
    last_answer_us_[i] = clock_->NowMicros();
    const uint64_t instance = reply.ps_instance();
    restarted = instance != 0 && instances_[i] != 0 && instance != instances_[i];
    if (instance != 0) instances_[i] = instance;
    const bool lists = reply.type() == proto::HEARTBEAT || reply.type() == proto::STATS;
    if (lists && e.code() == 0) hosted_[i].assign(reply.hosted().begin(), reply.hosted().end());
    if (reply.type() == proto::HEARTBEAT && e.code() == 0) {
      local_sockets_[i] = {
          reply.local_endpoint(), reply.local_pid(), {reply.local_dev(), reply.local_inode()}};
    }
  }
  if (restarted)
    latched = LatchRejoin(absl::StrCat(names_[i], " restarted (a new process)")) || latched;
  return latched;
}

bool PeerLiveness::OnDisconnected(size_t i) {
  if (i >= names_.size()) return false;
  {
    absl::MutexLock lock(&mu_);
    if (last_answer_us_[i] == 0) return false;  // not connected yet: nothing lost
  }
  return LatchRejoin(
      absl::StrCat(names_[i], " closed its connection: it died, exited or restarted"));
}

bool PeerLiveness::CheckSilence() {
  const int64_t now = clock_->NowMicros();
  std::vector<size_t> silent;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < names_.size(); ++i) {
      if (last_answer_us_[i] != 0 && (now - last_answer_us_[i]) * 1e-6 > peer_timeout_s_) {
        silent.push_back(i);
      }
    }
  }
  bool latched = false;
  for (size_t i : silent) {
    latched = LatchRejoin(absl::StrCat(names_[i], " stopped answering (no heartbeat reply for ",
                                       peer_timeout_s_, " s): dead or frozen")) ||
              latched;
  }
  return latched;
}

}  // namespace pstrain

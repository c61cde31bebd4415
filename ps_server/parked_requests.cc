#include "ps_server/parked_requests.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

bool SameRequest(const proto::Header& a, const proto::Header& b) {
  return a.rank() == b.rank() && a.session() == b.session() && a.request_id() == b.request_id();
}

}  // namespace

absl::Status ParkedRequests::ParkRegister(std::string peer, proto::Header request) {
  if (registers_.size() >= kMaxRegisters) {
    return absl::ResourceExhaustedError("too many REGISTER requests waiting for the chief's INIT");
  }
  registers_.push_back({std::move(peer), std::move(request)});
  return absl::OkStatus();
}

std::vector<Parked> ParkedRequests::TakeRegisters() {
  std::vector<Parked> out;
  out.swap(registers_);
  return out;
}

absl::Status ParkedRequests::ParkPull(Parked& parked, const PullRequest& pull, int64_t now_us) {
  const auto by_rank = std::count_if(pulls_.begin(), pulls_.end(),
                                     [&](const ParkedPull& p) { return p.pull.rank == pull.rank; });
  if (by_rank >= kMaxPullsPerRank) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rank ", pull.rank, " already has ", by_rank, " requests waiting"));
  }
  pulls_.push_back({std::move(parked), pull, now_us});
  return absl::OkStatus();
}

std::vector<ParkedPull> ParkedRequests::TakeServable(
    const std::function<bool(const PullRequest&)>& servable) {
  std::vector<ParkedPull> ready, still;
  for (ParkedPull& p : pulls_) (servable(p.pull) ? ready : still).push_back(std::move(p));
  pulls_ = std::move(still);
  return ready;
}

absl::Status ParkedRequests::Arrive(const std::string& name, int rank, int num_ranks,
                                    Parked parked) {
  if (name.empty() || name.size() > kMaxBarrierName) {
    return absl::InvalidArgumentError(
        absl::StrCat("BARRIER needs a name of 1..", kMaxBarrierName, " bytes"));
  }
  if (barriers_.count(name) == 0 && barriers_.size() >= kMaxBarriers) {
    return absl::ResourceExhaustedError(absl::StrCat(kMaxBarriers, " barriers are open already"));
  }
  Barrier& b = barriers_[name];
  if (b.arrived.empty()) b.arrived.assign(static_cast<size_t>(std::max(num_ranks, 0)), false);
  if (rank < 0 || rank >= static_cast<int>(b.arrived.size())) {
    if (b.waiting.empty()) barriers_.erase(name);
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not a rank of this job"));
  }
  if (b.arrived[rank]) {
    return absl::AlreadyExistsError(
        absl::StrCat("rank ", rank, " is already in barrier \"", name, "\""));
  }
  b.arrived[rank] = true;
  b.waiting.push_back(std::move(parked));
  return absl::OkStatus();
}

std::vector<Parked> ParkedRequests::Release(const std::string& name,
                                            const std::function<bool(int)>& waited_for) {
  auto it = barriers_.find(name);
  if (it == barriers_.end()) return {};
  const Barrier& b = it->second;
  for (int rank = 0; rank < static_cast<int>(b.arrived.size()); ++rank) {
    if (!b.arrived[rank] && waited_for(rank)) return {};
  }
  std::vector<Parked> out = std::move(it->second.waiting);
  barriers_.erase(it);
  return out;
}

std::vector<std::string> ParkedRequests::barrier_names() const {
  std::vector<std::string> names;
  for (const auto& [name, b] : barriers_) names.push_back(name);
  return names;
}

bool ParkedRequests::Reroute(const proto::Header& repeat, const std::string& peer) {
  for (Parked& p : registers_) {
    if (SameRequest(p.header, repeat)) return p.peer = peer, true;
  }
  for (ParkedPull& p : pulls_) {
    if (SameRequest(p.parked.header, repeat)) return p.parked.peer = peer, true;
  }
  for (auto& [name, b] : barriers_) {
    for (Parked& p : b.waiting) {
      if (SameRequest(p.header, repeat)) return p.peer = peer, true;
    }
  }
  return false;
}

void ParkedRequests::ForgetRank(int rank) {
  pulls_.erase(std::remove_if(pulls_.begin(), pulls_.end(),
                              [&](const ParkedPull& p) { return p.pull.rank == rank; }),
               pulls_.end());
  for (auto& [name, b] : barriers_) {
    b.waiting.erase(std::remove_if(b.waiting.begin(), b.waiting.end(),
                                   [&](const Parked& p) { return p.header.rank() == rank; }),
                    b.waiting.end());
    if (rank >= 0 && rank < static_cast<int>(b.arrived.size())) b.arrived[rank] = false;
  }
}

std::vector<Parked> ParkedRequests::TakeAll() {
  std::vector<Parked> out = TakeRegisters();
  for (ParkedPull& p : pulls_) out.push_back(std::move(p.parked));
  for (auto& [name, b] : barriers_) {
    for (Parked& p : b.waiting) out.push_back(std::move(p));
  }
  pulls_.clear();
  barriers_.clear();
  return out;
}

}  // namespace pstrain

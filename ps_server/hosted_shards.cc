#include "ps_server/hosted_shards.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

// A request for a shard this ps adopted and gave back.
absl::Status MovedError(int shard) {
  return RejoinError(absl::StrCat("shard ", shard, " went back to its own ps: register again"));
}

}  // namespace

HostedShards::HostedShards(const RequestHandlerOptions& own) : options_(own), own_(own) {}

const RequestHandler* HostedShards::Serving(int shard) const {
  if (shard == options_.shard_index && own_.initialized()) return &own_;
  if (adopted_ != nullptr && adopted_->shard_index() == shard) return adopted_.get();
  return nullptr;
}

std::vector<proto::ShardPlacement> HostedShards::Placements() const {
  std::vector<proto::ShardPlacement> out;
  auto add = [&](int shard, const RequestHandler& h) {
    proto::ShardPlacement p;
    p.set_shard(shard);
    p.set_term(h.term());
    out.push_back(p);
  };
  if (own_.initialized()) add(options_.shard_index, own_);
  if (adopted_ != nullptr) add(adopted_->shard_index(), *adopted_);
  return out;
}

bool HostedShards::shutdown_requested() const {
  return own_.shutdown_requested() && (adopted_ == nullptr || adopted_->shutdown_requested());
}

void HostedShards::Refuse(const Peer& peer, const proto::Header& request,
                          const absl::Status& status, std::vector<Reply>* out) const {
  Reply r{peer.route, ErrorReply(request, status), false, false};
  r.header.set_ps_instance(options_.instance);
  out->push_back(std::move(r));
}

RequestHandler* HostedShards::Handle(const Peer& peer, const Message& request,
                                     std::vector<Reply>* out) {
  const proto::Header& h = request.header;
  const bool adopted_here = adopted_ != nullptr && adopted_->shard_index() == h.shard_index();
  switch (h.type()) {
    case proto::ADOPT:
      HandleAdopt(peer, request, out);
      return nullptr;
    case proto::RELEASE:
      HandleRelease(peer, request, out);
      return nullptr;
    case proto::HEARTBEAT:
      HandleHeartbeat(peer, request, out);
      return &own_;
    case proto::REPLICATE:
      if (!adopted_here) break;
      RefuseStaleReplicate(peer, h, out);
      return nullptr;
    case proto::FETCH_REPLICA:
      break;
    default:
      if (adopted_here) {
        adopted_->Handle(peer, request, out);
        return adopted_.get();
      }
      if (h.shard_index() != options_.shard_index && released_.count(h.shard_index()) > 0) {
        RefuseMoved(peer, h, out);
        return nullptr;
      }
      break;
  }
  own_.Handle(peer, request, out);
  return &own_;
}

absl::StatusOr<size_t> HostedShards::AdmitPieces(const Peer& peer, const proto::Header& first) {
  if (adopted_ != nullptr && adopted_->shard_index() == first.shard_index()) {
    return adopted_->AdmitPieces(peer, first);
  }
  if (first.shard_index() != options_.shard_index && released_.count(first.shard_index()) > 0) {
    RETURN_IF_ERROR(own_.Admit(peer, first));
    own_.CountRefusal();
    return MovedError(first.shard_index());
  }
  return own_.AdmitPieces(peer, first);
}

void HostedShards::RefuseStaleReplicate(const Peer& peer, const proto::Header& h,
                                        std::vector<Reply>* out) {
  if (absl::Status s = own_.Admit(peer, h); !s.ok()) return Refuse(peer, h, s, out);
  own_.CountStaleReplication();
  own_.CountRefusal();
  Refuse(peer, h,
         absl::FailedPreconditionError(
             absl::StrCat("shard ", h.shard_index(),
                          " is served by this ps now (adopted while its "
                          "primary was away): that primary's state is not taken")),
         out);
  // With the request's seq and the term the shard is served at here: the
  // primary reads it as the answer to that state, and is deposed by it
  // (Replicator).
  out->back().header.mutable_replica()->set_seq(h.replica().seq());
  out->back().header.mutable_replica()->set_term(adopted_->term());
}

void HostedShards::RefuseMoved(const Peer& peer, const proto::Header& h, std::vector<Reply>* out) {
  if (absl::Status s = own_.Admit(peer, h); !s.ok()) return Refuse(peer, h, s, out);
  own_.CountRefusal();
  Refuse(peer, h, MovedError(h.shard_index()), out);
}

void HostedShards::Answer(const Peer& peer, proto::Header reply, const proto::ReplicaState& state,
                          std::vector<Reply>* out) const {
  reply.set_ps_instance(options_.instance);
  *reply.mutable_replica() = state;
  out->push_back({peer.route, std::move(reply), false, false});
}

void HostedShards::HandleHeartbeat(const Peer& peer, const Message& m, std::vector<Reply>* out) {
  own_.Handle(peer, m, out);
  if (adopted_ == nullptr) return;
  // The adopted shard keeps its own view of who is alive; its answer to
  // the beat itself is the own handler's, but what a rank's return
  // releases there (parked pulls, a barrier) goes out.
  std::vector<Reply> more;
  adopted_->Handle(peer, m, &more);
  for (Reply& r : more) {
    if (r.header.type() != proto::HEARTBEAT) out->push_back(std::move(r));
  }
}

void HostedShards::HandleAdopt(const Peer& peer, const Message& m, std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = own_.Admit(peer, h); !s.ok()) return Refuse(peer, h, s, out);
  const int shard = h.shard_index();
  auto refuse = [&](const absl::Status& s) {
    own_.CountRefusal();
    Refuse(peer, h, s, out);
  };
  if (adopted_ != nullptr) {
    if (adopted_->shard_index() != shard) {
      return refuse(absl::FailedPreconditionError(
          absl::StrCat("ADOPT of shard ", shard, ": this ps serves shard ", adopted_->shard_index(),
                       " of another ps already")));
    }
    return Answer(peer, adopted_->MakeReply(h), own_.replica().header.replica(), out);
  }
  const HeldReplica& replica = own_.replica();
  if (shard == options_.shard_index || !replica.held() || replica.header.shard_index() != shard) {
    return refuse(
        absl::NotFoundError(absl::StrCat("ADOPT: this ps holds no replica of shard ", shard)));
  }
  RequestHandlerOptions options = options_;
  options.shard_index = shard;
  auto handler = std::make_unique<RequestHandler>(options);
  if (absl::Status s = handler->AdoptReplica(replica); !s.ok()) return refuse(s);
  adopted_ = std::move(handler);
  released_.erase(shard);
  own_.CountAdoption();
  LOG(WARNING) << "adopted shard " << shard
               << " at the chief's request (its ps is away): serving it "
               << "from the replica at version " << adopted_->version() << " beside shard "
               << options_.shard_index;
  Answer(peer, adopted_->MakeReply(h), replica.header.replica(), out);
}

void HostedShards::HandleRelease(const Peer& peer, const Message& m, std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = own_.Admit(peer, h); !s.ok()) return Refuse(peer, h, s, out);
  const int shard = h.shard_index();
  if (adopted_ == nullptr || adopted_->shard_index() != shard) {
    if (released_.count(shard) > 0) {  // a repeat: given back already
      return Answer(peer, own_.MakeReply(h), own_.replica().header.replica(), out);
    }
    own_.CountRefusal();
    return Refuse(peer, h,
                  absl::FailedPreconditionError(
                      absl::StrCat("RELEASE: this ps does not serve shard ", shard)),
                  out);
  }
  const proto::Header reply = adopted_->MakeReply(h);
  HeldReplica state = adopted_->ReleaseAsReplica(
      RejoinError(absl::StrCat("shard ", shard, " goes back to its own ps: register again")), out);
  const proto::ReplicaState released = state.header.replica();
  own_.KeepReplica(std::move(state));
  own_.CountRelease();
  released_.insert(shard);
  adopted_.reset();
  LOG(WARNING) << "gave shard " << shard << " back at the chief's request (its ps is back); "
               << "keeping its state as the standby's replica";
  Answer(peer, reply, released, out);
}

}  // namespace pstrain

// RequestHandler's hot-standby requests (stage 2 of issue 8): REPLICATE
// (the primary's state, kept by its standby), FETCH_REPLICA (the chief
// reads it back) and the state a RESTORE from_payload carries. Kept apart
// from request_handler.cc so that each file stays readable. The primary's
// side is ps_server/replicator.h.

#include "absl/strings/str_cat.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps_server/request_handler.h"

namespace pstrain {
namespace {

constexpr uint64_t kMaxRange = uint64_t{1} << 40;
constexpr int64_t kMaxVersion = int64_t{1} << 48;

// The floats of the state a message carries: its range's parameters and
// the slots of its job's optimizer (common/optimizer.h). InvalidArgument
// when the range, the optimizer, the payload or the ReplicaState is not
// one a shard could have.
absl::StatusOr<size_t> CheckState(const Message& m, int num_workers) {
  const proto::Header& h = m.header;
  if (h.range_end() <= h.range_begin() || h.range_end() > kMaxRange) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad range [", h.range_begin(), ", ", h.range_end(), ")"));
  }
  ASSIGN_OR_RETURN(const OptimizerConfig optimizer, OptimizerFromJob(h.job()));
  const size_t n = static_cast<size_t>(h.range_end() - h.range_begin());
  const size_t floats = StateFloats(optimizer, n);
  if (h.encoding() != proto::F32 || m.payload_floats() != floats) {
    return absl::InvalidArgumentError(
        absl::StrCat("a state of ", m.payload_bytes(), " bytes for a range of ", n, " floats and ",
                     OptimizerName(optimizer.kind), "'s ", NumSlots(optimizer), " slot(s)"));
  }
  const proto::ReplicaState& r = h.replica();
  if (r.version() < 0 || r.version() > kMaxVersion || r.updates() < 0 ||
      (r.worker_clocks_size() != 0 && r.worker_clocks_size() != num_workers)) {
    return absl::InvalidArgumentError("a state whose version, update count or clocks are out of range");
  }
  for (int64_t c : r.worker_clocks()) {
    if (c < 0 || c > kMaxVersion) return absl::InvalidArgumentError("a worker clock out of range");
  }
  return floats;
}

}  // namespace

std::vector<float> RequestHandler::StateSnapshot() const {
  const absl::Span<const float> state = policy_->store().state();
  return {state.begin(), state.end()};
}

proto::ReplicaState RequestHandler::ReplicaStateNow() const {
  proto::ReplicaState r;
  r.set_version(policy_->version());
  r.set_updates(policy_->store().updates());
  const std::vector<int64_t> clocks = policy_->Clocks();
  *r.mutable_worker_clocks() = {clocks.begin(), clocks.end()};
  r.set_primary_instance(options_.instance);
  r.set_term(term_);
  r.set_generation(generation_);
  return r;
}

proto::Header RequestHandler::ReplicateHeader(uint64_t seq) const {
  proto::Header h = MakeReply(proto::Header());
  h.set_is_reply(false);
  h.set_type(proto::REPLICATE);
  *h.mutable_job() = job_;
  *h.mutable_replica() = ReplicaStateNow();
  h.mutable_replica()->set_seq(seq);
  // The counters travel with the state, so that a shard served from its
  // standby counts on from where its primary was.
  *h.mutable_stats() = Stats();
  return h;
}

void RequestHandler::CountReplication(bool acknowledged) {
  if (acknowledged) {
    stats_.set_replications(stats_.replications() + 1);
  } else {
    stats_.set_unreplicated_releases(stats_.unreplicated_releases() + 1);
  }
}

void RequestHandler::HandleReplicate(const std::string& peer, const Principal& who,
                                     const Message& m, std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  // Only the ps whose standby this one is: ps (index - 1) mod n, for its
  // own shard.
  const int primary =
      num_shards_ < 2 ? -1 : (options_.shard_index + num_shards_ - 1) % num_shards_;
  if (primary < 0 || who.ps_index != primary || h.shard_index() != primary) {
    return Refuse(peer, h, absl::PermissionDeniedError(absl::StrCat(
        "this ps keeps the standby of ps:", primary, "'s shard only")), out);
  }
  if (h.num_shards() != num_shards_) {
    return Refuse(peer, h, absl::InvalidArgumentError("REPLICATE from a cluster of another size"), out);
  }
  if (replica_.held() && h.replica().term() < replica_.header.replica().term()) {
    // The shard moved (it was adopted, and maybe given back) while its old
    // primary was away: that primary's state is older than the one held.
    CountStaleReplication();
    return Refuse(peer, h,
                  absl::FailedPreconditionError(absl::StrCat(
                      "REPLICATE of term ", h.replica().term(),
                      ", older than the replica held (term ", replica_.header.replica().term(),
                      "): shard ", primary, " moved while this primary was away")),
                  out);
  }
  auto floats = CheckState(m, options_.num_workers);
  if (!floats.ok()) return Refuse(peer, h, floats.status(), out);
  auto state = std::make_shared<std::vector<float>>(*floats);
  m.CopyPayloadTo(absl::MakeSpan(*state));
  if (!IsFiniteState(*state, static_cast<int64_t>(h.range_end() - h.range_begin()))) {
    return Refuse(peer, h, absl::InvalidArgumentError("REPLICATE: a state not finite in f32"), out);
  }
  replica_.header = h;
  replica_.state = std::move(state);
  proto::Header ack = MakeReply(h);
  ack.mutable_replica()->set_seq(h.replica().seq());
  ack.mutable_replica()->set_version(h.replica().version());
  out->push_back({peer, std::move(ack), false, false});
}

void RequestHandler::HandleFetchReplica(const std::string& peer, const Message& m,
                                        std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (!replica_.held() || replica_.header.shard_index() != h.shard_index()) {
    return Refuse(peer, h, absl::NotFoundError(absl::StrCat(
        "this ps holds no replica of shard ", h.shard_index())), out);
  }
  Reply reply{peer, MakeReply(h), false, false};
  const proto::Header& r = replica_.header;
  reply.header.set_shard_index(r.shard_index());
  reply.header.set_range_begin(r.range_begin());
  reply.header.set_range_end(r.range_end());
  reply.header.set_plan_fingerprint(r.plan_fingerprint());
  *reply.header.mutable_job() = r.job();
  *reply.header.mutable_replica() = r.replica();
  *reply.header.mutable_stats() = r.stats();
  reply.payload = replica_.state;
  out->push_back(std::move(reply));
}

absl::StatusOr<ShardCheckpoint> RequestHandler::StateFromPayload(const Message& m) const {
  ASSIGN_OR_RETURN(const size_t floats, CheckState(m, options_.num_workers));
  ShardCheckpoint c;
  c.state.resize(floats);
  m.CopyPayloadTo(absl::MakeSpan(c.state));
  const uint64_t n = m.header.range_end() - m.header.range_begin();
  if (!IsFiniteState(c.state, static_cast<int64_t>(n))) {
    return absl::InvalidArgumentError("RESTORE: a state not finite in f32");
  }
  const proto::ReplicaState& r = m.header.replica();
  c.header.set_version(r.version());
  c.header.set_updates(r.updates());
  *c.header.mutable_worker_clocks() = r.worker_clocks();
  if (m.header.has_stats()) *c.header.mutable_stats() = m.header.stats();
  return c;
}

absl::Status RequestHandler::AdoptReplica(const HeldReplica& replica) {
  if (!replica.held()) return absl::NotFoundError("no replica held");
  // The replica becomes a RESTORE from its payload, as the chief would send
  // it: the same checks, the same installation.
  Message m;
  m.header = replica.header;
  m.header.set_type(proto::RESTORE);
  m.header.mutable_sender()->set_type(proto::CHIEF);
  m.header.mutable_sender()->set_index(0);
  m.header.set_rank(0);
  proto::RestoreRequest* restore = m.header.mutable_restore();
  restore->set_from_payload(true);
  restore->set_generation(replica.header.replica().generation());
  restore->set_term(replica.header.replica().term() + 1);
  const std::vector<float>& state = *replica.state;
  m.payload = zmq::message_t(state.data(), state.size() * sizeof(float));
  m.has_payload = true;
  std::vector<Reply> none;  // an empty handler has nothing parked
  RETURN_IF_ERROR(Restore(m, &none));
  LOG(INFO) << "serving shard " << options_.shard_index << " [" << range_.begin << ", "
            << range_.end << ") from the standby's replica: version " << version()
            << ", generation " << generation_ << ", term " << term_;
  return absl::OkStatus();
}

HeldReplica RequestHandler::ReleaseAsReplica(const absl::Status& why, std::vector<Reply>* out) {
  CHECK(initialized());
  AbortParked(why, out);
  HeldReplica r;
  r.header = ReplicateHeader(0);
  r.header.set_is_reply(false);
  r.state = std::make_shared<const std::vector<float>>(StateSnapshot());
  return r;
}

}  // namespace pstrain

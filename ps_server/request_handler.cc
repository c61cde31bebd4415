#include "ps_server/request_handler.h"

#include <algorithm>
#include <cmath>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/lr_schedule.h"
#include "common/optimizer.h"
#include "common/param_groups.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "common/update_mode.h"
#include "common/wire_codec.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

// Before INIT the ps knows no shard size: only INIT may carry more.
constexpr size_t kMaxPayloadBeforeInit = 64 * 1024;

void SetError(const absl::Status& status, proto::Header* h) {
  h->mutable_error()->set_code(static_cast<int>(status.code()));
  h->mutable_error()->set_message(std::string(status.message()));
}

// Requests that change state: a repeat is answered again, never re-applied.
bool IsTracked(proto::MessageType type) {
  switch (type) {
    case proto::REGISTER:
    case proto::INIT:
    case proto::PUSH:
    case proto::PUSH_PULL:
    case proto::EMBEDDING_PUSH:
    case proto::BARRIER:
    case proto::SAVE:
    case proto::RESTORE:
    case proto::SHUTDOWN:
      return true;
    default:
      return false;
  }
}

}  // namespace

proto::Header ErrorReply(const proto::Header& request, const absl::Status& status) {
  proto::Header r;
  r.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  r.set_type(request.type());
  r.set_is_reply(true);
  r.set_rank(request.rank());
  r.set_session(request.session());
  r.set_request_id(request.request_id());
  SetError(status, &r);
  r.set_rejoin(IsRejoin(status));
  r.set_job_finished(IsJobFinished(status));
  return r;
}

absl::StatusOr<std::optional<Message>> AssemblePiece(PieceAssembler& pieces,
                                                     RequestHandler& handler, const Peer& peer,
                                                     Message piece, const PieceJudge& judge,
                                                     const PieceSource& source,
                                                     std::vector<Reply>* out) {
  const proto::Header request = piece.header;
  auto answer_dropped = [&] {
    for (PieceAssembler::Dropped& d : pieces.TakeDropped()) {
      if (!d.peer.empty())
        out->push_back({std::move(d.peer), ErrorReply(d.header, d.why), false, false});
    }
  };
  PieceGrant grant;
  if (IsPiece(request) && request.part() == 0) {
    // A first piece: judged as its whole message before anything is kept.
    // Whatever the peer held before is given up either way.
    absl::StatusOr<size_t> limit = judge(peer, request);
    if (!limit.ok()) {
      pieces.Forget(peer.route);
      answer_dropped();
      out->push_back({peer.route, ErrorReply(request, limit.status()), false, false});
      return limit.status();
    }
    grant = {*limit, peer.user_id.empty() ? peer.route : peer.user_id, source.fd, source.now_us};
  }
  grant.now_us = source.now_us;
  absl::StatusOr<std::optional<Message>> whole = pieces.Take(peer.route, std::move(piece), grant);
  answer_dropped();
  if (!whole.ok()) handler.HandleMalformed(peer, whole.status(), out, request);
  return whole;
}

RequestHandler::RequestHandler(const RequestHandlerOptions& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : RealClock()),
      access_({options.principals, options.num_workers, options.job_id, options.dynamic_workers}),
      num_shards_(options.num_shards),
      workers_(options.num_workers, clock_),
      repeats_(options.num_workers),
      checkpoints_(options.checkpoint_dir, options.shard_index),
      standby_(options.shard_index, options.num_workers) {
  stats_.set_shard_index(options.shard_index);
  stats_.mutable_pushes_by_rank()->Resize(workers_.size(), 0);
}

absl::Span<const float> RequestHandler::params() const {
  CHECK(initialized());
  return policy_->store().params();
}

zmq::message_t RequestHandler::ParamsFrame(bool previous) const {
  CHECK(initialized());
  return ParamsFrame(0, static_cast<size_t>(policy_->store().size()), previous);
}

zmq::message_t RequestHandler::ParamsFrame(size_t begin, size_t count, bool previous) const {
  CHECK(initialized());
  CHECK_LE(begin + count, static_cast<size_t>(policy_->store().size()));
  CHECK(!previous || policy_->HoldsPreviousVersion());
  const ShardStore& store = policy_->store();
  return PinnedFloats::Frame(previous ? store.pinned_previous_state() : store.pinned_state(), begin,
                             count);
}

int64_t RequestHandler::version() const { return initialized() ? policy_->version() : 0; }

int64_t RequestHandler::updates() const { return policy_->store().updates(); }

proto::Header RequestHandler::MakeReply(const proto::Header& request) const {
  proto::Header r;
  r.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  r.set_job_id(access_.job_id());
  r.set_type(request.type());
  r.set_is_reply(true);
  r.mutable_sender()->set_type(proto::PS);
  r.mutable_sender()->set_index(options_.shard_index);
  r.set_rank(request.rank());
  r.set_session(request.session());
  r.set_request_id(request.request_id());
  r.set_plan_fingerprint(fingerprint_);
  r.set_shard_index(options_.shard_index);
  r.set_num_shards(num_shards_);
  r.set_range_begin(static_cast<uint64_t>(range_.begin));
  r.set_range_end(static_cast<uint64_t>(range_.end));
  r.set_encoding(proto::F32);
  r.set_version(version());
  r.set_generation(generation_);
  return r;
}

void RequestHandler::Refuse(const std::string& peer, const proto::Header& request,
                            const absl::Status& status, std::vector<Reply>* out) {
  stats_.set_rejected_requests(stats_.rejected_requests() + 1);
  out->push_back({peer, ErrorReply(request, status), false, /*record=*/true});
}

void RequestHandler::HandleMalformed(const Peer& peer, const absl::Status& error,
                                     std::vector<Reply>* out, const proto::Header& request) {
  stats_.set_malformed_requests(stats_.malformed_requests() + 1);
  out->push_back({peer.route,
                  ErrorReply(request, absl::InvalidArgumentError(
                                          absl::StrCat("malformed message: ", error.message()))),
                  false, false});
}

size_t RequestHandler::MaxPayloadBytes(const proto::Header& h) const {
  // A shard's whole state (parameters, the optimizer's slots, embedding
  // tables), from a ps or the chief, both authenticated: a message is
  // bounded by the socket's limit, a state in parts by what its header
  // says it is (transport/state_parts.h).
  if (h.type() == proto::REPLICATE || (h.type() == proto::RESTORE && h.restore().from_payload())) {
    return SIZE_MAX;
  }
  if (!initialized()) return h.type() == proto::INIT ? SIZE_MAX : kMaxPayloadBeforeInit;
  if (h.type() == proto::EMBEDDING_PULL || h.type() == proto::EMBEDDING_PUSH) {
    return tables_.MaxPayloadBytes();
  }
  // A top-k push of every entry takes 8 bytes per float, anything else 4.
  return MaxEncodedBytes(h.encoding(), static_cast<size_t>(range_.size()));
}

absl::Status RequestHandler::CheckSize(const Message& m) const {
  if (m.payload_bytes() <= MaxPayloadBytes(m.header)) return absl::OkStatus();
  if (!initialized()) {
    return absl::ResourceExhaustedError(absl::StrCat("payload of ", m.payload_bytes(),
                                                     " bytes before INIT (at most ",
                                                     kMaxPayloadBeforeInit, ")"));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("payload of ", m.payload_bytes(), " bytes is larger than the shard"));
}

absl::StatusOr<size_t> RequestHandler::AdmitPieces(const Peer& peer, const proto::Header& first) {
  ASSIGN_OR_RETURN(const Principal who, Identify(peer, first));
  auto refuse = [&](absl::Status s) {
    stats_.set_rejected_requests(stats_.rejected_requests() + 1);
    return s;
  };
  // The smallest the whole message can be: every piece but the last full.
  Message claimed;
  claimed.header = first;
  const uint64_t least =
      static_cast<uint64_t>(std::max<uint32_t>(first.parts(), 1) - 1) * first.piece_bytes() +
      sizeof(float);
  size_t limit = MaxPayloadBytes(first);
  if (initialized() && first.type() == proto::EMBEDDING_PUSH) {
    // The header says exactly how large: its slices' ids and rows.
    absl::StatusOr<size_t> exact = tables_.PushBytes(first.embedding());
    if (!exact.ok()) return refuse(exact.status());
    limit = *exact;
  }
  if (least > limit) {
    stats_.set_oversized_requests(stats_.oversized_requests() + 1);
    return refuse(absl::ResourceExhaustedError(absl::StrCat(
        "a message of ", first.parts(), " pieces of ", first.piece_bytes(), " bytes (at least ",
        least, " bytes) is larger than ",
        initialized() ? "the shard" : absl::StrCat("allowed before INIT (", limit, " bytes)"))));
  }
  if (!failure_.ok()) return refuse(failure_);
  if (who.rank >= 0 && repeats_.retired(who.rank, first.session())) {
    stats_.set_retired_session_requests(stats_.retired_session_requests() + 1);
    return refuse(absl::FailedPreconditionError(
        absl::StrCat("rank ", who.rank,
                     " has a newer client on this ps: this client's requests are not "
                     "applied any more")));
  }
  // Only PUSH, PUSH_PULL, REDUCE and EMBEDDING_PUSH come in pieces
  // (PieceAssembler::Take), and only a worker may send them (Identify).
  if (absl::Status s = CheckWorkerRequest(claimed); !s.ok()) return refuse(s);
  if (absl::Status s = CheckPayload(claimed, /*want_payload=*/true); !s.ok()) return refuse(s);
  return limit;
}

absl::Status RequestHandler::CheckWorkerRequest(const Message& m) const {
  const proto::Header& h = m.header;
  if (!initialized()) {
    // A worker that trains before INIT is one that joined before this ps
    // (re)started: it registers again and waits for the chief to restore.
    return RejoinError("the ps has not been initialised by the chief yet (restarted?)");
  }
  if (!IsWorkerSender(h.sender())) {
    return absl::PermissionDeniedError("only chief and worker tasks may train");
  }
  if (h.rank() < 0 || h.rank() >= job_.num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", h.rank(), " is not a worker rank of this job"));
  }
  if (h.plan_fingerprint() != fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan fingerprint ", absl::Hex(h.plan_fingerprint()), " does not match the chief's: the "
        "worker was built with another model, ps count or shard strategy than the chief"));
  }
  return absl::OkStatus();
}

absl::Status RequestHandler::CheckPayload(const Message& m, bool want_payload) const {
  const proto::Header& h = m.header;
  if (h.range_begin() != static_cast<uint64_t>(range_.begin) ||
      h.range_end() != static_cast<uint64_t>(range_.end)) {
    return absl::InvalidArgumentError(absl::StrCat("range [", h.range_begin(), ", ", h.range_end(),
                                                   ") is not this shard's range"));
  }
  // A gradient's bytes are checked as they are decoded (HandlePush).
  if (!want_payload && m.has_payload) return absl::InvalidArgumentError("unexpected payload");
  return absl::OkStatus();
}

void RequestHandler::Handle(const Peer& peer, const Message& request, std::vector<Reply>* out) {
  const size_t first = out->size();
  Dispatch(peer, request, out);
  SettleEmbeddings();
  RecordReplies(*out, first);
  for (size_t i = first; i < out->size(); ++i) (*out)[i].header.set_ps_instance(options_.instance);
}

absl::StatusOr<Principal> RequestHandler::Identify(const Peer& peer, const proto::Header& h) {
  AccessControl::Refusal refusal;
  absl::StatusOr<Principal> who = access_.Check(peer, h, &refusal);
  if (!who.ok()) {
    stats_.set_rejected_requests(stats_.rejected_requests() + 1);
    if (refusal.unauthorized) {
      stats_.set_unauthorized_requests(stats_.unauthorized_requests() + 1);
    }
  }
  return who;
}

absl::Status RequestHandler::Admit(const Peer& peer, const proto::Header& h) {
  return Identify(peer, h).status();
}

void RequestHandler::Dispatch(const Peer& peer, const Message& request, std::vector<Reply>* out) {
  const proto::Header& h = request.header;
  auto refuse = [&](const absl::Status& s) {
    stats_.set_rejected_requests(stats_.rejected_requests() + 1);
    out->push_back({peer.route, ErrorReply(h, s), false, /*record=*/false});
  };
  auto who = Identify(peer, h);
  if (!who.ok()) {
    out->push_back({peer.route, ErrorReply(h, who.status()), false, /*record=*/false});
    return;
  }
  if (absl::Status s = CheckSize(request); !s.ok()) {
    stats_.set_oversized_requests(stats_.oversized_requests() + 1);
    return refuse(s);
  }
  // A client the rank has left behind (ps_server/request_repeats.h) says
  // nothing of the rank's liveness or where its replies go.
  if (who->rank >= 0 && !repeats_.retired(who->rank, h.session())) {
    workers_.NoteAlive(who->rank);
    if (h.type() != proto::HEARTBEAT) workers_.NoteRoute(who->rank, peer.route);
    if (workers_.dead(who->rank)) SetDead(who->rank, false, out);
  }
  if (!failure_.ok() && h.type() != proto::STATS && h.type() != proto::SHUTDOWN) {
    return refuse(failure_);
  }
  if (who->rank >= 0 && IsTracked(h.type()) && AnswerRepeat(peer, h, out)) return;
  Route(peer, *who, request, out);
}

// An admitted request to the handler of its type.
void RequestHandler::Route(const Peer& peer, const Principal& who, const Message& request,
                           std::vector<Reply>* out) {
  const proto::Header& h = request.header;
  switch (h.type()) {
    case proto::HEARTBEAT:
    case proto::STATS: {
      Reply reply{peer.route, MakeReply(h), false};
      if (h.type() == proto::STATS) *reply.header.mutable_stats() = Stats();
      out->push_back(std::move(reply));
      return;
    }
    case proto::REGISTER:
      return HandleRegister(peer.route, request, out);
    case proto::INIT:
      return HandleInit(peer.route, request, out);
    case proto::PUSH:
      return HandlePush(peer.route, request, /*then_pull=*/false, out);
    case proto::PUSH_PULL:
      return HandlePush(peer.route, request, /*then_pull=*/true, out);
    case proto::REDUCE:
      return HandleReduce(peer.route, request, out);
    case proto::OPTIMIZER_STATE:
      return HandleOptimizerState(peer.route, request, out);
    case proto::PULL:
      return HandlePull(peer.route, request, out);
    case proto::EMBEDDING_PULL:
      return HandleEmbeddingPull(peer.route, request, out);
    case proto::EMBEDDING_PUSH:
      return HandleEmbeddingPush(peer.route, request, out);
    case proto::BARRIER:
      return HandleBarrier(peer.route, request, out);
    case proto::SHUTDOWN:
      return HandleShutdown(peer.route, request, out);
    case proto::SAVE:
      return HandleSave(peer.route, request, out);
    case proto::RESTORE:
      return HandleRestore(peer.route, request, out);
    case proto::REPLICATE:
      return HandleReplicate(peer.route, who, request, out);
    case proto::FETCH_REPLICA:
      return HandleFetchReplica(peer.route, request, out);
    default:  // HEARTBEAT ... SHUTDOWN are all above; CheckEnvelope refused the rest
      stats_.set_rejected_requests(stats_.rejected_requests() + 1);
      out->push_back({peer.route,
                      ErrorReply(h, absl::InvalidArgumentError(
                                        absl::StrCat("unknown message type ", h.type()))),
                      false, /*record=*/false});
      return;
  }
}

bool RequestHandler::AnswerRepeat(const Peer& peer, const proto::Header& h,
                                  std::vector<Reply>* out) {
  const RecordedReply* recorded = nullptr;
  const RequestRepeats::Seen seen =
      repeats_.Classify(h.rank(), h.session(), h.request_id(), &recorded);
  auto refuse = [&](const absl::Status& why) {
    stats_.set_rejected_requests(stats_.rejected_requests() + 1);
    out->push_back({peer.route, ErrorReply(h, why), false, false});
    return true;
  };
  switch (seen) {
    case RequestRepeats::Seen::kNew:
      return false;
    case RequestRepeats::Seen::kTooManySessions:
      return refuse(absl::ResourceExhaustedError(
          absl::StrCat("rank ", h.rank(), " has used ", RequestRepeats::kMaxSessions,
                       " client sessions on this ps; no more are accepted")));
    case RequestRepeats::Seen::kCompleted: {
      stats_.set_duplicate_requests(stats_.duplicate_requests() + 1);
      Reply again{peer.route, recorded->header, recorded->with_params, false};
      if (again.with_params) again.header.set_version(version());
      out->push_back(std::move(again));
      return true;
    }
    case RequestRepeats::Seen::kRepeat:
      stats_.set_duplicate_requests(stats_.duplicate_requests() + 1);
      if (parked_.Reroute(h, peer.route)) return true;
      return refuse(
          absl::AlreadyExistsError(absl::StrCat("request ", h.request_id(), " of rank ", h.rank(),
                                                " was handled already; it is not applied again")));
    case RequestRepeats::Seen::kRetired:
      stats_.set_retired_session_requests(stats_.retired_session_requests() + 1);
      return refuse(absl::FailedPreconditionError(absl::StrCat(
          "rank ", h.rank(),
          " has a newer client on this ps (a restarted worker, or a second "
          "process started as the same task): this client's requests are not applied any more")));
  }
  return false;
}

void RequestHandler::RecordReplies(const std::vector<Reply>& out, size_t from) {
  for (size_t i = from; i < out.size(); ++i) {
    const Reply& r = out[i];
    const int rank = r.header.rank();
    if (!r.record || !IsTracked(r.header.type()) || rank < 0 || rank >= workers_.size()) continue;
    repeats_.Record(rank, r.header.session(), r.header.request_id(), r.header, r.with_params);
  }
}

void RequestHandler::MarkUnheardAbsent() {
  for (int rank = 0; rank < workers_.size(); ++rank) {
    if (workers_.heard_from(rank)) continue;
    workers_.set_absent(rank, true);
    workers_.set_dead(rank, true);
    bool refused = false;
    policy_->SetActive(rank, false, &refused);
  }
}

void RequestHandler::RecordPush(int rank, const PushOutcome& outcome) {
  stats_.set_gradients_received(stats_.gradients_received() + 1);
  stats_.set_pushes_by_rank(rank, stats_.pushes_by_rank(rank) + 1);
  switch (outcome.result) {
    case PushResult::kStale:
      stats_.set_stale_gradients_dropped(stats_.stale_gradients_dropped() + 1);
      return;
    case PushResult::kLate:
      stats_.set_late_gradients_dropped(stats_.late_gradients_dropped() + 1);
      return;
    case PushResult::kDuplicate:
      stats_.set_duplicate_requests(stats_.duplicate_requests() + 1);
      return;
    case PushResult::kEmpty:
    case PushResult::kRefused:
    case PushResult::kNonFiniteGradient:  // refused before it is recorded
      return;
    case PushResult::kAccumulated:
    case PushResult::kApplied:
      break;
  }
  stats_.set_gradients_applied(stats_.gradients_applied() + 1);
  // Not only when empty: counters restored from a checkpoint or a standby
  // come trimmed (Stats), and a bucket past their end must not be written.
  if (stats_.staleness_histogram_size() < kStalenessBuckets) {
    stats_.mutable_staleness_histogram()->Resize(kStalenessBuckets, 0);
  }
  const int bucket = static_cast<int>(std::min<int64_t>(outcome.staleness, kStalenessBuckets - 1));
  stats_.set_staleness_histogram(bucket, stats_.staleness_histogram(bucket) + 1);
  stats_.set_staleness_sum(stats_.staleness_sum() + static_cast<double>(outcome.staleness));
  stats_.set_max_staleness(std::max(stats_.max_staleness(), outcome.staleness));
}

void RequestHandler::CountEncoding(proto::Encoding encoding) {
  auto* counts = stats_.mutable_pushes_by_encoding();
  if (counts->size() <= encoding) counts->Resize(encoding + 1, 0);
  counts->Set(encoding, counts->Get(encoding) + 1);
}

absl::StatusOr<absl::Span<const float>> RequestHandler::PushedGradient(const Message& m) {
  const proto::Header& h = m.header;
  // F32 is used where ZeroMQ received it (a copy of a 4 MiB gradient was a
  // tenth of a push's time); the other encodings, and a payload of the
  // wrong size (refused, saying why), go through the decoder.
  if (h.encoding() == proto::F32 && h.topk_count() == 0 &&
      m.payload_bytes() == static_cast<size_t>(range_.size()) * sizeof(float)) {
    return m.PayloadFloats(&scratch_);
  }
  scratch_.resize(static_cast<size_t>(range_.size()));
  RETURN_IF_ERROR(DecodeGradient(h.encoding(), h.topk_count(), m.PayloadBytes(),
                                 absl::MakeSpan(scratch_)));
  return absl::Span<const float>(scratch_);
}

absl::Status RequestHandler::ReadStepSettings(const proto::Header& h,
                                              std::optional<StepOptions>* settings) const {
  settings->reset();
  if (!h.has_step_settings()) return absl::OkStatus();
  ASSIGN_OR_RETURN(*settings, StepOptionsFrom(h.step_settings(), job_, policy_->store().config()));
  return absl::OkStatus();
}

void RequestHandler::HandlePush(const std::string& peer, const Message& m, bool then_pull,
                                std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  // Async and SSP: the rank's rows of this step (its EMBEDDING_PUSH, just
  // before on this connection) go with this gradient: applied with it,
  // dropped on any way out that does not apply it.
  bool rows_go = false;
  absl::Cleanup settle_rows = [&] {
    if (job_.mode() == proto::SYNC || tables_.empty()) return;
    if (rows_go) {
      tables_.ApplyPending(h.rank());
    } else {
      tables_.DropPending(h.rank());
    }
  };
  if (absl::Status s = CheckPayload(m, /*want_payload=*/true); !s.ok()) return Refuse(peer, h, s, out);
  if (h.num_examples() < 0 || h.num_examples() > kMaxStepExamples || h.step() < 0 ||
      h.version() < 0 || h.step() > kMaxStepOrVersion || h.version() > kMaxStepOrVersion) {
    return Refuse(peer, h, absl::InvalidArgumentError("step, version or num_examples out of range"), out);
  }
  std::optional<StepOptions> settings;
  if (absl::Status s = ReadStepSettings(h, &settings); !s.ok()) return Refuse(peer, h, s, out);
  absl::StatusOr<absl::Span<const float>> grad = PushedGradient(m);
  if (!grad.ok()) return Refuse(peer, h, grad.status(), out);
  CountEncoding(h.encoding());
  const auto refuse_nonfinite = [&] {
    stats_.set_nonfinite_gradients_dropped(stats_.nonfinite_gradients_dropped() + 1);
    Refuse(peer, h, absl::InvalidArgumentError(
        "gradient is not finite in f32 (a NaN or infinity, or a norm that overflows: training "
        "diverged?); dropped"), out);
  };
  if (!policy_->ChecksGradient() && !IsFiniteInF32(*grad, options_.update_pool)) {
    return refuse_nonfinite();
  }
  const int64_t version_before = policy_->version();
  auto outcome = policy_->Push(h.rank(), h.step(), h.version(), *grad, h.num_examples(),
                               settings.has_value() ? &*settings : nullptr);
  if (!outcome.ok()) return Refuse(peer, h, outcome.status(), out);
  if (outcome->result == PushResult::kNonFiniteGradient) return refuse_nonfinite();
  if (outcome->update_refused) {
    stats_.set_refused_updates(stats_.refused_updates() + 1);
    LOG_EVERY_N(WARNING, 100) << "an update would have made the shard non-finite in f32 and "
                                 "was not applied (" << stats_.refused_updates() << " so far)";
  }
  if (outcome->result == PushResult::kRefused) {
    return Refuse(peer, h, absl::InvalidArgumentError(
        "the update this gradient leads to would make the parameters non-finite in f32; "
        "not applied"), out);
  }
  RecordPush(h.rank(), *outcome);
  if (outcome->result == PushResult::kAccumulated || outcome->result == PushResult::kApplied) {
    tables_.Confirm(h.rank(), h.version());  // its rows count with it (sync)
    rows_go = true;                          // (async, ssp)
    // Sync: the version's averages no longer wait for this rank.
    if (reducer_ != nullptr && reducer_->Pushed(h.rank(), h.version())) AnswerReduce(out);
  }
  const bool dropped = outcome->result == PushResult::kStale || outcome->result == PushResult::kLate;
  Parked parked{peer, MakeReply(h)};
  parked.header.set_dropped(dropped);
  parked.header.set_staleness(outcome->staleness);
  if (!then_pull) {
    out->push_back({peer, parked.header, false, /*record=*/true});
  } else {
    // The parameters this push leads to: in sync, the next version (or the
    // current one if the push was dropped); in async, whatever is current.
    const int64_t want = dropped ? version_before : h.version() + 1;
    const bool sync = job_.mode() == proto::SYNC;
    ServeOrPark(std::move(parked), {h.rank(), h.step() + 1, sync ? want : 0}, out);
  }
  if (policy_->version() != version_before || job_.mode() == proto::SSP) ReleaseParkedPulls(out);
}

void RequestHandler::HandleReduce(const std::string& peer, const Message& m,
                                  std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  if (reducer_ == nullptr || job_.backup_workers() > 0) {
    return Refuse(peer, h, absl::FailedPreconditionError(
        "REDUCE (the workers' averaged gradient before step) is for sync jobs without backup "
        "workers"), out);
  }
  if (absl::Status s = CheckPayload(m, /*want_payload=*/true); !s.ok()) return Refuse(peer, h, s, out);
  if (h.encoding() != proto::F32 ||
      m.payload_bytes() != static_cast<size_t>(range_.size()) * sizeof(float)) {
    return Refuse(peer, h, absl::InvalidArgumentError(
        "REDUCE: the payload must be the shard's gradient in f32"), out);
  }
  if (h.num_examples() < 0 || h.num_examples() > kMaxStepExamples || h.version() < 0 ||
      h.version() > policy_->version()) {
    return Refuse(peer, h, absl::InvalidArgumentError(
        "REDUCE: num_examples out of range, or a version from the future"), out);
  }
  absl::StatusOr<std::vector<int32_t>> absent = AbsentTensors(h.step_settings(), job_);
  if (!absent.ok()) return Refuse(peer, h, absent.status(), out);
  // Not checked for finiteness: nothing is applied, and a script's
  // GradScaler must see an inf or NaN of any worker to skip the step.
  const absl::Span<const float> grad = m.PayloadFloats(&scratch_);
  // A version the job has passed: the worker is behind (the others went
  // on without it); it learns so from its push, which is dropped as stale.
  Parked reply{peer, MakeReply(h)};
  if (h.version() < policy_->version() ||
      reducer_->Add(h.rank(), h.version(), h.reduce_round(), grad, h.num_examples(), *absent,
                    reply) == GradientReducer::Added::kStale) {
    reply.header.set_dropped(true);
    out->push_back({peer, std::move(reply.header), false, false});
  }
  AnswerReduce(out);
}

void RequestHandler::AnswerReduce(std::vector<Reply>* out) {
  if (reducer_ == nullptr) return;
  for (Parked& p : reducer_->TakeOvertaken()) {
    p.header.set_dropped(true);
    out->push_back({std::move(p.peer), std::move(p.header), false, false});
  }
  if (!reducer_->complete()) return;
  for (Parked& p : reducer_->TakeAnswers()) {
    Reply r{std::move(p.peer), std::move(p.header), false, false};
    *r.header.mutable_step_settings()->mutable_absent() = {reducer_->absent().begin(),
                                                            reducer_->absent().end()};
    r.payload = reducer_->average();
    out->push_back(std::move(r));
  }
}

void RequestHandler::HandleOptimizerState(const std::string& peer, const Message& m,
                                          std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  if (absl::Status s = CheckPayload(m, /*want_payload=*/false); !s.ok()) return Refuse(peer, h, s, out);
  const ShardStore& store = policy_->store();
  Reply reply{peer, MakeReply(h), false, false};
  const std::vector<int64_t>& counts = store.segment_updates();
  *reply.header.mutable_segment_updates() = {counts.begin(), counts.end()};
  const absl::Span<const float> state = store.state();
  reply.payload = std::make_shared<const std::vector<float>>(
      state.begin() + store.size(), state.end());
  out->push_back(std::move(reply));
}

void RequestHandler::HandlePull(const std::string& peer, const Message& m, std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  if (absl::Status s = CheckPayload(m, /*want_payload=*/false); !s.ok()) return Refuse(peer, h, s, out);
  if (h.step() < 0 || h.version() < 0 || h.step() > kMaxStepOrVersion ||
      h.version() > kMaxStepOrVersion) {
    return Refuse(peer, h, absl::InvalidArgumentError("step or version out of range"), out);
  }
  // A worker waits at most for the version its own push completes.
  if (h.version() > policy_->version() + 1) {
    return Refuse(peer, h, absl::InvalidArgumentError(absl::StrCat(
        "PULL for version ", h.version(), ": at most the next version can be waited for")), out);
  }
  policy_->NoteSteps(h.rank(), h.step());
  if (h.exact_version() && h.version() == policy_->version() - 1 &&
      policy_->HoldsPreviousVersion()) {
    return ServePrevious(peer, h, out);
  }
  ServeOrPark({peer, MakeReply(h)}, {h.rank(), h.step(), h.version()}, out);
  // SSP: this rank's clock may have been the slowest.
  if (job_.mode() == proto::SSP) ReleaseParkedPulls(out);
}

void RequestHandler::ServePrevious(const std::string& peer, const proto::Header& h,
                                   std::vector<Reply>* out) {
  LOG(INFO) << "rank " << h.rank() << " pulls version " << h.version()
            << " at version " << policy_->version()
            << ": the previous version's parameters (a restarted worker repeating the step "
               "its predecessor pushed to some shards only)";
  stats_.set_pulls_served(stats_.pulls_served() + 1);
  Reply reply{peer, MakeReply(h), true, /*record=*/true};
  reply.previous_params = true;
  reply.header.set_version(h.version());
  reply.header.set_min_clock(policy_->MinClock());
  out->push_back(std::move(reply));
}

void RequestHandler::ServeOrPark(Parked parked, const PullRequest& pull, std::vector<Reply>* out) {
  if (Servable(pull)) {
    stats_.set_pulls_served(stats_.pulls_served() + 1);
    parked.header.set_version(policy_->version());
    parked.header.set_min_clock(policy_->MinClock());
    out->push_back({std::move(parked.peer), std::move(parked.header), true, /*record=*/true});
    return;
  }
  if (absl::Status s = parked_.ParkPull(parked, pull, clock_->NowMicros()); !s.ok()) {
    stats_.set_rejected_requests(stats_.rejected_requests() + 1);
    out->push_back({std::move(parked.peer), ErrorReply(parked.header, s), false, /*record=*/true});
    return;
  }
  stats_.set_pulls_parked(stats_.pulls_parked() + 1);
  if (job_.mode() == proto::SSP) stats_.set_ssp_waits(stats_.ssp_waits() + 1);
}

bool RequestHandler::Servable(const PullRequest& pull) const {
  // A rank past its final report computes no more steps: SSP's bound,
  // which holds back a worker's next step, does not hold back its pull of
  // the final parameters (the other ranks may have reported too, and no
  // clock it waits for would move).
  if (job_.mode() == proto::SSP && reported_done(pull.rank)) return true;
  return policy_->CanServe(pull);
}

void RequestHandler::ReleaseParkedPulls(std::vector<Reply>* out) {
  const int64_t now = clock_->NowMicros();
  for (ParkedPull& p : parked_.TakeServable(
           [this](const PullRequest& pull) { return Servable(pull); })) {
    stats_.set_pulls_served(stats_.pulls_served() + 1);
    p.parked.header.set_version(policy_->version());
    p.parked.header.set_min_clock(policy_->MinClock());
    p.parked.header.set_parked_us(std::max<int64_t>(0, now - p.since_us));
    out->push_back({std::move(p.parked.peer), std::move(p.parked.header), true, /*record=*/true});
  }
}

void RequestHandler::AbortParked(const absl::Status& status, std::vector<Reply>* out) {
  std::vector<Parked> all = parked_.TakeAll();
  if (reducer_ != nullptr) {
    for (Parked& p : reducer_->TakeAll()) all.push_back(std::move(p));
  }
  for (Parked& p : all) {
    out->push_back({std::move(p.peer), ErrorReply(p.header, status), false, false});
  }
}

void RequestHandler::Fail(const absl::Status& status, std::vector<Reply>* out) {
  if (!failure_.ok()) return;
  failure_ = status;
  AbortParked(status, out);
}

void RequestHandler::CountBytes(int64_t received, int64_t sent) {
  stats_.set_bytes_received(stats_.bytes_received() + received);
  stats_.set_bytes_sent(stats_.bytes_sent() + sent);
}

proto::ShardStats RequestHandler::Stats() const {
  proto::ShardStats s = stats_;
  s.set_range_begin(static_cast<uint64_t>(range_.begin));
  s.set_range_end(static_cast<uint64_t>(range_.end));
  s.set_version(version());
  s.set_updates_applied(initialized() ? policy_->store().updates() : 0);
  s.set_unordered_sums(unordered_sums_before_ + (initialized() ? policy_->unordered_sums() : 0));
  s.set_initialized(initialized());
  s.set_generation(generation_);
  const HeldReplica& replica = standby_.held();
  s.set_replica_shard(replica.held() ? replica.header.shard_index() : -1);
  s.set_replica_version(replica.held() ? replica.header.replica().version() : -1);
  s.set_replica_term(replica.held() ? replica.header.replica().term() : -1);
  s.set_term(term_);
  // Trim trailing empty histogram buckets to keep the reply small.
  while (s.staleness_histogram_size() > 0 &&
         s.staleness_histogram(s.staleness_histogram_size() - 1) == 0) {
    s.mutable_staleness_histogram()->RemoveLast();
  }
  for (const auto& [rank, report] : reports_) *s.add_workers() = report;
  for (proto::EmbeddingTableStats& t : tables_.Stats()) *s.add_tables() = std::move(t);
  return s;
}

}  // namespace pstrain

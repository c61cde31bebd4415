#include "ps_server/request_handler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr int kStalenessBuckets = 256;  // last bucket counts ">= 255"
constexpr int kMaxExamplesPerPush = 1 << 24;
// Bounds on what peers can make a shard hold: a worker has at most one
// request in flight per shard, so these leave ample room for honest ones.
constexpr int kMaxParkedPullsPerRank = 8;
constexpr size_t kMaxParkedRegisters = 4096;
constexpr size_t kMaxOpenBarriers = 16;

void SetError(const absl::Status& status, proto::Header* h) {
  h->mutable_error()->set_code(static_cast<int>(status.code()));
  h->mutable_error()->set_message(std::string(status.message()));
}

bool IsWorkerSender(const proto::TaskId& t) {
  return t.type() == proto::CHIEF || t.type() == proto::WORKER;
}

// Index of the first non-finite value, or -1.
int64_t FirstNonFinite(absl::Span<const float> v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

absl::Status ValidateJob(const proto::JobConfig& job) {
  if (job.num_workers() < 1 || job.num_workers() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("INIT: num_workers=", job.num_workers()));
  }
  if (!(job.learning_rate() > 0) || !std::isfinite(job.learning_rate())) {
    return absl::InvalidArgumentError(absl::StrCat("INIT: learning_rate=", job.learning_rate()));
  }
  return ValidateOptimizerConfig({job.momentum(), job.nesterov(), job.weight_decay()});
}

}  // namespace

RequestHandler::RequestHandler(const RequestHandlerOptions& options) : options_(options) {
  stats_.set_shard_index(options.shard_index);
}

absl::Span<const float> RequestHandler::params() const {
  CHECK(initialized());
  return policy_->store().params();
}

int64_t RequestHandler::version() const { return initialized() ? policy_->version() : 0; }

proto::Header RequestHandler::MakeReply(const proto::Header& request) const {
  proto::Header r;
  r.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  r.set_job_id(options_.job_id);
  r.set_type(request.type());
  r.set_is_reply(true);
  r.mutable_sender()->set_type(proto::PS);
  r.mutable_sender()->set_index(options_.shard_index);
  r.set_rank(request.rank());
  r.set_request_id(request.request_id());
  r.set_plan_fingerprint(fingerprint_);
  r.set_shard_index(options_.shard_index);
  r.set_num_shards(options_.num_shards);
  r.set_range_begin(static_cast<uint64_t>(range_.begin));
  r.set_range_end(static_cast<uint64_t>(range_.end));
  r.set_encoding(proto::F32);
  r.set_version(version());
  return r;
}

void RequestHandler::Refuse(const std::string& peer, const proto::Header& request,
                            const absl::Status& status, std::vector<Reply>* out) {
  stats_.set_rejected_requests(stats_.rejected_requests() + 1);
  Reply reply{peer, MakeReply(request), false};
  SetError(status, &reply.header);
  out->push_back(std::move(reply));
}

void RequestHandler::HandleMalformed(const std::string& peer, const absl::Status& error,
                                     std::vector<Reply>* out) {
  stats_.set_malformed_requests(stats_.malformed_requests() + 1);
  Reply reply{peer, MakeReply(proto::Header()), false};
  SetError(absl::InvalidArgumentError(absl::StrCat("malformed message: ", error.message())),
           &reply.header);
  out->push_back(std::move(reply));
}

absl::Status RequestHandler::CheckEnvelope(const proto::Header& h) const {
  if (h.is_reply()) return absl::InvalidArgumentError("a reply sent to a ps");
  if (h.protocol_version() != proto::PROTOCOL_VERSION_CURRENT) {
    return absl::FailedPreconditionError(
        absl::StrCat("protocol version ", h.protocol_version(), "; this ps speaks version ",
                     proto::PROTOCOL_VERSION_CURRENT));
  }
  if (h.job_id() != options_.job_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request for job ", absl::Hex(h.job_id()), " but this ps serves job ",
        absl::Hex(options_.job_id), " (started from another cluster spec?)"));
  }
  return absl::OkStatus();
}

absl::Status RequestHandler::CheckWorkerRequest(const Message& m) const {
  const proto::Header& h = m.header;
  if (!initialized()) {
    return absl::FailedPreconditionError("the ps has not been initialised by the chief yet");
  }
  if (!IsWorkerSender(h.sender())) {
    return absl::PermissionDeniedError("only chief and worker tasks may train");
  }
  if (h.rank() < 0 || h.rank() >= job_.num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", h.rank(), " outside [0, ", job_.num_workers(), ")"));
  }
  if (h.plan_fingerprint() != fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan fingerprint ", absl::Hex(h.plan_fingerprint()), " does not match this job's ",
        absl::Hex(fingerprint_), ": the worker was built with another model, ps count or shard "
        "strategy than the chief"));
  }
  return absl::OkStatus();
}

absl::Status RequestHandler::CheckPayload(const Message& m, bool want_payload) const {
  const proto::Header& h = m.header;
  if (h.range_begin() != static_cast<uint64_t>(range_.begin) ||
      h.range_end() != static_cast<uint64_t>(range_.end)) {
    return absl::InvalidArgumentError(absl::StrCat("range [", h.range_begin(), ", ", h.range_end(),
                                                   ") but this shard holds [", range_.begin, ", ",
                                                   range_.end, ")"));
  }
  if (!want_payload) {
    if (m.has_payload) return absl::InvalidArgumentError("unexpected payload");
    return absl::OkStatus();
  }
  if (h.encoding() != proto::F32) {
    return absl::UnimplementedError(absl::StrCat("payload encoding ", h.encoding(), " (only F32)"));
  }
  if (m.payload_floats() != static_cast<size_t>(range_.size()) ||
      m.payload_bytes() != m.payload_floats() * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat("payload of ", m.payload_bytes(),
                                                   " bytes for a range of ", range_.size(),
                                                   " floats"));
  }
  return absl::OkStatus();
}

void RequestHandler::Handle(const std::string& peer, const Message& request,
                            std::vector<Reply>* out) {
  const proto::Header& h = request.header;
  if (absl::Status s = CheckEnvelope(h); !s.ok()) return Refuse(peer, h, s, out);
  if (!failure_.ok() && h.type() != proto::STATS && h.type() != proto::SHUTDOWN) {
    return Refuse(peer, h, failure_, out);
  }
  switch (h.type()) {
    case proto::HEARTBEAT:
    case proto::STATS: {
      Reply reply{peer, MakeReply(h), false};
      if (h.type() == proto::STATS) *reply.header.mutable_stats() = Stats();
      out->push_back(std::move(reply));
      return;
    }
    case proto::REGISTER:
      return HandleRegister(peer, request, out);
    case proto::INIT:
      return HandleInit(peer, request, out);
    case proto::PUSH:
      return HandlePush(peer, request, /*then_pull=*/false, out);
    case proto::PUSH_PULL:
      return HandlePush(peer, request, /*then_pull=*/true, out);
    case proto::PULL:
      return HandlePull(peer, request, out);
    case proto::BARRIER:
      return HandleBarrier(peer, request, out);
    case proto::SHUTDOWN:
      return HandleShutdown(peer, request, out);
    case proto::SAVE:
      return Refuse(peer, h, absl::UnimplementedError("SAVE: checkpoints are not supported yet"), out);
    default:
      return Refuse(peer, h, absl::InvalidArgumentError(absl::StrCat("unknown message type ", h.type())),
                    out);
  }
}

void RequestHandler::HandleRegister(const std::string& peer, const Message& m,
                                    std::vector<Reply>* out) {
  if (!IsWorkerSender(m.header.sender())) {
    return Refuse(peer, m.header, absl::PermissionDeniedError("REGISTER from a non-worker"), out);
  }
  if (!initialized()) {
    if (parked_registers_.size() >= kMaxParkedRegisters) {
      return Refuse(peer, m.header, absl::ResourceExhaustedError(
          "too many REGISTER requests waiting for the chief's INIT"), out);
    }
    // Answered when the chief's INIT arrives.
    parked_registers_.push_back({peer, m.header});
    return;
  }
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, m.header, s, out);
  registered_[m.header.rank()] = true;
  Reply reply{peer, MakeReply(m.header), false};
  *reply.header.mutable_job() = job_;
  out->push_back(std::move(reply));
}

void RequestHandler::HandleInit(const std::string& peer, const Message& m,
                                std::vector<Reply>* out) {
  if (absl::Status s = Initialize(m); !s.ok()) return Refuse(peer, m.header, s, out);
  registered_[0] = true;
  LOG(INFO) << "initialised by the chief: shard " << options_.shard_index << " ["
            << range_.begin << ", " << range_.end << ") " << range_.size() << " floats, mode "
            << proto::UpdateMode_Name(job_.mode()) << ", " << job_.num_workers()
            << " workers, lr " << job_.learning_rate() << ", momentum " << job_.momentum();
  Reply reply{peer, MakeReply(m.header), false};
  *reply.header.mutable_job() = job_;
  out->push_back(std::move(reply));
  std::vector<ParkedRegister> waiting = std::move(parked_registers_);
  parked_registers_.clear();
  for (ParkedRegister& p : waiting) {
    Message reg;
    reg.header = std::move(p.request);
    HandleRegister(p.peer, reg, out);
  }
}

absl::Status RequestHandler::Initialize(const Message& m) {
  const proto::Header& h = m.header;
  if (initialized()) return absl::AlreadyExistsError("the ps is already initialised");
  if (h.sender().type() != proto::CHIEF && h.sender().type() != proto::WORKER) {
    return absl::PermissionDeniedError("INIT from a non-worker");
  }
  if (h.rank() != 0) return absl::PermissionDeniedError("only the chief (rank 0) may INIT");
  if (h.shard_index() != options_.shard_index || h.num_shards() != options_.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("INIT for shard ", h.shard_index(), " of ", h.num_shards(), " sent to ps ",
                     options_.shard_index, " of ", options_.num_shards));
  }
  if (h.range_end() <= h.range_begin() || h.range_end() > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("INIT: bad range [", h.range_begin(), ", ", h.range_end(), ")"));
  }
  RETURN_IF_ERROR(ValidateJob(h.job()));
  const ShardRange range{static_cast<int64_t>(h.range_begin()), static_cast<int64_t>(h.range_end())};
  if (m.payload_floats() != static_cast<size_t>(range.size()) || h.encoding() != proto::F32) {
    return absl::InvalidArgumentError(absl::StrCat("INIT: payload of ", m.payload_bytes(),
                                                   " bytes for ", range.size(), " floats"));
  }
  std::vector<float> initial(range.size());
  m.CopyPayloadTo(absl::MakeSpan(initial));
  if (const int64_t bad = FirstNonFinite(initial); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("INIT: non-finite value at ", bad));
  }
  auto store = std::make_unique<ShardStore>(
      std::move(initial), OptimizerConfig{h.job().momentum(), h.job().nesterov(), h.job().weight_decay()});
  ASSIGN_OR_RETURN(policy_, CreateUpdatePolicy(h.job(), std::move(store)));
  job_ = h.job();
  fingerprint_ = h.plan_fingerprint();
  range_ = range;
  registered_.assign(job_.num_workers(), false);
  stats_.mutable_pushes_by_rank()->Resize(job_.num_workers(), 0);
  return absl::OkStatus();
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
    case PushResult::kEmpty:
      return;
    case PushResult::kAccumulated:
    case PushResult::kApplied:
      break;
  }
  stats_.set_gradients_applied(stats_.gradients_applied() + 1);
  if (stats_.staleness_histogram_size() == 0) stats_.mutable_staleness_histogram()->Resize(kStalenessBuckets, 0);
  const int bucket = static_cast<int>(std::min<int64_t>(outcome.staleness, kStalenessBuckets - 1));
  stats_.set_staleness_histogram(bucket, stats_.staleness_histogram(bucket) + 1);
  stats_.set_staleness_sum(stats_.staleness_sum() + static_cast<double>(outcome.staleness));
  stats_.set_max_staleness(std::max(stats_.max_staleness(), outcome.staleness));
}

void RequestHandler::HandlePush(const std::string& peer, const Message& m, bool then_pull,
                                std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  if (absl::Status s = CheckPayload(m, /*want_payload=*/true); !s.ok()) return Refuse(peer, h, s, out);
  if (h.num_examples() < 0 || h.num_examples() > kMaxExamplesPerPush || h.step() < 0 ||
      h.version() < 0) {
    return Refuse(peer, h, absl::InvalidArgumentError("negative step/version or bad num_examples"), out);
  }
  std::vector<float> grad(range_.size());  // aligned copy of the payload
  m.CopyPayloadTo(absl::MakeSpan(grad));
  if (const int64_t bad = FirstNonFinite(grad); bad >= 0) {
    stats_.set_nonfinite_gradients_dropped(stats_.nonfinite_gradients_dropped() + 1);
    return Refuse(peer, h, absl::InvalidArgumentError(absl::StrCat(
        "gradient has a non-finite value at offset ", range_.begin + bad,
        " (training diverged?); dropped")), out);
  }
  const int64_t version_before = policy_->version();
  auto outcome = policy_->Push(h.rank(), h.step(), h.version(), grad, h.num_examples());
  if (!outcome.ok()) return Refuse(peer, h, outcome.status(), out);
  RecordPush(h.rank(), *outcome);
  const bool dropped = outcome->result == PushResult::kStale || outcome->result == PushResult::kLate;
  Parked parked{peer, MakeReply(h)};
  parked.reply.set_dropped(dropped);
  parked.reply.set_staleness(outcome->staleness);
  if (!then_pull) {
    out->push_back({peer, parked.reply, false});
  } else {
    // The parameters this push leads to: in sync, the next version (or the
    // current one if the push was dropped); in async, whatever is current.
    const int64_t want = dropped ? version_before : h.version() + 1;
    const bool sync = job_.mode() == proto::SYNC;
    ServeOrPark(std::move(parked), {h.rank(), h.step() + 1, sync ? want : 0}, out);
  }
  if (policy_->version() != version_before || job_.mode() == proto::SSP) ReleaseParkedPulls(out);
}

void RequestHandler::HandlePull(const std::string& peer, const Message& m, std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  if (absl::Status s = CheckPayload(m, /*want_payload=*/false); !s.ok()) return Refuse(peer, h, s, out);
  if (h.step() < 0 || h.version() < 0) {
    return Refuse(peer, h, absl::InvalidArgumentError("negative step or version"), out);
  }
  // A worker waits at most for the version its own push completes.
  if (h.version() > policy_->version() + 1) {
    return Refuse(peer, h, absl::InvalidArgumentError(absl::StrCat(
        "PULL for version ", h.version(), " but the shard is at version ", policy_->version(),
        "; at most the next version can be waited for")), out);
  }
  ServeOrPark({peer, MakeReply(h)}, {h.rank(), h.step(), h.version()}, out);
}

void RequestHandler::ServeOrPark(Parked parked, const PullRequest& pull, std::vector<Reply>* out) {
  if (policy_->CanServe(pull)) {
    stats_.set_pulls_served(stats_.pulls_served() + 1);
    parked.reply.set_version(policy_->version());
    parked.reply.set_step(policy_->MinClock());
    out->push_back({std::move(parked.peer), std::move(parked.reply), true});
    return;
  }
  const auto parked_by_rank = std::count_if(parked_pulls_.begin(), parked_pulls_.end(),
                                            [&](const ParkedPull& p) { return p.pull.rank == pull.rank; });
  if (parked_by_rank >= kMaxParkedPullsPerRank) {
    stats_.set_rejected_requests(stats_.rejected_requests() + 1);
    SetError(absl::ResourceExhaustedError(absl::StrCat(
                 "rank ", pull.rank, " already has ", parked_by_rank, " requests waiting")),
             &parked.reply);
    out->push_back({std::move(parked.peer), std::move(parked.reply), false});
    return;
  }
  stats_.set_pulls_parked(stats_.pulls_parked() + 1);
  if (job_.mode() == proto::SSP) stats_.set_ssp_waits(stats_.ssp_waits() + 1);
  parked_pulls_.push_back({std::move(parked), pull});
}

void RequestHandler::ReleaseParkedPulls(std::vector<Reply>* out) {
  std::vector<ParkedPull> still;
  for (ParkedPull& p : parked_pulls_) {
    if (!policy_->CanServe(p.pull)) {
      still.push_back(std::move(p));
      continue;
    }
    stats_.set_pulls_served(stats_.pulls_served() + 1);
    p.parked.reply.set_version(policy_->version());
    p.parked.reply.set_step(policy_->MinClock());
    out->push_back({std::move(p.parked.peer), std::move(p.parked.reply), true});
  }
  parked_pulls_ = std::move(still);
}

void RequestHandler::HandleBarrier(const std::string& peer, const Message& m,
                                   std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  if (h.barrier_name().empty() || h.barrier_name().size() > 64) {
    return Refuse(peer, h, absl::InvalidArgumentError("BARRIER needs a name of 1..64 bytes"), out);
  }
  if (barriers_.count(h.barrier_name()) == 0 && barriers_.size() >= kMaxOpenBarriers) {
    return Refuse(peer, h, absl::ResourceExhaustedError(absl::StrCat(
        kMaxOpenBarriers, " barriers are open already")), out);
  }
  BarrierState& b = barriers_[h.barrier_name()];
  if (b.arrived.empty()) b.arrived.assign(job_.num_workers(), false);
  if (b.arrived[h.rank()]) {
    return Refuse(peer, h, absl::AlreadyExistsError(absl::StrCat(
        "rank ", h.rank(), " is already in barrier \"", h.barrier_name(), "\"")), out);
  }
  b.arrived[h.rank()] = true;
  if (h.has_report()) reports_[h.rank()] = h.report();
  b.waiting.push_back({peer, MakeReply(h)});
  if (std::count(b.arrived.begin(), b.arrived.end(), true) < job_.num_workers()) return;
  for (Parked& p : b.waiting) out->push_back({std::move(p.peer), std::move(p.reply), false});
  barriers_.erase(h.barrier_name());
}

void RequestHandler::HandleShutdown(const std::string& peer, const Message& m,
                                    std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  const bool from_chief = IsWorkerSender(h.sender()) && h.rank() == 0;
  if (!from_chief && h.sender().type() != proto::CLIENT) {
    return Refuse(peer, h, absl::PermissionDeniedError("only the chief may shut a ps down"), out);
  }
  shutdown_requested_ = true;
  AbortParked(absl::CancelledError("the ps is shutting down"), out);
  out->push_back({peer, MakeReply(h), false});
}

void RequestHandler::AbortParked(const absl::Status& status, std::vector<Reply>* out) {
  auto abort = [&](Parked& p) {
    SetError(status, &p.reply);
    out->push_back({std::move(p.peer), std::move(p.reply), false});
  };
  for (ParkedRegister& p : parked_registers_) {
    Reply reply{std::move(p.peer), MakeReply(p.request), false};
    SetError(status, &reply.header);
    out->push_back(std::move(reply));
  }
  for (ParkedPull& p : parked_pulls_) abort(p.parked);
  for (auto& [name, b] : barriers_) {
    for (Parked& p : b.waiting) abort(p);
  }
  parked_registers_.clear();
  parked_pulls_.clear();
  barriers_.clear();
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
  // Trim trailing empty histogram buckets to keep the reply small.
  while (s.staleness_histogram_size() > 0 &&
         s.staleness_histogram(s.staleness_histogram_size() - 1) == 0) {
    s.mutable_staleness_histogram()->RemoveLast();
  }
  for (const auto& [rank, report] : reports_) *s.add_workers() = report;
  return s;
}

}  // namespace pstrain

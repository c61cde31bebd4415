// RequestHandler's start of a job: a worker's REGISTER and the chief's
// INIT, which makes the shard's store and update policy from the job's
// configuration (checked field by field first).

#include <cmath>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/embedding.h"
#include "common/lr_schedule.h"
#include "common/optimizer.h"
#include "common/param_groups.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps_server/request_handler.h"

namespace pstrain {
namespace {

absl::Status ValidateJob(const proto::JobConfig& job) {
  if (job.num_workers() < 1 || job.num_workers() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("INIT: num_workers=", job.num_workers()));
  }
  if (!(job.learning_rate() > 0) || !std::isfinite(job.learning_rate())) {
    return absl::InvalidArgumentError(absl::StrCat("INIT: learning_rate=", job.learning_rate()));
  }
  return OptimizerFromJob(job).status();
}


}  // namespace

void RequestHandler::HandleRegister(const std::string& peer, const Message& m,
                                    std::vector<Reply>* out) {
  if (!IsWorkerSender(m.header.sender())) {
    return Refuse(peer, m.header, absl::PermissionDeniedError("REGISTER from a non-worker"), out);
  }
  if (!initialized()) {
    // Answered when the chief's INIT arrives.
    if (absl::Status s = parked_.ParkRegister(peer, m.header); !s.ok()) {
      return Refuse(peer, m.header, s, out);
    }
    return;
  }
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) {
    // With the job: a worker of another model names the tensor that differs.
    Refuse(peer, m.header, s, out);
    *out->back().header.mutable_job() = job_;
    return;
  }
  if (workers_.MarkRegistered(m.header.rank(), m.header.session())) {
    ForgetOldSession(m.header.rank(), out);
  }
  Reply reply{peer, MakeReply(m.header), false, /*record=*/true};
  *reply.header.mutable_job() = job_;
  // Where the worker resumes: the rank's clock on this shard (0 in a fresh
  // run; a checkpoint's step after RESTORE).
  reply.header.set_step(policy_->Clocks()[m.header.rank()]);
  out->push_back(std::move(reply));
}

void RequestHandler::HandleInit(const std::string& peer, const Message& m,
                                std::vector<Reply>* out) {
  if (absl::Status s = Initialize(m); !s.ok()) return Refuse(peer, m.header, s, out);
  FinishInit(peer, m.header, out);
}

void RequestHandler::FinishInit(const std::string& peer, const proto::Header& h,
                                std::vector<Reply>* out) {
  workers_.MarkRegistered(0, h.session());
  const bool restored = h.type() == proto::RESTORE;
  const std::string how = !restored ? "initialised"
                         : h.restore().from_payload()
                             ? "restored from its standby's replica"
                             : "restored from checkpoint " + CheckpointName(h.restore().step());
  LOG(INFO) << how << " by the chief: shard " << options_.shard_index << " [" << range_.begin << ", "
            << range_.end << ") " << range_.size() << " floats, version " << policy_->version()
            << ", mode " << proto::UpdateMode_Name(job_.mode()) << ", " << job_.num_workers()
            << " workers, lr " << job_.learning_rate() << " ("
            << LrSchedule::FromJob(job_).value_or(LrSchedule()).Describe() << "), "
            << DescribeOptimizer(policy_->store().config());
  Reply reply{peer, MakeReply(h), false, /*record=*/true};
  *reply.header.mutable_job() = job_;
  out->push_back(std::move(reply));
  for (Parked& p : parked_.TakeRegisters()) {
    Message reg;
    reg.header = std::move(p.header);
    HandleRegister(p.peer, reg, out);
  }
}

absl::Status RequestHandler::CheckInit(const proto::Header& h) const {
  if (initialized()) return absl::AlreadyExistsError("the ps is already initialised");
  return CheckInitFields(h);
}

absl::Status RequestHandler::CheckInitFields(const proto::Header& h) const {
  if (h.sender().type() != proto::CHIEF && h.sender().type() != proto::WORKER) {
    return absl::PermissionDeniedError("INIT from a non-worker");
  }
  if (h.rank() != 0) return absl::PermissionDeniedError("only the chief (rank 0) may INIT");
  if (options_.dynamic_workers != h.job().dynamic_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options_.dynamic_workers
            ? "this ps has a sparse TF_CONFIG (dynamic workers) but the chief a full one"
            : "the chief has a sparse TF_CONFIG (dynamic workers) but this ps a full one",
        ": start every task of the job with the same kind of TF_CONFIG"));
  }
  if (options_.dynamic_workers && h.job().mode() == proto::SYNC) {
    return absl::InvalidArgumentError(
        "sync training needs every worker known in advance (each version waits for all of them), "
        "and a sparse TF_CONFIG (TFJob enableDynamicWorker) lists none: use --mode=async or "
        "--mode=ssp, or a full TF_CONFIG");
  }
  // The ps's own spec is the authority on the cluster's shape.
  if (h.job().num_workers() != options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "INIT for ", h.job().num_workers(), " workers, but this ps's cluster spec has ",
        options_.num_workers, " (were the tasks started from different specs?)"));
  }
  const bool learn_shards = options_.dynamic_workers && num_shards_ == 0;
  if (learn_shards && (h.num_shards() < 1 || h.num_shards() > 65536 ||
                       options_.shard_index >= h.num_shards())) {
    return absl::InvalidArgumentError(absl::StrCat("INIT for ", h.num_shards(), " shards sent to ps ",
                                                   options_.shard_index));
  }
  if (h.shard_index() != options_.shard_index || (!learn_shards && h.num_shards() != num_shards_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("INIT for shard ", h.shard_index(), " of ", h.num_shards(), " sent to ps ",
                     options_.shard_index, " of ", num_shards_));
  }
  if (h.range_end() <= h.range_begin() || h.range_end() > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("INIT: bad range [", h.range_begin(), ", ", h.range_end(), ")"));
  }
  if (absl::Status s = ValidateEmbeddingTables(h.job()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("INIT: ", s.message()));
  }
  if (absl::Status s = ValidateLayoutGroups(h.job()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("INIT: ", s.message()));
  }
  if (h.job().layout_size() > 0) {
    uint64_t total = 0;
    for (const proto::TensorLayout& t : h.job().layout()) total += static_cast<uint64_t>(t.size());
    if (total < h.range_end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "INIT: the layout's ", total, " floats do not cover the range's end ", h.range_end()));
    }
  }
  return ValidateJob(h.job());
}

absl::Status RequestHandler::Initialize(const Message& m) {
  const proto::Header& h = m.header;
  RETURN_IF_ERROR(CheckInit(h));
  const ShardRange range{static_cast<int64_t>(h.range_begin()), static_cast<int64_t>(h.range_end())};
  ASSIGN_OR_RETURN(const OptimizerConfig optimizer, OptimizerFromJob(h.job()));
  // The parameters, and with_slots the optimizer's slots after them (a
  // script's loaded optimizer state).
  const uint64_t floats = h.with_slots() ? StateFloats(optimizer, static_cast<uint64_t>(range.size()))
                                         : static_cast<uint64_t>(range.size());
  if (m.payload_floats() != floats || h.encoding() != proto::F32) {
    return absl::InvalidArgumentError(absl::StrCat("INIT: payload of ", m.payload_bytes(),
                                                   " bytes for ", floats, " floats"));
  }
  std::vector<float> initial(floats);
  m.CopyPayloadTo(absl::MakeSpan(initial));
  if (!IsFiniteState(initial, range.size())) {
    return absl::InvalidArgumentError(
        "INIT: parameters or optimizer state not finite in f32 (a non-finite value, or a norm "
        "that overflows)");
  }
  if (h.with_slots()) {
    if (absl::Status s = ValidateSlotsOfSquares(optimizer, initial, range.size()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("INIT: ", s.message()));
    }
  } else {
    initial = InitialState(optimizer, initial);
  }
  int64_t updates = 0;
  for (int64_t u : h.segment_updates()) updates = std::max(updates, u);
  ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store,
                   MakeStore(h.job(), range, std::move(initial), updates,
                             h.with_slots() ? h.segment_updates()
                                            : google::protobuf::RepeatedField<int64_t>()));
  ASSIGN_OR_RETURN(std::unique_ptr<UpdatePolicy> policy, CreateUpdatePolicy(h.job(), std::move(store)));
  Install(h, std::move(policy));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardStore>> RequestHandler::MakeStore(
    const proto::JobConfig& job, const ShardRange& range, std::vector<float> state,
    int64_t updates, absl::Span<const int64_t> segment_updates) const {
  ASSIGN_OR_RETURN(const OptimizerConfig optimizer, OptimizerFromJob(job));
  if (state.size() != StateFloats(optimizer, static_cast<uint64_t>(range.size()))) {
    return absl::InvalidArgumentError("a state of another size than the shard's");
  }
  std::vector<TensorSegment> segments = SegmentsOf(job, range);
  if (!segment_updates.empty() && segment_updates.size() != segments.size()) {
    return absl::InvalidArgumentError(absl::StrCat("step counts of ", segment_updates.size(),
                                                   " tensor segments; the shard has ",
                                                   segments.size()));
  }
  if (updates < 0 || updates > kMaxStepOrVersion) {
    return absl::InvalidArgumentError(absl::StrCat("updates ", updates, " out of range"));
  }
  for (int64_t u : segment_updates) {
    if (u < 0 || u > updates) {
      return absl::InvalidArgumentError(
          absl::StrCat("a tensor segment's step count ", u, " is outside [0, ", updates, "]"));
    }
  }
  return std::make_unique<ShardStore>(std::move(state), updates, optimizer, options_.update_pool,
                                      std::move(segments),
                                      std::vector<int64_t>(segment_updates.begin(),
                                                           segment_updates.end()));
}

void RequestHandler::Install(const proto::Header& h, std::unique_ptr<UpdatePolicy> policy) {
  if (policy_ != nullptr) unordered_sums_before_ += policy_->unordered_sums();
  policy_ = std::move(policy);
  reducer_ = h.job().mode() == proto::SYNC
                 ? std::make_unique<GradientReducer>(options_.num_workers,
                                                     policy_->store().size())
                 : nullptr;
  for (int rank = 0; reducer_ != nullptr && rank < workers_.size(); ++rank) {
    if (workers_.dead(rank)) reducer_->SetActive(rank, false);
  }
  job_ = h.job();
  // Every INIT and RESTORE starts the tables empty (a RESTORE then puts
  // its checkpoint's or standby's rows in).
  tables_ = EmbeddingTables(job_, options_.shard_index,
                            num_shards_ != 0 ? num_shards_ : h.num_shards());
  ++tables_epoch_;
  fingerprint_ = h.plan_fingerprint();
  range_ = {static_cast<int64_t>(h.range_begin()), static_cast<int64_t>(h.range_end())};
  if (!options_.dynamic_workers) return;
  if (access_.job_id() == 0) {
    access_.SetJobId(h.job_id());
    num_shards_ = h.num_shards();
    LOG(INFO) << "dynamic workers: job " << absl::StrCat(absl::Hex(access_.job_id())) << ", " << num_shards_
              << " shards, as the chief says; workers are waited for once they join";
  }
  MarkUnheardAbsent();
}

}  // namespace pstrain

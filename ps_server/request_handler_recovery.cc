// RequestHandler's recovery requests: SAVE and RESTORE (from a checkpoint
// file, ps_server/checkpoint_store.h, or from a standby's state), and the
// standby's REPLICATE and FETCH_REPLICA (ps_server/standby_replica.h),
// each the request's path through the handler; the files and the replica
// are their collaborators'.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/optimizer.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps_server/request_handler.h"

namespace pstrain {

void RequestHandler::HandleSave(const std::string& peer, const Message& m,
                                std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (!initialized()) {
    return Refuse(peer, h, absl::FailedPreconditionError("SAVE before INIT: nothing to save"), out);
  }
  if (!checkpoints_.enabled()) {
    return Refuse(peer, h, absl::FailedPreconditionError(
        "SAVE: this ps was started without --checkpoint_dir"), out);
  }
  if (h.step() < 0 || h.step() > CheckpointStore::kMaxStep || h.keep_checkpoints() < 1 ||
      h.keep_checkpoints() > kMaxKeepCheckpoints || h.keep_from_step() < 0 ||
      h.keep_from_step() > h.step() || m.has_payload) {
    return Refuse(peer, h,
                  absl::InvalidArgumentError(absl::StrCat(
                      "SAVE needs a step in [0, 2^48], keep_checkpoints 1 to ", kMaxKeepCheckpoints,
                      ", keep_from_step 0 to the step and no payload")),
                  out);
  }
  auto saved = Save(h.step(), h.keep_checkpoints(), h.keep_from_step());
  if (!saved.ok()) {
    LOG(ERROR) << "SAVE of " << CheckpointName(h.step()) << " failed: " << saved.status().message();
    return Refuse(peer, h, saved.status(), out);
  }
  Reply reply{peer, MakeReply(h), false, /*record=*/true};
  *reply.header.mutable_saved() = *std::move(saved);
  out->push_back(std::move(reply));
}

absl::StatusOr<proto::SavedShard> RequestHandler::Save(int64_t step, int keep,
                                                       int64_t keep_from_step) {
  ShardCheckpoint c;
  proto::ShardCheckpointHeader& hdr = c.header;
  hdr.set_step(step);
  hdr.set_shard_index(options_.shard_index);
  hdr.set_num_shards(num_shards_);
  hdr.set_range_begin(static_cast<uint64_t>(range_.begin));
  hdr.set_range_end(static_cast<uint64_t>(range_.end));
  hdr.set_version(policy_->version());
  hdr.set_updates(policy_->store().updates());
  if (!policy_->store().uniform()) {
    const std::vector<int64_t>& counts = policy_->store().segment_updates();
    *hdr.mutable_segment_updates() = {counts.begin(), counts.end()};
  }
  hdr.set_plan_fingerprint(fingerprint_);
  hdr.set_job_id(access_.job_id());
  *hdr.mutable_job() = job_;
  *hdr.mutable_stats() = Stats();
  const std::vector<int64_t> clocks = policy_->Clocks();
  *hdr.mutable_worker_clocks() = {clocks.begin(), clocks.end()};
  c.state.assign(policy_->store().state().begin(), policy_->store().state().end());
  ASSIGN_OR_RETURN(proto::SavedShard saved, checkpoints_.Save(&c, num_shards_, keep_from_step));
  if (!tables_.empty()) {
    RETURN_IF_ERROR(tables_.Save(options_.checkpoint_dir, step, policy_->version(), keep,
                                 keep_from_step, &saved));
  }
  return saved;
}

void RequestHandler::RemoveCheckpointsBefore(int64_t keep_from_step) {
  if (!checkpoints_.enabled() || !initialized() || keep_from_step <= 0 ||
      keep_from_step > CheckpointStore::kMaxStep) {
    return;
  }
  absl::Status s = checkpoints_.RemoveBefore(keep_from_step, num_shards_);
  if (s.ok() && !tables_.empty())
    s = tables_.RemoveFilesBefore(options_.checkpoint_dir, keep_from_step);
  if (!s.ok()) LOG(WARNING) << "older checkpoints not removed: " << s.message();
}

void RequestHandler::HandleRestore(const std::string& peer, const Message& m,
                                   std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (h.has_state_part()) {
    // A part of a standby's state too large for one message, relayed by
    // the chief: put together, then restored from as one RESTORE.
    absl::StatusOr<uint64_t> total =
        h.restore().from_payload()
            ? StatePayloadBytes(h)
            : absl::InvalidArgumentError("RESTORE in parts without from_payload");
    absl::StatusOr<std::optional<Message>> whole =
        total.ok() ? restore_parts_.Add(m, *total)
                   : absl::StatusOr<std::optional<Message>>(total.status());
    if (!whole.ok()) return Refuse(peer, h, whole.status(), out);
    if (whole->has_value()) return HandleRestore(peer, **whole, out);
    Reply ack{peer, MakeReply(h), false, /*record=*/true};
    ack.header.mutable_state_part()->set_offset(restore_parts_.received());
    out->push_back(std::move(ack));
    return;
  }
  restore_parts_.Clear();  // a relay in parts the chief gave up
  if (!checkpoints_.enabled() && !h.restore().from_payload()) {
    return Refuse(peer, h, absl::FailedPreconditionError(
        "RESTORE: this ps was started without --checkpoint_dir"), out);
  }
  if (h.restore().step() < 0 || h.restore().step() > CheckpointStore::kMaxStep ||
      m.has_payload != h.restore().from_payload()) {
    return Refuse(peer, h, absl::InvalidArgumentError(
        "RESTORE needs a step in [0, 2^48], and a payload exactly when from_payload"), out);
  }
  const bool rollback = h.restore().rollback() && initialized();
  if (h.restore().generation() < 0 || h.restore().generation() > CheckpointStore::kMaxStep) {
    return Refuse(peer, h, absl::InvalidArgumentError("RESTORE: generation out of range"), out);
  }
  if (h.restore().verify_only()) {
    absl::Status s = rollback ? CheckInitFields(h) : CheckInit(h);
    absl::StatusOr<ShardCheckpoint> c = s.ok() ? LoadCheckpoint(h) : absl::StatusOr<ShardCheckpoint>(s);
    s = c.status();
    if (s.ok()) s = LoadTables(h, c->header.version()).status();
    if (!s.ok()) return Refuse(peer, h, s, out);
    out->push_back({peer, MakeReply(h), false, /*record=*/true});
    return;
  }
  const int64_t version_before = version();
  if (absl::Status s = Restore(m, out); !s.ok()) {
    LOG(ERROR) << "RESTORE from "
               << (h.restore().from_payload() ? std::string("a state the chief sent")
                                              : CheckpointName(h.restore().step()))
               << " refused: " << s.message();
    return Refuse(peer, h, s, out);
  }
  // A state the chief sent is a standby's replica (its primary named) or
  // the job's initial state (no primary).
  const std::string state =
      h.replica().primary_instance() != 0 ? "its standby's replica" : "the job's initial state";
  if (!rollback) {
    LOG(INFO) << "restored by the chief from "
              << (h.restore().from_payload() ? state : CheckpointName(h.restore().step()))
              << " (version " << version() << ", generation " << generation_ << ", term " << term_
              << ")";
  } else if (h.restore().from_payload() && h.replica().primary_instance() == 0) {
    stats_.set_rollbacks(stats_.rollbacks() + 1);
    LOG(WARNING) << "rolled back by the chief from version " << version_before
                 << " to the job's initial state (term " << term_ << "); every worker rejoins";
  } else if (h.restore().from_payload()) {
    stats_.set_rollbacks(stats_.rollbacks() + 1);
    LOG(WARNING) << "replaced by the chief with its standby's state (version " << version()
                 << ", term " << term_ << "): this ps's copy (version " << version_before
                 << ") was stale, the shard had moved while it was away; every worker rejoins";
  } else {
    stats_.set_rollbacks(stats_.rollbacks() + 1);
    LOG(WARNING) << "rolled back by the chief from version " << version_before << " to "
                 << CheckpointName(h.restore().step()) << " (version " << version() << "): "
                 << version_before - version() << " updates undone; every worker rejoins";
  }
  FinishInit(peer, h, out);
}

absl::StatusOr<ShardCheckpoint> RequestHandler::LoadCheckpoint(const proto::Header& h) const {
  // A restarted sparse ps learns the shard count from this very RESTORE
  // (CheckInitFields checked it).
  return checkpoints_.Load(h, num_shards_ != 0 ? num_shards_ : h.num_shards());
}

absl::StatusOr<EmbeddingTables> RequestHandler::LoadTables(const proto::Header& h,
                                                           int64_t version) const {
  if (h.job().tables_size() == 0) return EmbeddingTables();
  return EmbeddingTables::Load(h.job(), options_.shard_index,
                               num_shards_ != 0 ? num_shards_ : h.num_shards(),
                               options_.checkpoint_dir, h.restore().step(),
                               h.restore().embedding_checksum(), version);
}

absl::StatusOr<EmbeddingTables> RequestHandler::TablesFromPayload(const Message& m,
                                                                  size_t floats) const {
  const proto::Header& h = m.header;
  if (h.job().tables_size() == 0) return EmbeddingTables();
  EmbeddingTables tables(h.job(), options_.shard_index,
                         num_shards_ != 0 ? num_shards_ : h.num_shards());
  RETURN_IF_ERROR(tables.ApplyEncoded(TablesOf(m, floats), /*delta=*/false, "RESTORE's tables"));
  return tables;
}

absl::Status RequestHandler::Restore(const Message& m, std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  const bool rollback = h.restore().rollback() && initialized();
  RETURN_IF_ERROR(rollback ? CheckInitFields(h) : CheckInit(h));
  ASSIGN_OR_RETURN(ShardCheckpoint c,
                   h.restore().from_payload() ? StateFromPayload(m, options_.num_workers)
                                              : LoadCheckpoint(h));
  // The tables' rows: from the checkpoint's files, or the standby's state.
  ASSIGN_OR_RETURN(EmbeddingTables tables, h.restore().from_payload()
                                               ? TablesFromPayload(m, c.state.size())
                                               : LoadTables(h, c.header.version()));
  if (rollback) {
    // Whatever waits here was computed on the state being undone.
    AbortParked(RejoinError(absl::StrCat("shard ", options_.shard_index, " was rolled back to ",
                                         CheckpointName(h.restore().step()),
                                         " by the chief: register again")),
                out);
  }
  const ShardRange range{static_cast<int64_t>(h.range_begin()), static_cast<int64_t>(h.range_end())};
  absl::StatusOr<std::unique_ptr<ShardStore>> store = MakeStore(
      h.job(), range, std::move(c.state), c.header.updates(), c.header.segment_updates());
  if (!store.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("RESTORE: ", store.status().message()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<UpdatePolicy> policy, CreateUpdatePolicy(h.job(), *std::move(store)));
  policy->Resume(c.header.version(), c.header.worker_clocks());
  for (int rank = 0; rank < workers_.size(); ++rank) {
    bool refused = false;
    if (workers_.dead(rank)) policy->SetActive(rank, false, &refused);
  }
  Install(h, std::move(policy));
  if (!tables.empty()) tables_ = std::move(tables);
  restored_ = true;
  generation_ = h.restore().generation();
  // A moved shard's term grows, so that a copy left behind (a frozen ps
  // that wakes) is never taken for it; a restore in place (a checkpoint's
  // rollback) keeps it: lowered, it would tie with such a copy, and the
  // standby would refuse every state after it as older than its replica.
  term_ = h.restore().from_payload() ? std::max(h.restore().term(), h.replica().term() + 1)
                                     : std::max(term_, h.restore().term());
  // Each rank gets the whole peer timeout to register (dynamic workers:
  // those heard from; the others are absent until they are).
  if (!options_.dynamic_workers) workers_.NoteAllAlive();
  // The counters go on from where the checkpoint left them; this process's
  // recovery counters go on from where they are.
  const proto::ShardStats live = stats_;
  stats_ = c.header.stats();
  // The tables' counters are their own, restored with them (Stats adds
  // them): the ones in these counters are a copy, and would count twice.
  stats_.clear_tables();
  unordered_sums_before_ = std::max<int64_t>(0, stats_.unordered_sums());  // Stats() adds the policy's
  stats_.set_adoptions(live.adoptions());
  stats_.set_releases(live.releases());
  stats_.set_stale_replications_refused(live.stale_replications_refused());
  stats_.set_shard_index(options_.shard_index);
  stats_.clear_workers();
  // These counters come from a file or a standby: sized here, to this
  // job's ranks and buckets, before anything indexes them.
  stats_.mutable_pushes_by_rank()->Resize(workers_.size(), 0);
  if (stats_.staleness_histogram_size() > kStalenessBuckets) {
    stats_.mutable_staleness_histogram()->Truncate(kStalenessBuckets);
  }
  stats_.set_workers_declared_dead(live.workers_declared_dead());
  stats_.set_workers_rejoined(live.workers_rejoined());
  stats_.set_rollbacks(live.rollbacks());
  reports_.clear();
  return absl::OkStatus();
}

std::vector<float> RequestHandler::StateSnapshot() const {
  const absl::Span<const float> state = policy_->store().state();
  return {state.begin(), state.end()};
}

std::vector<float> RequestHandler::ReplicaPayloadNow(int64_t since, proto::ReplicaState* r) {
  std::vector<float> payload = StateSnapshot();
  if (tables_.empty()) return payload;
  std::string bytes;
  const bool delta = since >= 0 && tables_.EncodeSince(since, version(), &bytes);
  if (!delta) {
    tables_.StartChangeLog();
    bytes = tables_.Encode(version());
  }
  r->set_tables_bytes(bytes.size());
  r->set_tables_delta(delta);
  r->set_tables_since(delta ? since : 0);
  AppendTables(bytes, &payload);
  return payload;
}

proto::ReplicaState RequestHandler::ReplicaStateNow() const {
  proto::ReplicaState r;
  r.set_version(policy_->version());
  r.set_updates(policy_->store().updates());
  if (!policy_->store().uniform()) {
    const std::vector<int64_t>& counts = policy_->store().segment_updates();
    *r.mutable_segment_updates() = {counts.begin(), counts.end()};
  }
  const std::vector<int64_t> clocks = policy_->Clocks();
  *r.mutable_worker_clocks() = {clocks.begin(), clocks.end()};
  r.set_primary_instance(options_.instance);
  r.set_term(term_);
  r.set_generation(generation_);
  r.set_tables_epoch(tables_epoch_);
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

void RequestHandler::CountReplication(bool acknowledged, int64_t bytes) {
  if (acknowledged) {
    stats_.set_replications(stats_.replications() + 1);
    stats_.set_replication_bytes(stats_.replication_bytes() + bytes);
  } else {
    stats_.set_unreplicated_releases(stats_.unreplicated_releases() + 1);
  }
}

void RequestHandler::HandleReplicate(const std::string& peer, const Principal& who,
                                     const Message& m, std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (!h.has_state_part()) {
    // A state in parts its primary gave up (only the primary's own word
    // drops it).
    if (standby_.Admit(who, h, num_shards_).ok()) replica_parts_.Clear();
    return KeepReplicate(peer, who, m, out);
  }
  // A part of a state too large for one message: judged by its header
  // before anything of it is kept, put together, then kept as a whole
  // REPLICATE (with every check of one).
  StandbyReplica::Refusal refusal = StandbyReplica::Refusal::kNone;
  absl::Status s = standby_.Admit(who, h, num_shards_, &refusal);
  absl::StatusOr<uint64_t> total = StatePayloadBytes(h);
  if (s.ok()) s = total.status();
  absl::StatusOr<std::optional<Message>> whole =
      s.ok() ? replica_parts_.Add(m, *total) : absl::StatusOr<std::optional<Message>>(s);
  if (!whole.ok()) return RefuseReplicate(peer, h, whole.status(), refusal, out);
  if (whole->has_value()) return KeepReplicate(peer, who, **whole, out);
  proto::Header ack = MakeReply(h);
  ack.mutable_replica()->set_seq(h.replica().seq());
  ack.mutable_state_part()->set_offset(replica_parts_.received());
  out->push_back({peer, std::move(ack), false, false});
}

void RequestHandler::RefuseReplicate(const std::string& peer, const proto::Header& h,
                                     const absl::Status& why, StandbyReplica::Refusal refusal,
                                     std::vector<Reply>* out) {
  if (refusal == StandbyReplica::Refusal::kStaleTerm) CountStaleReplication();
  Refuse(peer, h, why, out);
  // With the request's seq, so that the primary reads it as the answer to
  // that state (and waits a resend time before the next).
  out->back().header.mutable_replica()->set_seq(h.replica().seq());
}

void RequestHandler::KeepReplicate(const std::string& peer, const Principal& who, const Message& m,
                                   std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  StandbyReplica::Refusal refusal = StandbyReplica::Refusal::kNone;
  if (absl::Status s = standby_.Keep(who, m, num_shards_, &refusal); !s.ok()) {
    return RefuseReplicate(peer, h, s, refusal, out);
  }
  fetched_.reset();  // an encoding of the replica before this one
  proto::Header ack = MakeReply(h);
  ack.mutable_replica()->set_seq(h.replica().seq());
  ack.mutable_replica()->set_version(h.replica().version());
  out->push_back({peer, std::move(ack), false, false});
}

void RequestHandler::HandleFetchReplica(const std::string& peer, const Message& m,
                                        std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  const HeldReplica& replica = standby_.held();
  if (!replica.held() || replica.header.shard_index() != h.shard_index()) {
    return Refuse(peer, h, absl::NotFoundError(absl::StrCat(
        "this ps holds no replica of shard ", h.shard_index())), out);
  }
  const proto::StatePart& asked = h.state_part();
  if (asked.part_bytes() % sizeof(float) != 0 ||
      (asked.part_bytes() != 0 && asked.part_bytes() < kMinStatePartBytes)) {
    return Refuse(peer, h,
                  absl::InvalidArgumentError(
                      absl::StrCat("FETCH_REPLICA: parts of ", asked.part_bytes(),
                                   " bytes (whole floats, at least ", kMinStatePartBytes, ")")),
                  out);
  }
  Reply reply{peer, MakeReply(h), false, false};
  const proto::Header& r = replica.header;
  reply.header.set_shard_index(r.shard_index());
  reply.header.set_range_begin(r.range_begin());
  reply.header.set_range_end(r.range_end());
  reply.header.set_plan_fingerprint(r.plan_fingerprint());
  *reply.header.mutable_job() = r.job();
  *reply.header.mutable_stats() = r.stats();
  if (asked.offset() == 0 || !fetched_.has_value() || fetched_->changes != standby_.changes()) {
    if (asked.offset() != 0) {
      fetched_.reset();
      return Refuse(
          peer, h,
          absl::FailedPreconditionError(absl::StrCat(
              "FETCH_REPLICA from byte ", asked.offset(), ": the replica of shard ",
              h.shard_index(),
              " changed since its first part was fetched; fetch it again from the start")),
          out);
    }
    // Without tables the state goes out as it is held, without a copy.
    FetchedReplica f{standby_.changes(), r.replica(), replica.state};
    if (replica.tables != nullptr) {
      f.payload = std::make_shared<const std::vector<float>>(ReplicaPayload(replica, &f.replica));
    }
    fetched_ = std::move(f);
  }
  *reply.header.mutable_replica() = fetched_->replica;
  const uint64_t total = fetched_->payload->size() * sizeof(float);
  if (asked.part_bytes() == 0 || (asked.offset() == 0 && total <= asked.part_bytes())) {
    reply.payload = fetched_->payload;  // whole
    fetched_.reset();
    out->push_back(std::move(reply));
    return;
  }
  if (asked.offset() >= total || asked.offset() % sizeof(float) != 0) {
    return Refuse(
        peer, h,
        absl::InvalidArgumentError(absl::StrCat("FETCH_REPLICA from byte ", asked.offset(),
                                                " of a state of ", total, " bytes")),
        out);
  }
  proto::StatePart* part = reply.header.mutable_state_part();
  part->set_offset(asked.offset());
  part->set_total(total);
  part->set_stream(options_.instance + fetched_->changes);
  reply.payload = std::make_shared<const std::vector<float>>(
      StateSlice(*fetched_->payload, asked.offset(), asked.part_bytes()));
  if (asked.offset() + reply.payload->size() * sizeof(float) >= total) fetched_.reset();
  out->push_back(std::move(reply));
}

absl::Status RequestHandler::AdoptReplica(const HeldReplica& replica) {
  if (!replica.held()) return absl::NotFoundError("no replica held");
  // The replica becomes a RESTORE from its payload, as the chief would send
  // it: the same checks, the same installation.
  proto::Header h = replica.header;
  h.set_type(proto::RESTORE);
  h.mutable_sender()->set_type(proto::CHIEF);
  h.mutable_sender()->set_index(0);
  h.set_rank(0);
  proto::RestoreRequest* restore = h.mutable_restore();
  restore->set_from_payload(true);
  restore->set_generation(replica.header.replica().generation());
  restore->set_term(replica.header.replica().term() + 1);
  const std::vector<float> payload = ReplicaPayload(replica, h.mutable_replica());
  const Message m = MakeMessage(std::move(h), payload);
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
  // This handler is done with: its tables go to the replica as they are.
  if (!tables_.empty()) r.tables = std::make_shared<EmbeddingTables>(std::move(tables_));
  return r;
}

}  // namespace pstrain

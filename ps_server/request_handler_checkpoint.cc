// RequestHandler's checkpoint requests, SAVE and RESTORE: kept apart from
// request_handler.cc so that each file stays readable. The file format is
// ps_server/shard_checkpoint.h; the directory layout common/checkpoint_dir.h.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_dir.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps_server/request_handler.h"

namespace pstrain {
namespace {

constexpr int64_t kMaxCheckpointStep = int64_t{1} << 48;

// "shard-0-of-2.ckpt": the file's name inside its ckpt-<step> directory.
std::string BaseName(const std::string& relative) {
  return relative.substr(relative.rfind('/') + 1);
}

}  // namespace

void RequestHandler::HandleSave(const std::string& peer, const Message& m,
                                std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (!initialized()) {
    return Refuse(peer, h, absl::FailedPreconditionError("SAVE before INIT: nothing to save"), out);
  }
  if (options_.checkpoint_dir.empty()) {
    return Refuse(peer, h, absl::FailedPreconditionError(
        "SAVE: this ps was started without --checkpoint_dir"), out);
  }
  if (h.step() < 0 || h.step() > kMaxCheckpointStep || h.keep_checkpoints() < 1 || m.has_payload) {
    return Refuse(peer, h, absl::InvalidArgumentError(
        "SAVE needs a step in [0, 2^48], keep_checkpoints >= 1 and no payload"), out);
  }
  auto saved = Save(h.step(), h.keep_checkpoints());
  if (!saved.ok()) {
    LOG(ERROR) << "SAVE of " << CheckpointName(h.step()) << " failed: " << saved.status().message();
    return Refuse(peer, h, saved.status(), out);
  }
  Reply reply{peer, MakeReply(h), false, /*record=*/true};
  *reply.header.mutable_saved() = *std::move(saved);
  out->push_back(std::move(reply));
}

absl::StatusOr<proto::SavedShard> RequestHandler::Save(int64_t step, int keep) {
  ShardCheckpoint c;
  proto::ShardCheckpointHeader& hdr = c.header;
  hdr.set_step(step);
  hdr.set_shard_index(options_.shard_index);
  hdr.set_num_shards(num_shards_);
  hdr.set_range_begin(static_cast<uint64_t>(range_.begin));
  hdr.set_range_end(static_cast<uint64_t>(range_.end));
  hdr.set_version(policy_->version());
  hdr.set_updates(policy_->store().updates());
  hdr.set_plan_fingerprint(fingerprint_);
  hdr.set_job_id(job_id_);
  *hdr.mutable_job() = job_;
  *hdr.mutable_stats() = Stats();
  const std::vector<int64_t> clocks = policy_->Clocks();
  *hdr.mutable_worker_clocks() = {clocks.begin(), clocks.end()};
  c.state.assign(policy_->store().state().begin(), policy_->store().state().end());
  const std::string file = ShardFileName(step, options_.shard_index, num_shards_);
  RETURN_IF_ERROR(WriteShardCheckpoint(absl::StrCat(options_.checkpoint_dir, "/", file), &c));
  RETURN_IF_ERROR(PruneCheckpoints(options_.checkpoint_dir, keep, BaseName(file)).status());
  proto::SavedShard saved;
  saved.set_shard_index(options_.shard_index);
  saved.set_file(file);
  saved.set_checksum(hdr.payload_checksum());
  saved.set_version(hdr.version());
  saved.set_payload_bytes(hdr.payload_bytes());
  *saved.mutable_worker_steps() = hdr.worker_clocks();
  LOG(INFO) << "saved " << file << " at version " << hdr.version();
  return saved;
}

void RequestHandler::HandleRestore(const std::string& peer, const Message& m,
                                   std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (options_.checkpoint_dir.empty() && !h.restore().from_payload()) {
    return Refuse(peer, h, absl::FailedPreconditionError(
        "RESTORE: this ps was started without --checkpoint_dir"), out);
  }
  if (h.restore().step() < 0 || h.restore().step() > kMaxCheckpointStep ||
      m.has_payload != h.restore().from_payload()) {
    return Refuse(peer, h, absl::InvalidArgumentError(
        "RESTORE needs a step in [0, 2^48], and a payload exactly when from_payload"), out);
  }
  const bool rollback = h.restore().rollback() && initialized();
  if (h.restore().generation() < 0 || h.restore().generation() > kMaxCheckpointStep) {
    return Refuse(peer, h, absl::InvalidArgumentError("RESTORE: generation out of range"), out);
  }
  if (h.restore().verify_only()) {
    absl::Status s = rollback ? CheckInitFields(h) : CheckInit(h);
    if (s.ok()) s = LoadCheckpoint(h).status();
    if (!s.ok()) return Refuse(peer, h, s, out);
    out->push_back({peer, MakeReply(h), false, /*record=*/true});
    return;
  }
  const int64_t version_before = version();
  if (absl::Status s = Restore(m, out); !s.ok()) {
    LOG(ERROR) << "RESTORE of " << CheckpointName(h.restore().step()) << " refused: " << s.message();
    return Refuse(peer, h, s, out);
  }
  if (!rollback) {
    LOG(INFO) << "restored by the chief from "
              << (h.restore().from_payload() ? std::string("its standby's replica")
                                             : CheckpointName(h.restore().step()))
              << " (version " << version() << ", generation " << generation_ << ")";
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
  const int shards = num_shards_ != 0 ? num_shards_ : h.num_shards();
  const std::string path = absl::StrCat(
      options_.checkpoint_dir, "/", ShardFileName(h.restore().step(), options_.shard_index, shards));
  ASSIGN_OR_RETURN(ShardCheckpoint c, ReadShardCheckpoint(path));
  const ShardCheckpointExpectation expected{options_.shard_index, shards,
                                            h.range_begin(),      h.range_end(),
                                            h.plan_fingerprint(), h.restore().checksum(),
                                            &h.job()};
  RETURN_IF_ERROR(CheckShardCheckpoint(c, expected, path));
  const auto n = static_cast<int64_t>(h.range_end() - h.range_begin());
  if (c.header.version() < 0 || c.header.version() > kMaxCheckpointStep || c.header.updates() < 0 ||
      !IsFiniteState(c.state, n)) {
    return absl::DataLossError(absl::StrCat(path, ": damaged checkpoint: a version, update count "
                                                  "or value out of range"));
  }
  return c;
}

absl::Status RequestHandler::Restore(const Message& m, std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  const bool rollback = h.restore().rollback() && initialized();
  RETURN_IF_ERROR(rollback ? CheckInitFields(h) : CheckInit(h));
  ASSIGN_OR_RETURN(ShardCheckpoint c,
                   h.restore().from_payload() ? StateFromPayload(m) : LoadCheckpoint(h));
  if (rollback) {
    // Whatever waits here was computed on the state being undone.
    AbortParked(RejoinError(absl::StrCat("shard ", options_.shard_index, " was rolled back to ",
                                         CheckpointName(h.restore().step()),
                                         " by the chief: register again")),
                out);
  }
  ASSIGN_OR_RETURN(const OptimizerConfig optimizer, OptimizerFromJob(h.job()));
  if (c.state.size() != StateFloats(optimizer, h.range_end() - h.range_begin())) {
    return absl::InvalidArgumentError("RESTORE: a state of another size than the shard's");
  }
  auto store = std::make_unique<ShardStore>(std::move(c.state), c.header.updates(), optimizer,
                                            options_.update_pool);
  ASSIGN_OR_RETURN(std::unique_ptr<UpdatePolicy> policy, CreateUpdatePolicy(h.job(), std::move(store)));
  policy->Resume(c.header.version(), c.header.worker_clocks());
  for (int rank = 0; rank < workers_.size(); ++rank) {
    bool refused = false;
    if (workers_.dead(rank)) policy->SetActive(rank, false, &refused);
  }
  Install(h, std::move(policy));
  restored_ = true;
  generation_ = h.restore().generation();
  // A moved shard's term grows, so that a copy left behind (a frozen ps
  // that wakes) is never taken for it.
  term_ = h.restore().from_payload() ? std::max(h.restore().term(), h.replica().term() + 1)
                                     : h.restore().term();
  // Each rank gets the whole peer timeout to register (dynamic workers:
  // those heard from; the others are absent until they are).
  if (!options_.dynamic_workers) workers_.NoteAllAlive();
  // The counters go on from where the checkpoint left them; this process's
  // recovery counters go on from where they are.
  const proto::ShardStats live = stats_;
  stats_ = c.header.stats();
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

}  // namespace pstrain

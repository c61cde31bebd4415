// The worker runtime's recovery of the shards (the chief's side): what
// STATS says of them, restoring lost shards from a checkpoint, the initial
// parameters or their standbys, and failover (a standby serving a lost ps's
// shard until that ps is back). Kept apart from worker_runtime.cc so that
// each file stays readable; docs/decisions/0012-the-chief-restores.md and
// docs/decisions/0016-failover-terms-and-failback.md.

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/optimizer.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/worker_runtime.h"

namespace pstrain {

WorkerRuntime::ShardCensus WorkerRuntime::ShardCensus::Of(const std::vector<proto::ShardStats>& stats) {
  ShardCensus c;
  std::set<int64_t> generations;
  c.min_version = INT64_MAX;
  const int n = static_cast<int>(stats.size());
  c.max_term.assign(n, 0);
  for (int j = 0; j < n; ++j) {
    // A shard's term where it is served, and where a standby holds a
    // replica of it (one that froze, or a replica older than a restore).
    c.max_term[j] = std::max(c.max_term[j], stats[j].term());
    const int64_t r = stats[j].replica_shard();
    if (r >= 0 && r < n) c.max_term[r] = std::max(c.max_term[r], stats[j].replica_term());
  }
  for (int k = 0; k < static_cast<int>(stats.size()); ++k) {
    if (!stats[k].initialized()) {
      c.empty.push_back(k);
      c.names.push_back(TaskId{TaskType::kPs, k}.ToString());
      continue;
    }
    generations.insert(stats[k].generation());
    c.max_generation = std::max(c.max_generation, stats[k].generation());
    c.max_version = std::max(c.max_version, stats[k].version());
    c.min_version = std::min(c.min_version, stats[k].version());
  }
  if (c.min_version == INT64_MAX) c.min_version = 0;
  c.generations = static_cast<int>(generations.size());
  return c;
}

absl::Status WorkerRuntime::RecoverShards(bool first) {
  const int64_t t0 = MonotonicMicros();
  if (options_.train.ps_replicas > 0) {
    // A shard's own ps is back: it serves the shard again (the placement
    // is the spec's again, and the adopter is its standby again).
    if (absl::Status s = FailBack(client_->ShardsWhoseHomeIsBack()); !s.ok()) {
      return MarkRejoin(s);  // tried again at the next join
    }
  }
  ASSIGN_OR_RETURN(const std::vector<proto::ShardStats> stats,
                   client_->Stats(first ? 0.0 : options_.train.recovery_timeout_s));
  if (options_.train.ps_replicas > 0) RETURN_IF_ERROR(RestoreStaleFromStandbys(stats, t0));
  const ShardCensus census = ShardCensus::Of(stats);
  const std::vector<int>& empty = census.empty;
  const std::vector<std::string>& names = census.names;
  const int64_t max_generation = census.max_generation, max_version = census.max_version;
  const bool sync = options_.train.mode == proto::SYNC;
  const int num_shards = static_cast<int>(stats.size());
  if (static_cast<int>(empty.size()) == num_shards && first && !options_.train.restore)
    return InitFresh();
  // A chief that died in the middle of a sync rollback left the shards at
  // different generations: roll them back again, together.
  // So did one whose shards are more than a version apart (a shard
  // restored from an old state): no step can join them up.
  const bool torn = sync && (census.generations > 1 || census.max_version - census.min_version > 1);
  if (empty.empty() && !torn) return absl::OkStatus();  // a live job: just register
  if (!empty.empty() && options_.train.ps_replicas > 0) {
    const absl::Status s = RestoreFromStandbys(empty, max_generation, max_version, t0);
    if (s.ok() || IsRejoin(s)) return s;
    LOG(WARNING) << "cannot restore from the standbys (" << s.message()
                 << "); restoring from the newest checkpoint instead";
  }
  RestoreScope scope;
  scope.generation = max_generation + 1;
  scope.rollback = sync;
  if (!sync) scope.shards = empty;
  if (options_.train.ps_replicas > 0) {
    // A restored shard is a newer state than any copy of it that is left.
    for (int64_t t : census.max_term) scope.terms.push_back(t + 1);
  }
  absl::StatusOr<proto::CheckpointManifest> resumed =
      checkpointer_ != nullptr ? checkpointer_->Resume(scope)
                               : absl::FailedPreconditionError("the chief has no --checkpoint_dir");
  if (!resumed.ok() && absl::IsFailedPrecondition(resumed.status()) &&
      !(first && options_.train.restore)) {
    // No checkpoint yet (a ps lost before ckpt-0 was written), or none at
    // all: the job's step 0 is the one state the chief can always rebuild.
    LOG(WARNING) << absl::StrJoin(names, ", ") << " lost its state and there is no usable "
                 << "checkpoint (" << resumed.status().message()
                 << "): restoring from the initial parameters (step 0)";
    return RestoreInitialState(scope, empty, max_version, t0);
  }
  ASSIGN_OR_RETURN(const proto::CheckpointManifest m, std::move(resumed));
  if (first && options_.train.restore && static_cast<int>(empty.size()) == num_shards) {
    resumed_from_ = CheckpointName(m.step());
    return absl::OkStatus();
  }
  RecordCheckpointRecovery(m, stats, census, t0);
  return absl::OkStatus();
}

void WorkerRuntime::RecordCheckpointRecovery(const proto::CheckpointManifest& m,
                                       const std::vector<proto::ShardStats>& stats,
                                       const ShardCensus& census, int64_t t0) {
  const bool sync = options_.train.mode == proto::SYNC;
  const std::vector<int>& empty = census.empty;
  proto::Recovery r;
  r.set_checkpoint(CheckpointName(m.step()));
  r.set_source("checkpoint");
  for (int k : empty) r.add_shards_restored(k);
  int64_t to_version = 0, lost = 0, from_version = 0;
  for (const proto::SavedShard& saved : m.shards()) {
    const int k = saved.shard_index();
    const bool restored = sync || std::count(empty.begin(), empty.end(), k) > 0;
    if (!restored) continue;
    if (sync && stats[k].initialized()) r.add_shards_rolled_back(k);
    // What the shard had: a live one says; of a dead one, the chief knows
    // the last version it was answered (a lower bound).
    const int64_t had =
        sync ? census.max_version : std::max<int64_t>(versions_[k], saved.version());
    from_version = std::max(from_version, had);
    to_version = std::max(to_version, saved.version());
    lost += sync ? 0 : had - saved.version();
  }
  if (sync) lost = std::max<int64_t>(0, census.max_version - to_version);
  r.set_from_version(static_cast<int32_t>(from_version));
  r.set_to_version(static_cast<int32_t>(to_version));
  r.set_updates_lost(static_cast<int32_t>(lost));
  r.set_what(absl::StrCat(empty.empty() ? "shards at different generations"
                                        : absl::StrJoin(census.names, ", ") + " restarted empty",
                          ": ", sync ? "every shard rolled back to " : "restored alone from ",
                          CheckpointName(m.step())));
  r.set_seconds(SecondsSince(t0));
  RecordRecovery(std::move(r));
}

absl::Status WorkerRuntime::RestoreInitialState(const RestoreScope& scope, const std::vector<int>& empty,
                                          int64_t max_version, int64_t t0) {
  options_.initial_params(params_);
  proto::ReplicaState initial;
  for (int r = 0; r < num_workers_; ++r) initial.add_worker_clocks(0);
  proto::Recovery rec;
  rec.set_source("initial parameters");
  int64_t lost = 0;
  for (int k = 0; k < plan_->num_shards(); ++k) {
    const bool was_empty = std::count(empty.begin(), empty.end(), k) > 0;
    if (!scope.rollback && !was_empty) continue;
    std::vector<float> state;
    std::vector<int64_t> counts;
    RETURN_IF_ERROR(InitialShardState(k, &state, &counts));
    proto::ReplicaState shard_initial = initial;
    int64_t updates = 0;
    for (int64_t c : counts) updates = std::max(updates, c);
    shard_initial.set_updates(updates);
    *shard_initial.mutable_segment_updates() = {counts.begin(), counts.end()};
    RETURN_IF_ERROR(client_->RestoreFromState(
        MakeJobConfig(), k, shard_initial, state, scope.generation, scope.rollback,
        /*stats=*/nullptr, k < static_cast<int>(scope.terms.size()) ? scope.terms[k] : 0));
    if (was_empty) rec.add_shards_restored(k);
    if (!was_empty) rec.add_shards_rolled_back(k);
    if (!scope.rollback) lost += versions_[k];
  }
  if (scope.rollback) lost = max_version;
  rec.set_from_version(static_cast<int32_t>(scope.rollback ? max_version : lost));
  rec.set_to_version(0);
  rec.set_updates_lost(static_cast<int32_t>(lost));
  rec.set_what(scope.rollback ? "no checkpoint: every shard back to the initial parameters"
                              : "no checkpoint: the lost shard(s) back to the initial parameters");
  rec.set_seconds(SecondsSince(t0));
  RecordRecovery(std::move(rec));
  return absl::OkStatus();
}

absl::Status WorkerRuntime::RestoreFromStandbys(const std::vector<int>& empty, int64_t generation,
                                          int64_t max_version, int64_t t0) {
  const int n = plan_->num_shards();
  proto::Recovery r;
  r.set_source("standby");
  std::vector<std::string> what;
  int64_t version = 0;
  for (int k : empty) {
    const int holder = (k + 1) % n;
    if (std::count(empty.begin(), empty.end(), holder) > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("ps:", holder, ", the standby of shard ", k, ", lost its state too"));
    }
    ReplicaRestore how;
    how.generation = generation;
    ASSIGN_OR_RETURN(const proto::Header h,
                     client_->RestoreFromReplica(
                         MakeJobConfig(), holder, k, how, [&](const proto::Header& replica) {
                           return CheckReplicaUsable(k, replica.replica().version(), max_version);
                         }));
    r.add_shards_restored(k);
    version = std::max(version, h.replica().version());
    what.push_back(absl::StrCat("ps:", k, " from its standby ps:", holder, " at version ",
                                h.replica().version()));
  }
  r.set_from_version(static_cast<int32_t>(version));
  r.set_to_version(static_cast<int32_t>(version));
  r.set_updates_lost(0);  // the standby has every state a worker saw
  r.set_what(absl::StrCat(absl::StrJoin(what, ", "), " restored; nothing rolled back"));
  r.set_seconds(SecondsSince(t0));
  RecordRecovery(std::move(r));
  return absl::OkStatus();
}
void WorkerRuntime::RecordRecovery(proto::Recovery recovery) {
  recovery.set_at(absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  LOG(WARNING) << "recovered: " << recovery.what() << "; " << recovery.updates_lost()
               << " updates lost (version " << recovery.from_version() << " -> "
               << recovery.to_version() << ")";
  if (options_.train.run_dir.empty()) return;
  proto::RecoveryLog log;
  const std::string path = options_.train.run_dir + "/recoveries.json";
  if (auto text = ReadFileToString(path); text.ok()) {
    if (!ParseJsonMessage(*text, path, &log).ok()) log.Clear();
  }
  *log.add_recoveries() = std::move(recovery);
  if (absl::Status s = WriteFileAtomic(path, ToJson(log)); !s.ok()) LOG(ERROR) << s.message();
}

absl::Status WorkerRuntime::AddRecoveries(proto::RunSummary* summary) const {
  if (options_.train.run_dir.empty()) return absl::OkStatus();
  const std::string path = options_.train.run_dir + "/recoveries.json";
  if (!FileExists(path)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  proto::RecoveryLog log;
  RETURN_IF_ERROR(ParseJsonMessage(text, path, &log));
  int64_t lost = 0;
  for (const proto::Recovery& r : log.recoveries()) {
    *summary->add_recoveries() = r;
    lost += r.updates_lost();
  }
  summary->set_updates_lost(static_cast<int32_t>(lost));
  return absl::OkStatus();
}
absl::Status WorkerRuntime::CheckReplicaUsable(int shard, int64_t replica_version,
                                         int64_t max_version) const {
  // Sync: a shard may be one version behind the others (they applied the
  // step whose gradient its replica lacks; the workers send it again), not
  // more. A standby that fell behind (it was silent, and its primary went
  // on without it) holds such a state.
  if (options_.train.mode != proto::SYNC || replica_version >= max_version - 1) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the standby's replica of shard ", shard, " is at version ", replica_version,
                   ", more than one behind the other shards (", max_version, ")"));
}

absl::Status WorkerRuntime::WaitForShards() {
  if (!is_chief_ || options_.train.ps_replicas == 0 || options_.train.failover_after_s <= 0) {
    return client_->WaitForServers();
  }
  const absl::Status s = client_->WaitForServers(options_.train.failover_after_s);
  if (s.ok() || !absl::IsUnavailable(s)) return s;
  FailOver(client_->UnservedShards());
  return client_->WaitForServers();
}

void WorkerRuntime::FailOver(const std::vector<int>& shards) {
  const int64_t t0 = MonotonicMicros();
  const int n = plan_->num_shards();
  const int64_t max_seen = *std::max_element(versions_.begin(), versions_.end());
  for (int k : shards) {
    const int holder = (k + 1) % n;
    const std::string away = TaskId{TaskType::kPs, k}.ToString();
    const std::string standby = TaskId{TaskType::kPs, holder}.ToString();
    // The heartbeat's view of the ps serving the shard lags (one beat a
    // --heartbeat_interval_s, none until a reconnected socket is up): a
    // ps it has not heard from since a rejoin may be serving. Asked
    // directly, one that answers is not failed over: a live ps whose shard
    // moved would go on serving its own copy to a worker that still routes
    // to it.
    const int serving = client_->route(k);
    if (client_->StatsOf(serving, options_.train.failover_after_s).ok()) {
      LOG(INFO) << "not failing shard " << k
                << " over: " << TaskId{TaskType::kPs, serving}.ToString() << " answers";
      continue;
    }
    auto held = client_->StatsOf(holder, /*timeout_s=*/5.0);
    if (!held.ok() || held->replica_shard() != k) {
      LOG(WARNING) << "cannot fail shard " << k << " over: its standby " << standby
                   << (held.ok() ? " holds no replica of it" : " does not answer either")
                   << "; waiting for " << away;
      continue;
    }
    if (absl::Status s = CheckReplicaUsable(k, held->replica_version(), max_seen); !s.ok()) {
      LOG(WARNING) << "cannot fail shard " << k << " over: " << s.message() << "; waiting for "
                   << away;
      continue;
    }
    auto adopted = client_->Adopt(k, holder);
    if (!adopted.ok()) {
      LOG(WARNING) << "cannot fail shard " << k << " over to " << standby << ": "
                   << adopted.status().message() << "; waiting for " << away;
      continue;
    }
    proto::Recovery r;
    r.set_source("failover");
    r.add_shards_restored(k);
    r.set_from_version(static_cast<int32_t>(versions_[k]));
    r.set_to_version(static_cast<int32_t>(adopted->version()));
    // The replica holds every state a worker was answered with: the chief
    // has seen no newer one unless the standby was lost meanwhile.
    r.set_updates_lost(
        static_cast<int32_t>(std::max<int64_t>(0, versions_[k] - adopted->version())));
    r.set_what(absl::StrCat(away, " stayed away ", options_.train.failover_after_s, " s: shard ", k,
                            " served by its standby ", standby, " from version ",
                            adopted->version(), " until it is back"));
    r.set_seconds(SecondsSince(t0));
    RecordRecovery(std::move(r));
  }
}

absl::Status WorkerRuntime::FailBack(const std::vector<int>& shards) {
  for (int k : shards) {
    const int64_t t0 = MonotonicMicros();
    const int holder = client_->route(k);
    const std::string home = TaskId{TaskType::kPs, k}.ToString();
    const std::string standby = TaskId{TaskType::kPs, holder}.ToString();
    ASSIGN_OR_RETURN(const proto::ShardStats at_home, client_->StatsOf(k, /*timeout_s=*/5.0));
    RETURN_IF_ERROR(client_->Release(k).status());
    // A ps that froze, and woke, still holds its old copy: it is replaced.
    ReplicaRestore how;
    how.rollback = at_home.initialized();
    ASSIGN_OR_RETURN(
        const proto::Header h,
        client_->RestoreFromReplica(MakeJobConfig(), holder, k, how, [&](const proto::Header&) {
          client_->SetRoute(k, k);
          return absl::OkStatus();
        }));
    proto::Recovery r;
    r.set_source("failback");
    r.add_shards_restored(k);
    r.set_from_version(static_cast<int32_t>(h.replica().version()));
    r.set_to_version(static_cast<int32_t>(h.replica().version()));
    r.set_updates_lost(0);
    r.set_what(absl::StrCat(home, " is back", at_home.initialized() ? " (it had frozen)" : "",
                            ": shard ", k, " moved back to it from ", standby, " at version ",
                            h.replica().version()));
    r.set_seconds(SecondsSince(t0));
    RecordRecovery(std::move(r));
  }
  return absl::OkStatus();
}

absl::Status WorkerRuntime::RestoreStaleFromStandbys(const std::vector<proto::ShardStats>& stats,
                                               int64_t t0) {
  const int n = plan_->num_shards();
  for (int k = 0; k < n; ++k) {
    const int holder = (k + 1) % n;
    if (!stats[k].initialized() || client_->route(k) == holder) continue;
    auto held = client_->StatsOf(holder, /*timeout_s=*/5.0);
    if (!held.ok() || held->replica_shard() != k || held->replica_term() <= stats[k].term())
      continue;
    // A give-back cut short (the chief died between RELEASE and RESTORE):
    // the shard's ps serves an older state than its standby holds.
    ReplicaRestore how;
    how.rollback = true;
    ASSIGN_OR_RETURN(
        const proto::Header h,
        client_->RestoreFromReplica(MakeJobConfig(), holder, k, how,
                                    [](const proto::Header&) { return absl::OkStatus(); }));
    proto::Recovery r;
    r.set_source("standby");
    r.add_shards_rolled_back(k);
    r.set_from_version(static_cast<int32_t>(stats[k].version()));
    r.set_to_version(static_cast<int32_t>(h.replica().version()));
    r.set_updates_lost(0);
    r.set_what(absl::StrCat("shard ", k, " was served at term ", stats[k].term(),
                            ", older than its standby's replica (term ", held->replica_term(),
                            "): restored from it"));
    r.set_seconds(SecondsSince(t0));
    RecordRecovery(std::move(r));
  }
  return absl::OkStatus();
}

}  // namespace pstrain

// PsClient's recovery calls: RESTORE (from a checkpoint or a standby's
// state), a standby's replica fetched, ADOPT and RELEASE of a shard
// (failover and failback), a ps's STATS and the chief's SAVE. Each is one
// call and its replies; the waiting is the client's (ps_client.cc).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/ps_client.h"

namespace pstrain {

absl::Status PsClient::Restore(const proto::JobConfig& job, int64_t step,
                               absl::Span<const proto::SavedShard> shards, bool verify_only,
                               const RestoreScope& scope) {
  CHECK_EQ(static_cast<int>(shards.size()), plan_.num_shards());
  std::vector<Call> calls;
  for (Call& c : ShardCalls(proto::RESTORE, 0, {})) {
    if (!scope.shards.empty() &&
        std::find(scope.shards.begin(), scope.shards.end(), c.shard) == scope.shards.end()) {
      continue;
    }
    *c.header.mutable_job() = job;
    proto::RestoreRequest* r = c.header.mutable_restore();
    r->set_step(step);
    r->set_checksum(shards[c.shard].checksum());
    r->set_embedding_checksum(shards[c.shard].embedding_checksum());
    r->set_verify_only(verify_only);
    r->set_rollback(scope.rollback);
    r->set_generation(scope.generation);
    if (c.shard < static_cast<int>(scope.terms.size())) r->set_term(scope.terms[c.shard]);
    calls.push_back(std::move(c));
  }
  return Exchange(&calls);
}

absl::StatusOr<proto::Header> PsClient::FetchReplica(int holder, int shard,
                                                     std::vector<float>* state) {
  std::vector<Call> calls(1);
  calls[0].shard = shard;
  calls[0].socket = holder;
  calls[0].header = BaseHeader(proto::FETCH_REPLICA, shard);
  calls[0].raw = state;
  RETURN_IF_ERROR(Exchange(&calls));
  const proto::Header& r = calls[0].reply;
  const ShardRange range = plan_.range(shard);
  const absl::StatusOr<OptimizerConfig> optimizer = OptimizerFromJob(r.job());
  if (r.range_begin() != static_cast<uint64_t>(range.begin) ||
      r.range_end() != static_cast<uint64_t>(range.end) ||
      r.plan_fingerprint() != plan_.fingerprint() || !optimizer.ok() ||
      r.replica().tables_bytes() > kMaxTablesBytes ||
      state->size() != StateFloats(*optimizer, static_cast<uint64_t>(range.size())) +
                           TablesFloats(r.replica().tables_bytes())) {
    return absl::FailedPreconditionError(absl::StrCat(
        ShardName(holder), ": its replica of shard ", shard, " is of another plan or range"));
  }
  return r;
}

absl::Status PsClient::RestoreFromState(const proto::JobConfig& job, int shard,
                                        const proto::ReplicaState& replica,
                                        absl::Span<const float> state, int64_t generation,
                                        bool rollback, const proto::ShardStats* stats,
                                        int64_t min_term) {
  std::vector<Call> calls(1);
  calls[0].shard = shard;
  calls[0].header = BaseHeader(proto::RESTORE, shard);
  *calls[0].header.mutable_job() = job;
  *calls[0].header.mutable_replica() = replica;
  if (stats != nullptr) *calls[0].header.mutable_stats() = *stats;
  calls[0].header.mutable_restore()->set_from_payload(true);
  calls[0].header.mutable_restore()->set_generation(generation);
  calls[0].header.mutable_restore()->set_rollback(rollback);
  calls[0].header.mutable_restore()->set_term(min_term);
  calls[0].payload = {reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float)};
  return Exchange(&calls);
}

absl::StatusOr<proto::Header> PsClient::CallOne(proto::MessageType type, int shard, int ps,
                                                double timeout_s) {
  std::vector<Call> calls(1);
  calls[0].shard = shard;
  calls[0].socket = ps;
  calls[0].header = BaseHeader(type, shard);
  RETURN_IF_ERROR(Exchange(&calls, timeout_s));
  return calls[0].reply;
}

absl::StatusOr<proto::Header> PsClient::Adopt(int shard, int holder) {
  ASSIGN_OR_RETURN(proto::Header reply, CallOne(proto::ADOPT, shard, holder));
  SetRoute(shard, holder);
  return reply;
}

absl::StatusOr<proto::Header> PsClient::Release(int shard) {
  return CallOne(proto::RELEASE, shard, route_[shard]);
}

absl::StatusOr<proto::ShardStats> PsClient::StatsOf(int ps, double timeout_s) {
  ASSIGN_OR_RETURN(const proto::Header reply, CallOne(proto::STATS, ps, ps, timeout_s));
  return reply.stats();
}

absl::StatusOr<std::vector<proto::SavedShard>> PsClient::Save(int64_t step, int keep) {
  std::vector<Call> calls = ShardCalls(proto::SAVE, step, {});
  for (Call& c : calls) c.header.set_keep_checkpoints(keep);
  RETURN_IF_ERROR(Exchange(&calls));
  std::vector<proto::SavedShard> saved;
  for (const Call& c : calls) saved.push_back(c.reply.saved());
  return saved;
}

}  // namespace pstrain

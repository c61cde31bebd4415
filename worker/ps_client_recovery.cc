// PsClient's recovery calls: RESTORE (from a checkpoint or a standby's
// state), a standby's replica fetched, ADOPT and RELEASE of a shard
// (failover and failback), a ps's STATS and the chief's SAVE. Each is one
// call and its replies; the waiting is the client's (ps_client.cc).

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "transport/state_parts.h"
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

absl::Status PsClient::CheckReplicaHeader(int holder, int shard, const proto::Header& r,
                                          uint64_t* total) const {
  const ShardRange range = plan_.range(shard);
  const absl::StatusOr<OptimizerConfig> optimizer = OptimizerFromJob(r.job());
  if (r.range_begin() != static_cast<uint64_t>(range.begin) ||
      r.range_end() != static_cast<uint64_t>(range.end) ||
      r.plan_fingerprint() != plan_.fingerprint() || !optimizer.ok() ||
      r.replica().tables_bytes() > kMaxTablesBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        ShardName(holder), ": its replica of shard ", shard, " is of another plan or range"));
  }
  *total = StateWithTablesBytes(StateFloats(*optimizer, static_cast<uint64_t>(range.size())),
                                r.replica().tables_bytes());
  return absl::OkStatus();
}

PsClient::Call PsClient::ReplicaPartCall(int holder, int shard, uint64_t offset,
                                         uint64_t part_bytes, std::vector<float>* part) const {
  Call c;
  c.shard = shard;
  c.socket = holder;
  c.header = BaseHeader(proto::FETCH_REPLICA, shard);
  c.header.mutable_state_part()->set_offset(offset);
  c.header.mutable_state_part()->set_part_bytes(part_bytes);
  c.raw = part;
  return c;
}

absl::StatusOr<proto::Header> PsClient::RestoreFromReplica(
    const proto::JobConfig& job, int holder, int shard, const ReplicaRestore& how,
    const std::function<absl::Status(const proto::Header&)>& check) {
  proto::Header restore = BaseHeader(proto::RESTORE, shard);
  *restore.mutable_job() = job;
  // What a part may carry beside its header, in the fetch's reply and in
  // the RESTORE, both of which carry the job, the replica's state and its
  // counters (kStatePartHeaderRoom covers the latter two); at most
  // kRelayPartBytes whatever the message limit, so that the chief holds
  // that much of a state, not a whole one of up to the limit.
  const size_t part_bytes =
      std::min(StatePartBytes(options_.max_message_bytes, restore), kRelayPartBytes);
  if (part_bytes < kMinStatePartBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_message_mb=", options_.max_message_bytes >> 20,
                     " leaves no room for a part of a state beside its header"));
  }
  std::vector<float> part;
  std::vector<Call> fetch{ReplicaPartCall(holder, shard, 0, part_bytes, &part)};
  RETURN_IF_ERROR(Exchange(&fetch));
  const proto::Header first = fetch[0].reply;
  uint64_t total = 0;
  RETURN_IF_ERROR(CheckReplicaHeader(holder, shard, first, &total));
  const bool in_parts = first.has_state_part();
  const uint64_t stream = first.state_part().stream();
  // Whether `h` answers the part of this replica from byte `offset` with
  // `got`: of the same stream, where asked, not empty and within it.
  auto is_part = [&](const proto::Header& h, const std::vector<float>& got, uint64_t offset) {
    return h.has_state_part() && h.state_part().stream() == stream &&
           h.state_part().total() == total && h.state_part().offset() == offset && !got.empty() &&
           got.size() * sizeof(float) <= total - offset;
  };
  if (in_parts ? !is_part(first, part, 0) : part.size() * sizeof(float) != total) {
    return absl::FailedPreconditionError(absl::StrCat(ShardName(holder), ": its replica of shard ",
                                                      shard, " is not the size its header says"));
  }
  RETURN_IF_ERROR(check(first));
  if (in_parts) {
    LOG(INFO) << "relaying the replica of shard " << shard << " (" << total << " bytes) from "
              << ShardName(holder) << " in parts of " << part_bytes << " bytes";
  }
  *restore.mutable_replica() = first.replica();
  *restore.mutable_stats() = first.stats();
  proto::RestoreRequest* r = restore.mutable_restore();
  r->set_from_payload(true);
  r->set_generation(how.generation.value_or(first.replica().generation()));
  r->set_rollback(how.rollback);
  r->set_term(how.min_term);
  // A part at a time: restored from on the shard's own ps (whatever the
  // chief routes the shard to meanwhile) while the next is fetched from
  // the standby, so the chief holds two parts at most.
  const int64_t t0 = MonotonicMicros();
  std::vector<float> next_part;
  uint64_t offset = 0;
  int parts = 0;
  for (;;) {
    const uint64_t bytes = part.size() * sizeof(float);
    const uint64_t next_offset = offset + bytes;
    std::vector<Call> calls(1);
    calls[0].shard = shard;
    calls[0].socket = shard;
    calls[0].header = restore;
    if (in_parts) {
      proto::StatePart* p = calls[0].header.mutable_state_part();
      p->set_offset(offset);
      p->set_total(total);
      p->set_stream(stream);
    }
    calls[0].payload = {reinterpret_cast<const char*>(part.data()), bytes};
    if (next_offset < total) {
      calls.push_back(ReplicaPartCall(holder, shard, next_offset, part_bytes, &next_part));
    }
    RETURN_IF_ERROR(Exchange(&calls));
    ++parts;
    if (next_offset >= total) break;
    if (!is_part(calls[1].reply, next_part, next_offset)) {
      return absl::FailedPreconditionError(
          absl::StrCat(ShardName(holder), ": its replica of shard ", shard,
                       " changed while it was relayed; the shard's ps keeps what it had"));
    }
    part.swap(next_part);
    offset = next_offset;
  }
  if (in_parts) {
    LOG(INFO) << "relayed the replica of shard " << shard << " in " << parts << " parts in "
              << static_cast<double>(MonotonicMicros() - t0) * 1e-6 << " s";
  }
  return first;
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

absl::StatusOr<std::vector<proto::SavedShard>> PsClient::Save(int64_t step, int keep,
                                                              int64_t keep_from_step) {
  std::vector<Call> calls = ShardCalls(proto::SAVE, step, {});
  for (Call& c : calls) {
    c.header.set_keep_checkpoints(keep);
    c.header.set_keep_from_step(keep_from_step);
  }
  RETURN_IF_ERROR(Exchange(&calls));
  std::vector<proto::SavedShard> saved;
  for (const Call& c : calls) saved.push_back(c.reply.saved());
  return saved;
}

}  // namespace pstrain

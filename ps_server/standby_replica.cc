#include "ps_server/standby_replica.h"

#include "absl/strings/str_cat.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "ps_server/shard_store.h"

namespace pstrain {
namespace {

constexpr uint64_t kMaxRange = uint64_t{1} << 40;
constexpr int64_t kMaxVersion = int64_t{1} << 48;

}  // namespace

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

absl::StatusOr<ShardCheckpoint> StateFromPayload(const Message& m, int num_workers) {
  ASSIGN_OR_RETURN(const size_t floats, CheckState(m, num_workers));
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
  *c.header.mutable_segment_updates() = r.segment_updates();
  *c.header.mutable_worker_clocks() = r.worker_clocks();
  if (m.header.has_stats()) *c.header.mutable_stats() = m.header.stats();
  return c;
}

absl::Status StandbyReplica::Keep(const Principal& who, const Message& m, int num_shards,
                                  Refusal* refusal) {
  auto refuse = [&](Refusal why, absl::Status s) {
    if (refusal != nullptr) *refusal = why;
    return s;
  };
  const proto::Header& h = m.header;
  // Only the ps whose standby this one is: ps (index - 1) mod n, for its
  // own shard.
  const int primary = num_shards < 2 ? -1 : (shard_index_ + num_shards - 1) % num_shards;
  if (primary < 0 || who.role != Role::kPs || who.ps_index != primary ||
      h.shard_index() != primary) {
    return refuse(Refusal::kNotMyPrimary,
                  absl::PermissionDeniedError(absl::StrCat(
                      "this ps keeps the standby of ps:", primary, "'s shard only")));
  }
  if (h.num_shards() != num_shards) {
    return refuse(Refusal::kNotMyPrimary,
                  absl::InvalidArgumentError("REPLICATE from a cluster of another size"));
  }
  if (held_.held() && h.replica().term() < held_.header.replica().term()) {
    // The shard moved (it was adopted, and maybe given back) while its old
    // primary was away: that primary's state is older than the one held.
    return refuse(Refusal::kStaleTerm,
                  absl::FailedPreconditionError(absl::StrCat(
                      "REPLICATE of term ", h.replica().term(), ", older than the replica held (term ",
                      held_.header.replica().term(), "): shard ", primary,
                      " moved while this primary was away")));
  }
  absl::StatusOr<size_t> floats = CheckState(m, num_workers_);
  if (!floats.ok()) return refuse(Refusal::kBadState, floats.status());
  auto state = std::make_shared<std::vector<float>>(*floats);
  m.CopyPayloadTo(absl::MakeSpan(*state));
  if (!IsFiniteState(*state, static_cast<int64_t>(h.range_end() - h.range_begin()))) {
    return refuse(Refusal::kBadState,
                  absl::InvalidArgumentError("REPLICATE: a state not finite in f32"));
  }
  held_.header = h;
  held_.state = std::move(state);
  if (refusal != nullptr) *refusal = Refusal::kNone;
  return absl::OkStatus();
}

}  // namespace pstrain

#include "ps_server/standby_replica.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "ps_server/shard_store.h"

namespace pstrain {
namespace {

constexpr uint64_t kMaxRange = uint64_t{1} << 40;
constexpr int64_t kMaxVersion = int64_t{1} << 48;

// The floats of the state (without tables) of the range and optimizer
// `h` names.
absl::StatusOr<size_t> StateFloatsOf(const proto::Header& h) {
  if (h.range_end() <= h.range_begin() || h.range_end() > kMaxRange) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad range [", h.range_begin(), ", ", h.range_end(), ")"));
  }
  ASSIGN_OR_RETURN(const OptimizerConfig optimizer, OptimizerFromJob(h.job()));
  return StateFloats(optimizer, static_cast<size_t>(h.range_end() - h.range_begin()));
}

}  // namespace

absl::StatusOr<uint64_t> StatePayloadBytes(const proto::Header& h) {
  ASSIGN_OR_RETURN(const size_t floats, StateFloatsOf(h));
  const uint64_t tables = h.replica().tables_bytes();
  if (tables > kMaxTablesBytes) {
    return absl::InvalidArgumentError(absl::StrCat(tables, " bytes of embedding tables"));
  }
  return StateWithTablesBytes(floats, tables);
}

absl::StatusOr<size_t> CheckState(const Message& m, int num_workers) {
  const proto::Header& h = m.header;
  ASSIGN_OR_RETURN(const size_t floats, StateFloatsOf(h));
  const proto::ReplicaState& r = h.replica();
  const uint64_t tables = r.tables_bytes();
  if (h.encoding() != proto::F32 || (tables > 0) != (h.job().tables_size() > 0) ||
      tables > kMaxTablesBytes || m.payload_bytes() != StateWithTablesBytes(floats, tables)) {
    const OptimizerConfig optimizer = *OptimizerFromJob(h.job());  // StateFloatsOf read it
    const size_t n = static_cast<size_t>(h.range_end() - h.range_begin());
    return absl::InvalidArgumentError(
        absl::StrCat("a state of ", m.payload_bytes(), " bytes for a range of ", n, " floats and ",
                     OptimizerName(optimizer.kind), "'s ", NumSlots(optimizer), " slot(s), and ",
                     tables, " bytes of ", h.job().tables_size(), " embedding table(s)"));
  }
  if (r.version() < 0 || r.version() > kMaxVersion || r.updates() < 0 ||
      (r.worker_clocks_size() != 0 && r.worker_clocks_size() != num_workers)) {
    return absl::InvalidArgumentError("a state whose version, update count or clocks are out of range");
  }
  for (int64_t c : r.worker_clocks()) {
    if (c < 0 || c > kMaxVersion) return absl::InvalidArgumentError("a worker clock out of range");
  }
  return floats;
}

namespace {

// The first `floats` floats of a payload CheckState accepted (the state;
// the tables' bytes may follow).
std::vector<float> StateOf(const Message& m, size_t floats) {
  std::vector<float> state(floats);
  if (floats > 0) std::memcpy(state.data(), m.PayloadBytes().data(), floats * sizeof(float));
  return state;
}

}  // namespace

absl::string_view TablesOf(const Message& m, size_t floats) {
  const absl::Span<const char> bytes = m.PayloadBytes();
  return {bytes.data() + floats * sizeof(float),
          static_cast<size_t>(m.header.replica().tables_bytes())};
}

std::vector<float> ReplicaPayload(const HeldReplica& replica, proto::ReplicaState* r) {
  std::vector<float> payload(replica.state->begin(), replica.state->end());
  if (replica.tables == nullptr) return payload;
  const std::string tables = replica.tables->Encode(replica.header.replica().version());
  r->set_tables_bytes(tables.size());
  r->set_tables_delta(false);
  AppendTables(tables, &payload);
  return payload;
}

void AppendTables(const std::string& bytes, std::vector<float>* payload) {
  const size_t floats = payload->size();
  payload->resize(floats + TablesFloats(bytes.size()), 0.0f);
  if (!bytes.empty()) std::memcpy(payload->data() + floats, bytes.data(), bytes.size());
}

absl::StatusOr<ShardCheckpoint> StateFromPayload(const Message& m, int num_workers) {
  ASSIGN_OR_RETURN(const size_t floats, CheckState(m, num_workers));
  ShardCheckpoint c;
  c.state = StateOf(m, floats);
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

absl::Status StandbyReplica::Admit(const Principal& who, const proto::Header& h, int num_shards,
                                   Refusal* refusal) const {
  auto refuse = [&](Refusal why, absl::Status s) {
    if (refusal != nullptr) *refusal = why;
    return s;
  };
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
  return absl::OkStatus();
}

absl::Status StandbyReplica::Keep(const Principal& who, const Message& m, int num_shards,
                                  Refusal* refusal) {
  auto refuse = [&](Refusal why, absl::Status s) {
    if (refusal != nullptr) *refusal = why;
    return s;
  };
  const proto::Header& h = m.header;
  RETURN_IF_ERROR(Admit(who, h, num_shards, refusal));
  absl::StatusOr<size_t> floats = CheckState(m, num_workers_);
  if (!floats.ok()) return refuse(Refusal::kBadState, floats.status());
  auto state = std::make_shared<std::vector<float>>(StateOf(m, *floats));
  if (!IsFiniteState(*state, static_cast<int64_t>(h.range_end() - h.range_begin()))) {
    return refuse(Refusal::kBadState,
                  absl::InvalidArgumentError("REPLICATE: a state not finite in f32"));
  }
  if (h.job().tables_size() > 0) {
    if (absl::Status s = KeepTables(m, *floats, num_shards); !s.ok()) {
      return refuse(s.code() == absl::StatusCode::kFailedPrecondition ? Refusal::kTablesBehind
                                                                      : Refusal::kBadState,
                    s);
    }
  } else {
    held_.tables = nullptr;
  }
  held_.header = h;
  held_.state = std::move(state);
  ++changes_;
  if (refusal != nullptr) *refusal = Refusal::kNone;
  return absl::OkStatus();
}

absl::Status StandbyReplica::KeepTables(const Message& m, size_t floats, int num_shards) {
  const proto::ReplicaState& r = m.header.replica();
  const absl::string_view bytes = TablesOf(m, floats);
  if (absl::Status s = ValidateEmbeddingTables(m.header.job()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("REPLICATE: ", s.message()));
  }
  if (!r.tables_delta()) {
    auto tables =
        std::make_shared<EmbeddingTables>(m.header.job(), m.header.shard_index(), num_shards);
    RETURN_IF_ERROR(tables->ApplyEncoded(bytes, /*delta=*/false, "REPLICATE's tables"));
    held_.tables = std::move(tables);
    return absl::OkStatus();
  }
  const proto::ReplicaState& mine = held_.header.replica();
  if (held_.tables == nullptr || mine.primary_instance() != r.primary_instance() ||
      mine.tables_epoch() != r.tables_epoch() || held_.tables->clock() < r.tables_since() ||
      held_.header.job().SerializeAsString() != m.header.job().SerializeAsString()) {
    return absl::FailedPreconditionError(
        absl::StrCat("REPLICATE: a delta of the tables after clock ", r.tables_since(),
                     " of tables this standby does not hold; send them whole"));
  }
  if (absl::Status s = held_.tables->ApplyEncoded(bytes, /*delta=*/true, "REPLICATE's tables");
      !s.ok()) {
    held_.tables = nullptr;  // part applied: of no use until they come whole
    ++changes_;
    return s;
  }
  return absl::OkStatus();
}

}  // namespace pstrain

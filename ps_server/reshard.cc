#include "ps_server/reshard.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/embedding_checkpoint.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_checkpoint.h"
#include "common/optimizer.h"
#include "common/param_groups.h"
#include "common/shard_plan.h"
#include "common/status_macros.h"
#include "ps_server/embedding_tables.h"

namespace pstrain {
namespace {

// The newest checkpoint of `dir` whose manifest reads.
absl::StatusOr<proto::CheckpointManifest> NewestManifest(const std::string& dir) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCheckpointSteps(dir));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    absl::StatusOr<proto::CheckpointManifest> m = ReadManifest(dir, *it);
    if (m.ok()) return m;
  }
  return absl::NotFoundError(absl::StrCat(dir, " holds no checkpoint with a manifest"));
}

// The flag `name`'s value in a manifest's recorded flags ("" if absent).
std::string RecordedFlag(const proto::CheckpointManifest& m, const std::string& name) {
  return pstrain::RecordedFlag(std::vector<std::string>(m.flags().begin(), m.flags().end()), name);
}

absl::StatusOr<ShardPlan> PlanOf(const proto::CheckpointManifest& m, int num_ps) {
  std::vector<TensorSlot> tensors;
  for (const proto::TensorLayout& l : m.job().layout()) {
    tensors.push_back({l.name(), l.size(), l.group()});
  }
  const std::string strategy_name = RecordedFlag(m, "shard_strategy");
  ASSIGN_OR_RETURN(const ShardStrategy strategy,
                   ParseShardStrategy(strategy_name.empty() ? "balanced" : strategy_name));
  return ShardPlan::Create(m.job().model(), tensors, num_ps, strategy);
}

// The whole model's state from the old shards: the flat parameters, each
// slot after them (common/optimizer.h's order), each tensor's step count.
struct FlatState {
  std::vector<float> state;  // (1 + slots) x total
  std::vector<int64_t> tensor_updates;
};

}  // namespace

absl::StatusOr<ReshardResult> ReshardCheckpoint(const std::string& dir, int num_ps) {
  ASSIGN_OR_RETURN(const proto::CheckpointManifest m, NewestManifest(dir));
  const int64_t step = m.step();
  const int n = m.shards_size();
  ReshardResult result{step, n, num_ps, 0, 0};
  const proto::JobConfig& job = m.job();
  if (job.layout_size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        ManifestFileName(step), ": a manifest without the model's layout (an older chief's) "
        "cannot be cut again"));
  }
  if (n == num_ps) return result;
  ASSIGN_OR_RETURN(const ShardPlan old_plan, PlanOf(m, n));
  if (old_plan.fingerprint() != m.plan_fingerprint()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ManifestFileName(step), ": its plan is not the one its layout and --shard_strategy make"));
  }
  ASSIGN_OR_RETURN(const ShardPlan plan, PlanOf(m, num_ps));
  ASSIGN_OR_RETURN(const OptimizerConfig optimizer, OptimizerFromJob(job));
  const auto total = static_cast<size_t>(old_plan.total_size());
  const int slots = NumSlots(optimizer);

  // Read everything first: a damaged file changes nothing.
  std::vector<ShardCheckpoint> old(n);
  FlatState flat;
  flat.state.resize((1 + slots) * total);
  flat.tensor_updates.assign(job.layout_size(), 0);
  for (int j = 0; j < n; ++j) {
    const std::string path = absl::StrCat(dir, "/", ShardFileName(step, j, n));
    ASSIGN_OR_RETURN(old[j], ReadShardCheckpoint(path));
    const ShardRange r = old_plan.range(j);
    const ShardCheckpointExpectation expected{j, n, static_cast<uint64_t>(r.begin),
                                              static_cast<uint64_t>(r.end), m.plan_fingerprint(),
                                              m.shards(j).checksum(), &job};
    RETURN_IF_ERROR(CheckShardCheckpoint(old[j], expected, path));
    const auto size = static_cast<size_t>(r.size());
    for (int k = 0; k <= slots; ++k) {
      std::copy(old[j].state.begin() + k * size, old[j].state.begin() + (k + 1) * size,
                flat.state.begin() + k * total + r.begin);
    }
    const std::vector<TensorSegment> segments = SegmentsOf(job, r);
    for (size_t s = 0; s < segments.size(); ++s) {
      const int64_t count = old[j].header.segment_updates_size() > 0
                                ? old[j].header.segment_updates(static_cast<int>(s))
                                : old[j].header.updates();
      flat.tensor_updates[segments[s].tensor] = count;
    }
  }
  std::vector<EmbeddingTables> old_tables;
  for (int j = 0; j < n && job.tables_size() > 0; ++j) {
    ASSIGN_OR_RETURN(EmbeddingTables t,
                     EmbeddingTables::Load(job, j, n, dir, step, m.shards(j).embedding_checksum(),
                                           old[j].header.version()));
    old_tables.push_back(std::move(t));
  }

  proto::CheckpointManifest resharded = m;
  resharded.set_plan_fingerprint(plan.fingerprint());
  resharded.clear_shards();
  const std::string keep_flag = RecordedFlag(m, "keep_checkpoints");
  const int keep = keep_flag.empty() ? 3 : std::max(1, std::atoi(keep_flag.c_str()));
  for (int k = 0; k < num_ps; ++k) {
    const ShardRange r = plan.range(k);
    ShardCheckpoint c;
    proto::ShardCheckpointHeader& h = c.header;
    h.set_step(step);
    h.set_shard_index(k);
    h.set_num_shards(num_ps);
    h.set_range_begin(static_cast<uint64_t>(r.begin));
    h.set_range_end(static_cast<uint64_t>(r.end));
    h.set_plan_fingerprint(plan.fingerprint());
    h.set_job_id(old[0].header.job_id());
    *h.mutable_job() = job;
    h.mutable_stats()->set_shard_index(k);
    // The old shards this one overlaps: its version and clocks are theirs
    // (the lowest, in async and SSP, where they differ).
    int64_t version = INT64_MAX;
    std::vector<int64_t> clocks;
    for (int j = 0; j < n; ++j) {
      const ShardRange o = old_plan.range(j);
      if (o.end <= r.begin || o.begin >= r.end) continue;
      version = std::min(version, old[j].header.version());
      const auto& theirs = old[j].header.worker_clocks();
      if (clocks.empty()) clocks.assign(theirs.begin(), theirs.end());
      for (int i = 0; i < theirs.size() && i < static_cast<int>(clocks.size()); ++i) {
        clocks[i] = std::min(clocks[i], theirs[i]);
      }
    }
    h.set_version(version);
    *h.mutable_worker_clocks() = {clocks.begin(), clocks.end()};
    int64_t updates = 0;
    bool uniform = true;
    const std::vector<TensorSegment> segments = SegmentsOf(job, r);
    for (const TensorSegment& s : segments) {
      const int64_t count = flat.tensor_updates[s.tensor];
      h.add_segment_updates(count);
      uniform = uniform && count == flat.tensor_updates[segments[0].tensor];
      updates = std::max(updates, count);
    }
    h.set_updates(updates);
    if (uniform) h.clear_segment_updates();
    for (int s = 0; s <= slots; ++s) {
      c.state.insert(c.state.end(), flat.state.begin() + s * total + r.begin,
                     flat.state.begin() + s * total + r.end);
    }
    const std::string file = ShardFileName(step, k, num_ps);
    RETURN_IF_ERROR(WriteShardCheckpoint(absl::StrCat(dir, "/", file), &c));
    proto::SavedShard* saved = resharded.add_shards();
    saved->set_shard_index(k);
    saved->set_file(file);
    saved->set_checksum(h.payload_checksum());
    saved->set_version(version);
    saved->set_payload_bytes(h.payload_bytes());
    *saved->mutable_worker_steps() = h.worker_clocks();
    if (!old_tables.empty()) {
      EmbeddingTables tables =
          EmbeddingTables::Resharded(old_tables, job, k, num_ps, &result.rows);
      // Nothing pruned here: every other checkpoint goes below.
      RETURN_IF_ERROR(tables.Save(dir, step, version, keep, /*keep_from_step=*/0, saved));
    }
  }
  RETURN_IF_ERROR(WriteManifest(dir, resharded));

  // The old count's files, and every other checkpoint (no job of the new
  // count can restore them).
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCheckpointSteps(dir));
  for (int64_t s : steps) {
    const std::string path = CheckpointPath(dir, s);
    std::error_code ec;
    if (s != step) {
      std::filesystem::remove_all(path, ec);
      ++result.removed;
      continue;
    }
    for (int j = 0; j < n; ++j) {
      std::filesystem::remove(absl::StrCat(dir, "/", ShardFileName(s, j, n)), ec);
      std::filesystem::remove(absl::StrCat(dir, "/", EmbeddingFileName(s, j, n)), ec);
    }
  }
  return result;
}

}  // namespace pstrain

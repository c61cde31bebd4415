#include "export/saved_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_checkpoint.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "models/net_spec.h"
#include "proto/checkpoint.pb.h"
#include "proto/run_summary.pb.h"

namespace pstrain {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A damaged file the user pointed at is bad input (exit 2), not a run-time
// failure.
absl::Status AsBadInput(const absl::Status& s) {
  if (s.ok() || absl::IsNotFound(s) || absl::IsInvalidArgument(s)) return s;
  return absl::InvalidArgumentError(s.message());
}

// The flags a run recorded: launch.json's, else none.
absl::StatusOr<std::vector<std::string>> LaunchFlags(const std::string& run_dir) {
  const std::string path = run_dir + "/launch.json";
  if (!FileExists(path)) return std::vector<std::string>{};
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  proto::LaunchRecord record;
  RETURN_IF_ERROR(AsBadInput(ParseJsonMessage(text, path, &record)));
  return std::vector<std::string>(record.flags().begin(), record.flags().end());
}

// summary.json, when there is one.
absl::StatusOr<proto::RunSummary> Summary(const std::string& run_dir, bool* found) {
  const std::string path = run_dir + "/summary.json";
  proto::RunSummary summary;
  *found = FileExists(path);
  if (!*found) return summary;
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  RETURN_IF_ERROR(AsBadInput(ParseJsonMessage(text, path, &summary, /*ignore_unknown=*/true)));
  return summary;
}

absl::StatusOr<std::vector<float>> ReadFloats(const std::string& path, int64_t expected) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
  if (static_cast<int64_t>(bytes.size()) != expected * 4) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.size(),
                                                   " bytes; the model has ", expected,
                                                   " parameters (", expected * 4, " bytes)"));
  }
  std::vector<float> params(static_cast<size_t>(expected));
  std::memcpy(params.data(), bytes.data(), bytes.size());
  return params;
}

// Reads checkpoint `step` of `dir` and puts its shards together.
absl::StatusOr<std::vector<float>> ReadCheckpoint(const std::string& dir, int64_t step,
                                                  const proto::CheckpointManifest& m) {
  const std::string where = CheckpointPath(dir, step);
  if (m.num_params() <= 0 || m.num_params() > (int64_t{1} << 36) || m.shards_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "/manifest.json: no parameters or no shards"));
  }
  std::vector<float> params(static_cast<size_t>(m.num_params()));
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const proto::SavedShard& s : m.shards()) {
    if (s.file().empty() || absl::StrContains(s.file(), "..") || s.file()[0] == '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "/manifest.json: bad shard file name \"", s.file(), "\""));
    }
    const std::string path = absl::StrCat(dir, "/", s.file());
    auto read = ReadShardCheckpoint(path);
    if (!read.ok()) return AsBadInput(read.status());
    const ShardCheckpoint& c = *read;
    if (c.header.payload_checksum() != s.checksum()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": its checksum is not the manifest's"));
    }
    const uint64_t begin = c.header.range_begin();
    const uint64_t end = c.header.range_end();
    // The state holds the parameters first, then the optimizer's slots
    // (common/optimizer.h), which a trained model does not need.
    if (end <= begin || end > static_cast<uint64_t>(m.num_params()) ||
        c.state.size() < end - begin) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": range [", begin, ", ", end,
                                                     ") does not fit a model of ", m.num_params(),
                                                     " parameters"));
    }
    std::copy_n(c.state.begin(), end - begin, params.begin() + static_cast<std::ptrdiff_t>(begin));
    ranges.emplace_back(begin, end);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       ": the shards do not cover the model exactly (a gap or "
                       "overlap at parameter ",
                       std::min(begin, covered), ")"));
    }
    covered = end;
  }
  if (covered != static_cast<uint64_t>(m.num_params())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the shards cover ", covered, " of ", m.num_params(), " parameters"));
  }
  return params;
}

// Where checkpoint `which` of a run is: its checkpoint directory (the run's
// --checkpoint_dir as recorded, or RUN_DIR/checkpoints) and step.
struct CheckpointRef {
  std::string dir;
  int64_t step = -1;
};

absl::StatusOr<CheckpointRef> ResolveCheckpoint(const std::string& run_dir,
                                                const std::string& which,
                                                const std::vector<std::string>& flags) {
  CheckpointRef ref{RecordedFlag(flags, "checkpoint_dir"), -1};
  if (ref.dir.empty()) ref.dir = run_dir + "/checkpoints";
  if (which == "latest") {
    ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCheckpointSteps(ref.dir));
    for (auto it = steps.rbegin(); it != steps.rend() && ref.step < 0; ++it) {
      if (ReadManifest(ref.dir, *it).ok()) ref.step = *it;
    }
    if (ref.step < 0) {
      return absl::NotFoundError(absl::StrCat(ref.dir, ": no checkpoint with a readable manifest"));
    }
    return ref;
  }
  if (IsDirectory(which) && FileExists(which + "/manifest.json")) {
    const PathParts parts = SplitPath(which);
    const std::string& name = parts.name;
    if (!absl::StartsWith(name, "ckpt-") || !absl::SimpleAtoi(name.substr(5), &ref.step) ||
        ref.step < 0) {
      return absl::InvalidArgumentError(absl::StrCat(which, ": not a ckpt-<step> directory"));
    }
    ref.dir = parts.dir;
    return ref;
  }
  const std::string number = absl::StartsWith(which, "ckpt-") ? which.substr(5) : which;
  if (!absl::SimpleAtoi(number, &ref.step) || ref.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint=", which,
                     ": expected latest, ckpt-<step>, <step> or a checkpoint directory"));
  }
  return ref;
}

}  // namespace

absl::StatusOr<SavedModel> LoadSavedModel(const std::string& run_dir,
                                          const std::string& checkpoint) {
  if (run_dir.empty()) return absl::InvalidArgumentError("--run_dir is required");
  if (!IsDirectory(run_dir))
    return absl::NotFoundError(absl::StrCat(run_dir, ": no such run directory"));
  ASSIGN_OR_RETURN(std::vector<std::string> flags, LaunchFlags(run_dir));
  bool have_summary = false;
  ASSIGN_OR_RETURN(const proto::RunSummary summary, Summary(run_dir, &have_summary));

  SavedModel saved;
  if (checkpoint.empty()) {
    saved.source = run_dir + "/final_params.f32";
    if (!FileExists(saved.source)) {
      return absl::NotFoundError(absl::StrCat(saved.source,
                                              " does not exist (the run did not finish?); ",
                                              "--checkpoint=latest takes its newest checkpoint"));
    }
    if (have_summary) saved.recorded_accuracy = summary.final_test_accuracy();
  } else {
    ASSIGN_OR_RETURN(const CheckpointRef ref, ResolveCheckpoint(run_dir, checkpoint, flags));
    saved.source = CheckpointPath(ref.dir, ref.step);
    saved.step = ref.step;
    auto manifest = ReadManifest(ref.dir, ref.step);
    if (!manifest.ok()) return AsBadInput(manifest.status());
    if (manifest->flags_size() > 0)
      flags.assign(manifest->flags().begin(), manifest->flags().end());
    if (RecordedFlag(flags, "model").empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(saved.source, "/manifest.json records no --model"));
    }
    ASSIGN_OR_RETURN(saved.params, ReadCheckpoint(ref.dir, ref.step, *manifest));
  }
  if (saved.model.empty()) saved.model = RecordedFlag(flags, "model");
  if (saved.model.empty() && have_summary) saved.model = summary.model();
  if (saved.model.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(run_dir,
                                                   ": neither launch.json nor summary.json says "
                                                   "which model the run trained"));
  }
  saved.dataset = RecordedFlag(flags, "dataset");
  saved.data_dir = RecordedFlag(flags, "data_dir");
  ASSIGN_OR_RETURN(const models::NetSpec net, models::GetNetSpec(saved.model));
  ASSIGN_OR_RETURN(const std::vector<models::ParamSpec> specs, models::NetParamSpecs(net));
  int64_t total = 0;
  for (const models::ParamSpec& p : specs) total += p.size;
  if (saved.step < 0) {
    ASSIGN_OR_RETURN(saved.params, ReadFloats(saved.source, total));
  } else if (static_cast<int64_t>(saved.params.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat(saved.source, ": ", saved.params.size(),
                                                   " parameters; ", saved.model, " has ", total));
  }
  return saved;
}

}  // namespace pstrain

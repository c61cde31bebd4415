#include "checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr absl::string_view kPrefix = "ckpt-";

// The step of a "ckpt-<step>" name; -1 for any other name.
int64_t StepOf(absl::string_view name) {
  int64_t step = -1;
  if (!absl::ConsumePrefix(&name, kPrefix) || name.empty() ||
      name.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(name, &step)) {
    return -1;
  }
  return step;
}

// Removes `name` and its temporaries (name.tmp.<pid>) from `path`.
absl::Status RemoveOwnFiles(const std::string& path, const std::string& name) {
  const std::string tmp_prefix = name + ".tmp.";
  std::error_code ec;
  std::filesystem::directory_iterator it(path, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file != name && file.rfind(tmp_prefix, 0) != 0) continue;
    std::error_code rm;
    std::filesystem::remove(it->path(), rm);
    if (rm) return absl::InternalError(absl::StrCat(it->path().string(), ": cannot remove: ", rm.message()));
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return absl::InternalError(absl::StrCat(path, ": cannot list: ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string CheckpointName(int64_t step) { return absl::StrCat(kPrefix, step); }

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/", CheckpointName(step));
}

std::string ShardFileName(int64_t step, int shard, int num_shards) {
  return absl::StrCat(CheckpointName(step), "/shard-", shard, "-of-", num_shards, ".ckpt");
}

std::string ManifestFileName(int64_t step) {
  return absl::StrCat(CheckpointName(step), "/manifest.json");
}

absl::StatusOr<std::vector<int64_t>> ListCheckpointSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return steps;
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const int64_t step = StepOf(it->path().filename().string());
    if (step >= 0 && it->is_directory()) steps.push_back(step);
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<int64_t> KeepFromStep(const std::string& dir, int keep) {
  if (keep < 1 || keep > kMaxKeepCheckpoints) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep ", keep, " checkpoints: must be 1 to ", kMaxKeepCheckpoints));
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCheckpointSteps(dir));
  std::vector<int64_t> complete;
  for (const int64_t step : steps) {
    std::error_code ec;
    if (std::filesystem::exists(absl::StrCat(dir, "/", ManifestFileName(step)), ec)) {
      complete.push_back(step);
    }
  }
  if (complete.size() < static_cast<size_t>(keep)) return 0;
  return complete[complete.size() - static_cast<size_t>(keep)];
}

absl::StatusOr<std::vector<int64_t>> RemoveOwnFilesBefore(const std::string& dir, int64_t before,
                                                          const std::string& file_in_checkpoint) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCheckpointSteps(dir));
  std::vector<int64_t> pruned;
  for (const int64_t step : steps) {
    if (step >= before) break;
    const std::string path = CheckpointPath(dir, step);
    RETURN_IF_ERROR(RemoveOwnFiles(path, file_in_checkpoint));
    std::error_code ec;
    std::filesystem::remove(path, ec);  // fails, harmlessly, while others' files remain
    pruned.push_back(step);
  }
  return pruned;
}

absl::StatusOr<std::vector<int64_t>> PruneCheckpoints(const std::string& dir, int keep,
                                                      const std::string& file_in_checkpoint) {
  ASSIGN_OR_RETURN(const int64_t keep_from, KeepFromStep(dir, keep));
  return RemoveOwnFilesBefore(dir, keep_from, file_in_checkpoint);
}

}  // namespace pstrain

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

absl::StatusOr<std::vector<int64_t>> PruneCheckpoints(const std::string& dir, int keep,
                                                      const std::string& file_in_checkpoint) {
  CHECK_GE(keep, 1);
  auto steps = ListCheckpointSteps(dir);
  if (!steps.ok()) return steps.status();
  std::vector<int64_t> pruned;
  const int64_t old = static_cast<int64_t>(steps->size()) - keep;
  for (int64_t i = 0; i < old; ++i) {
    const std::string path = CheckpointPath(dir, (*steps)[i]);
    RETURN_IF_ERROR(RemoveOwnFiles(path, file_in_checkpoint));
    std::error_code ec;
    std::filesystem::remove(path, ec);  // fails, harmlessly, while others' files remain
    pruned.push_back((*steps)[i]);
  }
  return pruned;
}

}  // namespace pstrain

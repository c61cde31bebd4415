#include "launcher/supervisor/straggler.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster_spec.h"

namespace pstrain {
namespace {

absl::Status BadItem(const std::string& item, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--straggler: \"", item, "\": ", why, " (expected worker:I:delay_ms=D)"));
}

}  // namespace

absl::StatusOr<std::map<std::string, double>> ParseStragglerItems(
    const std::vector<std::string>& items) {
  std::map<std::string, double> out;
  for (const std::string& item : items) {
    const std::vector<std::string> parts = absl::StrSplit(item, ':');
    if (parts.size() != 3) return BadItem(item, "three ':'-separated parts needed");
    const auto type = ParseTaskType(parts[0]);
    if (!type || (*type != TaskType::kWorker && *type != TaskType::kChief)) {
      return BadItem(item, "only worker and chief tasks train");
    }
    int index = -1;
    if (!absl::SimpleAtoi(parts[1], &index) || index < 0) return BadItem(item, "bad task index");
    const std::vector<std::string> kv = absl::StrSplit(parts[2], '=');
    double delay = -1;
    if (kv.size() != 2 || kv[0] != "delay_ms" || !absl::SimpleAtod(kv[1], &delay) || delay < 0 ||
        delay > 600000) {
      return BadItem(item, "delay_ms must be a number of milliseconds in [0, 600000]");
    }
    out[TaskId{*type, index}.ToString()] = delay;
  }
  return out;
}

}  // namespace pstrain

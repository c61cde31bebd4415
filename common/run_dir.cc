#include "common/run_dir.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace pstrain {
namespace {

constexpr const char* kRunFiles[] = {"summary.json", "final_params.f32", "epochs.csv",
                                     "evals.csv", "recoveries.json", "task_cpu.csv"};
constexpr const char* kBuffersDir = "buffers";

// Whether `name` is steps_worker<r>.csv of a rank not in `live_ranks`.
bool IsStaleStepsFile(absl::string_view name, const std::set<int>& live_ranks) {
  int rank = -1;
  if (!absl::ConsumePrefix(&name, "steps_worker") || !absl::ConsumeSuffix(&name, ".csv") ||
      !absl::SimpleAtoi(name, &rank)) {
    return false;
  }
  return live_ranks.count(rank) == 0;
}

// Whether `name` is a CSV that a resumed run moved aside (CsvWriter::Open:
// NAME.csv.old, NAME.csv.old.K); any rank's, since nothing writes them.
bool IsMovedAsideCsv(absl::string_view name) {
  const size_t at = name.find(".csv.old");
  if (at == absl::string_view::npos) return false;
  absl::string_view rest = name.substr(at + 8);
  int k = 0;
  return rest.empty() || (absl::ConsumePrefix(&rest, ".") && absl::SimpleAtoi(rest, &k));
}

bool IsStale(const std::string& name, const std::set<int>& live_ranks) {
  for (const char* f : kRunFiles) {
    if (name == f) return true;
  }
  // The workers' saved buffers (pstrain.torch): a worker of this run that
  // joins under way must not take an earlier run's.
  if (name == kBuffersDir) return true;
  return IsStaleStepsFile(name, live_ranks) || IsMovedAsideCsv(name);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RemoveStaleRunOutputs(const std::string& run_dir,
                                                               const std::set<int>& live_ranks) {
  std::vector<std::string> stale;
  std::error_code ec;
  std::filesystem::directory_iterator it(run_dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return stale;
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsStale(name, live_ranks)) stale.push_back(name);
  }
  if (ec) return absl::InternalError(absl::StrCat(run_dir, ": cannot list: ", ec.message()));
  std::sort(stale.begin(), stale.end());
  for (const std::string& name : stale) {
    // A file, or buffers/ with what it holds; one gone already is no error.
    const std::string path = absl::StrCat(run_dir, "/", name);
    std::filesystem::remove_all(path, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat(path, ": cannot remove the output of an earlier run: ", ec.message()));
    }
  }
  return stale;
}

std::string DescribeRemoved(const std::string& run_dir, const std::vector<std::string>& removed) {
  return absl::StrCat("removed the outputs of an earlier run from ", run_dir, ": ",
                      absl::StrJoin(removed, ", "));
}

}  // namespace pstrain

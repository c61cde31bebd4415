#include "models/cuda/algorithm_search.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain::models::cuda {
namespace {

bool Contains(const std::vector<int>& algos, int algo) {
  return std::find(algos.begin(), algos.end(), algo) != algos.end();
}

// The rejected candidates' reasons, for the error when none is left.
class Rejections {
 public:
  void Add(int algo, const absl::Status& why) {
    absl::StrAppend(&reasons_, " [algo ", algo, ": ", why.message(), "]");
    for_memory_ = for_memory_ || why.code() == absl::StatusCode::kResourceExhausted;
  }

  absl::Status Error(absl::string_view what, size_t candidates) const {
    const std::string message = absl::StrCat(what, ": no usable cuDNN algorithm among ", candidates,
                                             " candidates", reasons_.empty() ? "" : ":", reasons_);
    return for_memory_ ? absl::ResourceExhaustedError(message) : absl::InternalError(message);
  }

 private:
  std::string reasons_;
  bool for_memory_ = false;
};

// The candidate's workspace, or why it is rejected before anything is
// reserved. The limit is a choice, not a shortage: not ResourceExhausted.
absl::StatusOr<size_t> WorkspaceFor(int algo, const AlgorithmSearch& search) {
  ASSIGN_OR_RETURN(const size_t bytes, search.workspace_bytes(algo));
  if (bytes > search.max_workspace_bytes) {
    return absl::OutOfRangeError(absl::StrCat("needs ", bytes, " bytes of workspace, over the ",
                                              search.max_workspace_bytes, "-byte limit"));
  }
  return bytes;
}

// A candidate must run at every layout: one that runs at the aligned
// layout only would fail on a parameter slice at an odd float.
absl::Status RunTrials(int algo, const AlgorithmSearch& search) {
  for (int layout = 0; layout < search.layouts; ++layout) {
    RETURN_IF_ERROR(search.run(algo, layout));
  }
  return absl::OkStatus();
}

}  // namespace

// Deterministic first, so that runs repeat bit for bit; the fallbacks last,
// since cuDNN ranked them lower or not at all.
std::vector<int> RankAlgorithms(absl::Span<const ListedAlgorithm> listed,
                                absl::Span<const int> fallbacks) {
  std::vector<ListedAlgorithm> usable;
  std::copy_if(listed.begin(), listed.end(), std::back_inserter(usable),
               [](const ListedAlgorithm& a) { return a.usable; });
  std::stable_partition(usable.begin(), usable.end(),
                        [](const ListedAlgorithm& a) { return a.deterministic; });
  std::vector<int> ranked;
  for (const ListedAlgorithm& a : usable) {
    if (!Contains(ranked, a.algo)) ranked.push_back(a.algo);
  }
  for (const int algo : fallbacks) {
    if (!Contains(ranked, algo)) ranked.push_back(algo);
  }
  return ranked;
}

absl::StatusOr<int> PickAlgorithm(absl::Span<const int> ranked, const AlgorithmSearch& search,
                                  absl::string_view what) {
  Rejections rejections;
  for (const int algo : ranked) {
    const absl::StatusOr<size_t> bytes = WorkspaceFor(algo, search);
    if (!bytes.ok()) {
      rejections.Add(algo, bytes.status());
      continue;
    }
    const absl::Status reserved = search.reserve(*bytes);
    if (reserved.code() == absl::StatusCode::kResourceExhausted) {
      rejections.Add(algo, reserved);
      continue;
    }
    if (!reserved.ok()) {
      return absl::Status(reserved.code(),
                          absl::StrCat(what, ": algo ", algo, ": ", reserved.message()));
    }
    const absl::Status trial = RunTrials(algo, search);
    if (trial.ok()) {
      search.keep();
      return algo;
    }
    search.release();
    rejections.Add(algo, trial);
  }
  return rejections.Error(what, ranked.size());
}

}  // namespace pstrain::models::cuda

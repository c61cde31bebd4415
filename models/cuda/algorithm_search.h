#pragma once

// How a cuDNN convolution pass picks its algorithm (models/cuda/conv2d.h),
// as a policy free of cuDNN: algorithms are cuDNN's enum values as ints, and
// what touches the device comes in as callbacks, so the policy is tested
// without a GPU (tests/models/cuda_algorithm_search_test.cc) and Conv2d binds
// it to cuDNN.
//
//   std::vector<int> ranked = RankAlgorithms(listed, {fallback...});
//   ASSIGN_OR_RETURN(int algo, PickAlgorithm(ranked, search, "conv1 forward"));

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pstrain::models::cuda {

// One entry of cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7),
// reduced to what the ranking needs.
struct ListedAlgorithm {
  int algo = 0;
  // Listed with CUDNN_STATUS_SUCCESS, fp32 math (no tensor ops) and of a
  // family the layer accepts.
  bool usable = false;
  bool deterministic = false;
};

// The algorithms to try, in order, each once: the usable listed ones in
// cuDNN's order, deterministic ones first; then every one of `fallbacks`
// not already among them, whatever the heuristics said of it (absent,
// listed as failing, listed only with tensor-op math): its trial decides,
// so a working fallback is tried whenever the listed candidates fail.
std::vector<int> RankAlgorithms(absl::Span<const ListedAlgorithm> listed,
                                absl::Span<const int> fallbacks);

// What PickAlgorithm asks of the device, for one pass. Every callback is
// required.
struct AlgorithmSearch {
  // The workspace `algo` needs at the largest batch; an error rejects it.
  std::function<absl::StatusOr<size_t>(int algo)> workspace_bytes;
  // Sets aside at least `bytes` of workspace for the next trials.
  // ResourceExhausted when the device is out of memory: the candidate is
  // rejected and the next one (often needing less) is tried. Any other
  // error ends the search. On failure nothing stays set aside.
  std::function<absl::Status(size_t bytes)> reserve;
  // Runs `algo` once, with the set-aside workspace and the pointers placed
  // as trial layout `layout` says (0 <= layout < layouts), and waits for it.
  std::function<absl::Status(int algo, int layout)> run;
  // Frees what `reserve` set aside: the candidate was rejected.
  std::function<void()> release;
  // Keeps what `reserve` set aside for the layer: the candidate was chosen.
  std::function<void()> keep;
  // How many pointer layouts (alignments) each candidate must run at.
  int layouts = 1;
  // A candidate needing more workspace than this is rejected unreserved.
  size_t max_workspace_bytes = 0;
};

// The first of `ranked` whose workspace size is known and at most
// max_workspace_bytes, whose workspace can be reserved, and which runs at
// every layout; its workspace is kept. A rejected candidate's workspace is
// released before the next candidate reserves its own, so at most one
// candidate's workspace is held at a time and a rejected one's never stays.
// Errors name `what` and each candidate's reason: ResourceExhausted when no
// candidate worked and at least one was rejected for want of memory (more
// memory might have given one), Internal when none worked otherwise, or the
// error of a `reserve` that failed for another reason.
absl::StatusOr<int> PickAlgorithm(absl::Span<const int> ranked, const AlgorithmSearch& search,
                                  absl::string_view what);

}  // namespace pstrain::models::cuda

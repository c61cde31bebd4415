// The policy by which Conv2d picks a cuDNN algorithm per pass
// (models/cuda/algorithm_search.h): which candidates are tried in which
// order, and what happens to each one's workspace. Host-side only: the
// device is a fake that says which workspace sizes fit in its memory and
// which trials fail, so these run everywhere, GPU or not. On a GPU,
// tests/models/cuda_layers_test.cc checks the algorithms Conv2d picks with
// this policy against the CPU.

#include "models/cuda/algorithm_search.h"

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain::models::cuda {
namespace {

using ::testing::ElementsAre;

// --- RankAlgorithms ----------------------------------------------------------

TEST(CudaAlgorithmRank, KeepsCudnnsOrderWithDeterministicAlgorithmsFirst) {
  const std::vector<ListedAlgorithm> listed = {
      {5, true, false}, {1, true, true}, {7, false, true}, {0, true, true}, {3, true, false}};
  EXPECT_THAT(RankAlgorithms(listed, {}), ElementsAre(1, 0, 5, 3));
}

// The heuristics may list a fallback as failing, or only with tensor-op
// math; it is still tried, after the usable ones: a working fallback must
// never be left out because the heuristics mentioned it.
TEST(CudaAlgorithmRank, AppendsEveryFallbackNotAlreadyAmongTheUsableOnes) {
  const std::vector<ListedAlgorithm> listed = {{1, false, true},  // listed as failing
                                               {0, false, true},  // listed with tensor-op math only
                                               {6, true, true}};
  EXPECT_THAT(RankAlgorithms(listed, {1, 0}), ElementsAre(6, 1, 0));
  EXPECT_THAT(RankAlgorithms({}, {1, 0}), ElementsAre(1, 0));
}

TEST(CudaAlgorithmRank, TriesEachAlgorithmOnce) {
  const std::vector<ListedAlgorithm> listed = {
      {1, true, true}, {1, true, true}, {0, true, false}};  // e.g. two math types
  EXPECT_THAT(RankAlgorithms(listed, {0, 1, 2}), ElementsAre(1, 0, 2));
}

// --- PickAlgorithm -------------------------------------------------------------

// A device with `free_bytes` of memory for workspaces. Each algorithm has a
// workspace need and a set of trial layouts at which it fails (by default
// it runs everywhere). Records every call, and how much workspace is held.
class FakeDevice {
 public:
  struct Algorithm {
    size_t workspace = 0;
    bool size_known = true;
    std::set<int> failing_layouts;
  };

  AlgorithmSearch Search(int layouts = 3) {
    AlgorithmSearch search;
    search.workspace_bytes = [this](int algo) -> absl::StatusOr<size_t> {
      const Algorithm& a = algorithms[algo];
      if (!a.size_known) return absl::InternalError("CUDNN_STATUS_NOT_SUPPORTED");
      return a.workspace;
    };
    search.reserve = [this](size_t bytes) { return Reserve(bytes); };
    search.run = [this](int algo, int layout) { return Run(algo, layout); };
    search.release = [this] {
      calls.push_back("release");
      held = 0;
    };
    search.keep = [this] {
      calls.push_back("keep");
      kept = held;
    };
    search.layouts = layouts;
    search.max_workspace_bytes = 1000;
    return search;
  }

  std::map<int, Algorithm> algorithms;
  size_t free_bytes = 1000;
  absl::Status reserve_error;  // returned by every reservation when set
  size_t held = 0;             // set aside by the last reservation
  size_t kept = 0;
  std::vector<std::string> calls;

 private:
  absl::Status Reserve(size_t bytes) {
    calls.push_back(absl::StrCat("reserve ", bytes));
    if (!reserve_error.ok()) return reserve_error;
    // The previous candidate's workspace must be gone by now.
    EXPECT_EQ(held, 0u) << "a rejected candidate's workspace is still held";
    if (bytes > free_bytes) return absl::ResourceExhaustedError("cudaMalloc: out of memory");
    held = bytes;
    return absl::OkStatus();
  }

  absl::Status Run(int algo, int layout) {
    calls.push_back(absl::StrCat("run ", algo, "@", layout));
    if (algorithms[algo].failing_layouts.count(layout) > 0) {
      return absl::InternalError(absl::StrCat("CUDNN_STATUS_EXECUTION_FAILED at layout ", layout));
    }
    return absl::OkStatus();
  }
};

TEST(CudaAlgorithmPick, PicksTheFirstCandidateThatRunsAtEveryLayoutAndKeepsItsWorkspace) {
  FakeDevice device;
  device.algorithms[1].workspace = 300;
  const absl::StatusOr<int> algo = PickAlgorithm({1, 0}, device.Search(2), "conv forward");
  ASSERT_TRUE(algo.ok()) << algo.status();
  EXPECT_EQ(*algo, 1);
  EXPECT_THAT(device.calls, ElementsAre("reserve 300", "run 1@0", "run 1@1", "keep"));
  EXPECT_EQ(device.kept, 300u);
}

// Risk: the trials ran on aligned scratch only, the model's parameter slices
// are not. A candidate failing at one misaligned layout is rejected.
TEST(CudaAlgorithmPick, RejectsACandidateThatFailsAtAnyLayout) {
  FakeDevice device;
  device.algorithms[1] = {100, true, {2}};
  const absl::StatusOr<int> algo = PickAlgorithm({1, 0}, device.Search(3), "conv forward");
  ASSERT_TRUE(algo.ok()) << algo.status();
  EXPECT_EQ(*algo, 0);
  EXPECT_THAT(device.calls, ElementsAre("reserve 100", "run 1@0", "run 1@1", "run 1@2", "release",
                                        "reserve 0", "run 0@0", "run 0@1", "run 0@2", "keep"));
  EXPECT_EQ(device.kept, 0u) << "the rejected candidate's workspace was kept";
}

// Risk: a reservation that ran out of memory failed the layer. A candidate
// needing less (the fallbacks need none) must be tried instead.
TEST(CudaAlgorithmPick, TriesTheNextCandidateWhenAWorkspaceDoesNotFit) {
  FakeDevice device;
  device.free_bytes = 500;
  device.algorithms[6].workspace = 900;
  device.algorithms[1].workspace = 200;
  const absl::StatusOr<int> algo = PickAlgorithm({6, 1}, device.Search(1), "conv backward data");
  ASSERT_TRUE(algo.ok()) << algo.status();
  EXPECT_EQ(*algo, 1);
  EXPECT_THAT(device.calls, ElementsAre("reserve 900", "reserve 200", "run 1@0", "keep"));
  EXPECT_EQ(device.kept, 200u);
}

// Risk: the heuristics listed the fallback as failing, so it was not
// appended, and a failing listed candidate left nothing to try.
TEST(CudaAlgorithmPick, ReachesTheFallbackWhenEveryListedCandidateFails) {
  FakeDevice device;
  device.algorithms[6] = {0, true, {0}};
  device.algorithms[7] = {0, false, {}};
  const std::vector<ListedAlgorithm> listed = {{6, true, true}, {7, true, true}, {1, false, true}};
  const absl::StatusOr<int> algo =
      PickAlgorithm(RankAlgorithms(listed, {1}), device.Search(1), "conv backward filter");
  ASSERT_TRUE(algo.ok()) << algo.status();
  EXPECT_EQ(*algo, 1);
}

TEST(CudaAlgorithmPick, SkipsCandidatesOverTheWorkspaceLimitWithoutReservingThem) {
  FakeDevice device;
  device.free_bytes = 1 << 30;
  device.algorithms[2].workspace = 1001;
  const absl::StatusOr<int> algo = PickAlgorithm({2, 0}, device.Search(1), "conv forward");
  ASSERT_TRUE(algo.ok()) << algo.status();
  EXPECT_EQ(*algo, 0);
  EXPECT_THAT(device.calls, ElementsAre("reserve 0", "run 0@0", "keep"));
}

TEST(CudaAlgorithmPick, IsResourceExhaustedWhenMemoryStoodInTheWay) {
  FakeDevice device;
  device.free_bytes = 10;
  device.algorithms[1].workspace = 100;
  device.algorithms[0] = {0, true, {0}};
  const absl::StatusOr<int> algo = PickAlgorithm({1, 0}, device.Search(1), "conv1 forward");
  ASSERT_FALSE(algo.ok());
  EXPECT_EQ(algo.status().code(), absl::StatusCode::kResourceExhausted) << algo.status();
  EXPECT_TRUE(absl::StartsWith(algo.status().message(), "conv1 forward: ")) << algo.status();
  EXPECT_TRUE(absl::StrContains(algo.status().message(), "[algo 1: cudaMalloc: out of memory]"))
      << algo.status();
  EXPECT_TRUE(absl::StrContains(algo.status().message(), "[algo 0: CUDNN_STATUS_EXECUTION_FAILED"))
      << algo.status();
  EXPECT_EQ(device.held, 0u);
}

TEST(CudaAlgorithmPick, IsInternalWhenNoCandidateRunsOtherwise) {
  FakeDevice device;
  device.algorithms[1] = {0, false, {}};
  device.algorithms[0] = {50, true, {1}};
  const absl::StatusOr<int> algo = PickAlgorithm({1, 0}, device.Search(2), "conv2 forward");
  ASSERT_FALSE(algo.ok());
  EXPECT_EQ(algo.status().code(), absl::StatusCode::kInternal) << algo.status();
  EXPECT_TRUE(absl::StrContains(algo.status().message(), "among 2 candidates")) << algo.status();
  EXPECT_EQ(device.held, 0u);
  EXPECT_EQ(PickAlgorithm({}, device.Search(1), "conv3 forward").status().code(),
            absl::StatusCode::kInternal);
}

// Only running out of memory passes a candidate over at reservation; any
// other failure there is not the candidate's and ends the search.
TEST(CudaAlgorithmPick, StopsAtAReservationErrorOtherThanMemory) {
  FakeDevice device;
  device.reserve_error = absl::InternalError("cudaSetDevice: unknown error");
  const absl::StatusOr<int> algo = PickAlgorithm({1, 0}, device.Search(1), "conv forward");
  ASSERT_FALSE(algo.ok());
  EXPECT_EQ(algo.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(algo.status().message(), "cudaSetDevice: unknown error"));
  EXPECT_THAT(device.calls, ElementsAre("reserve 0"));
}

}  // namespace
}  // namespace pstrain::models::cuda

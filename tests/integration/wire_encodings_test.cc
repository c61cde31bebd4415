// One job, workers of different --wire encodings: real ps and
// worker processes over loopback, 2 ps + 2 workers, 150 steps of real
// MNIST. Each ps decodes every worker's pushes in the worker's own
// encoding (its counters say so), and the model trains as the all-f32 job
// does, in sync and in async.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/run_outputs.h"

namespace pstrain {
namespace {

constexpr int kSteps = 150;

struct MixedCase {
  const char* name;
  const char* mode;
  const char* chief_wire;
  const char* worker_wire;
};

class MixedEncodings : public ::testing::TestWithParam<MixedCase> {};

proto::RunSummary RunJob(const MixedCase& c) {
  const std::string dir = testing::MakeTempDir("wire");
  const std::string spec = testing::WriteLocalSpec(dir, 2, 2);
  const std::vector<std::string> flags = {
      absl::StrCat("--mode=", c.mode), absl::StrCat("--max_steps=", kSteps), "--seed=1",
      "--device=cpu", "--data_dir=" + testing::SourcePath("data/mnist"), "--run_dir=" + dir,
      "--log_every_steps=50"};
  const testing::ClusterRun run =
      testing::RunLocalCluster(spec, 2, 2, flags, 120,
                               {{absl::StrCat("--wire=", c.chief_wire)},
                                {absl::StrCat("--wire=", c.worker_wire)}});
  EXPECT_TRUE(run.all_ok()) << run.AllOutput();
  return testing::ReadRunSummary(dir);
}

int EncodingIndex(const std::string& wire) {
  if (wire == "f32") return 1;
  if (wire == "bf16") return 2;
  if (wire == "fp16") return 3;
  return 4;  // topk:R
}

TEST_P(MixedEncodings, OnePsServesEveryEncodingAndTheModelTrains) {
  const MixedCase& c = GetParam();
  const proto::RunSummary s = RunJob(c);
  std::printf("RESULT wire_mixed case=%s mode=%s chief=%s worker=%s accuracy=%.4f images_per_sec=%.0f\n",
              c.name, c.mode, c.chief_wire, c.worker_wire, s.final_test_accuracy(),
              s.train_images_per_sec());
  EXPECT_EQ(s.wire(), c.chief_wire);
  // Every push of each worker reached both shards in its own encoding.
  std::vector<int> expected(5, 0);
  expected[EncodingIndex(c.chief_wire)] += 2 * kSteps;
  expected[EncodingIndex(c.worker_wire)] += 2 * kSteps;
  std::vector<int> got(s.pushes_by_encoding().begin(), s.pushes_by_encoding().end());
  got.resize(5, 0);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(s.rejected_requests(), 0);
  EXPECT_EQ(s.nonfinite_gradients_dropped(), 0);
  // The all-f32 job reaches 0.88 here in sync (0.93 in async, which applies
  // twice as many updates); lossy pushes with error feedback stay close.
  EXPECT_GT(s.final_test_accuracy(), 0.85);
}

INSTANTIATE_TEST_SUITE_P(
    Jobs, MixedEncodings,
    ::testing::Values(MixedCase{"sync_f32_bf16", "sync", "f32", "bf16"},
                      MixedCase{"async_bf16_f32", "async", "bf16", "f32"},
                      MixedCase{"async_fp16_topk", "async", "fp16", "topk:0.05"}),
    [](const ::testing::TestParamInfo<MixedCase>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace pstrain

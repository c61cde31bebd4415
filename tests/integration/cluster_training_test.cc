// A whole cluster of real processes over loopback: 2 ps_server and 2 worker
// processes, each configured by its own TF_CONFIG, train the seed CNN on
// real MNIST for a bounded number of steps in each update mode.

#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/csv.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

constexpr int kSteps = 120;
// Generous: a busy 2-core CI machine runs this in well under a minute.
constexpr double kTimeoutS = 240;

std::vector<double> Column(const CsvTable& t, const std::string& name) {
  std::vector<double> out;
  const int c = t.Column(name);
  for (const auto& row : t.rows) {
    double v = 0;
    if (c >= 0 && absl::SimpleAtod(row[c], &v)) out.push_back(v);
  }
  return out;
}

double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  return std::accumulate(v.begin() + begin, v.begin() + end, 0.0) / static_cast<double>(end - begin);
}

class ClusterTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(ClusterTraining, LossFallsAndTestAccuracyBeatsThreshold) {
  const std::string dir = testing::MakeTempDir("cluster");
  const std::string spec = testing::WriteLocalSpec(dir, 2, 2);
  const std::vector<std::string> train_flags = {
      "--mode=" + GetParam(), absl::StrCat("--max_steps=", kSteps), "--epochs=1",
      "--data_dir=" + testing::SourcePath("data/mnist"), "--run_dir=" + dir, "--device=cpu",
      "--log_every_steps=0", "--peer_timeout_s=30"};
  const testing::ClusterRun run = testing::RunLocalCluster(spec, 2, 2, train_flags, kTimeoutS);
  ASSERT_TRUE(run.all_ok()) << run.AllOutput();

  // The loss falls: the last 20 steps average well below the first 20.
  auto steps = ReadCsv(dir + "/steps_worker0.csv");
  ASSERT_TRUE(steps.ok()) << steps.status();
  const std::vector<double> loss = Column(*steps, "loss");
  ASSERT_EQ(loss.size(), static_cast<size_t>(kSteps));
  const double first = Mean(loss, 0, 20), last = Mean(loss, kSteps - 20, kSteps);
  EXPECT_LT(last, 0.6 * first) << "first " << first << " last " << last;

  // Test accuracy on the full 10k set beats 80%. Chance is 10%. In 120 steps
  // (30,720 images, half an epoch) the seed CNN reached 85.0-87.6% in sync
  // (seeds 1-3; sync is deterministic for a seed, seed 1 gives 85.3%) and
  // 90.3-91.7% in async (which applies twice as many updates), measured with
  // `pstrain launch --max_steps=120 --seed=S`. 80% leaves room for async's
  // run-to-run variation and fails any run that does not really learn.
  auto summary_text = ReadFileToString(dir + "/summary.json");
  ASSERT_TRUE(summary_text.ok());
  proto::RunSummary summary;
  ASSERT_TRUE(ParseJsonMessage(*summary_text, "summary.json", &summary).ok());
  EXPECT_GT(summary.final_test_accuracy(), 0.80);
  EXPECT_EQ(summary.steps_per_worker(), kSteps);
  EXPECT_EQ(summary.images_trained(), 2.0 * kSteps * 128);
  if (GetParam() == "sync") {
    EXPECT_EQ(summary.updates_applied(), kSteps);
    EXPECT_EQ(summary.mean_staleness(), 0.0);
  } else {
    EXPECT_EQ(summary.updates_applied(), 2 * kSteps);
  }
  EXPECT_EQ(summary.stale_gradients_dropped(), 0);
  EXPECT_EQ(summary.malformed_requests(), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, ClusterTraining, ::testing::Values("sync", "async"));

}  // namespace
}  // namespace pstrain

// A whole cluster of real processes over loopback: 2 ps_server and 2 worker
// processes, each configured by its own TF_CONFIG, train the seed CNN on
// real MNIST for a bounded number of steps in each update mode.

#include <cstring>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/csv.h"
#include "common/file_util.h"
#include "common/json.h"
#include "dataset/mnist_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/run_outputs.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

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

// Started by hand into the run directory of an earlier, failed run: the
// chief removes that run's outputs (not the other worker's steps CSV, which
// it may have opened already) and says so, and the run writes its own.
TEST_P(ClusterTraining, LossFallsAndTestAccuracyBeatsThreshold) {
  const std::string dir = testing::MakeTempDir("cluster");
  const std::string spec = testing::WriteLocalSpec(dir, 2, 2);
  for (const char* f : {"/summary.json", "/final_params.f32", "/epochs.csv", "/evals.csv",
                        "/steps_worker1.csv", "/steps_worker5.csv"}) {
    ASSERT_TRUE(WriteFileAtomic(dir + f, "stale").ok());
  }
  const std::vector<std::string> train_flags = {
      "--mode=" + GetParam(), absl::StrCat("--max_steps=", kSteps), "--epochs=1",
      "--data_dir=" + testing::SourcePath("data/mnist"), "--run_dir=" + dir, "--device=cpu",
      "--log_every_steps=0", "--peer_timeout_s=30"};
  const testing::ClusterRun run = testing::RunLocalCluster(spec, 2, 2, train_flags, kTimeoutS);
  ASSERT_TRUE(run.all_ok()) << run.AllOutput();
  EXPECT_THAT(run.outputs[2], HasSubstr(absl::StrCat(  // the chief, after 2 ps
      "removed the outputs of an earlier run from ", dir,
      ": epochs.csv, evals.csv, final_params.f32, steps_worker5.csv, summary.json")));
  EXPECT_FALSE(FileExists(dir + "/steps_worker5.csv"));
  auto other = ReadCsv(dir + "/steps_worker1.csv");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->rows.size(), static_cast<size_t>(kSteps));

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
  const proto::RunSummary summary = testing::ReadRunSummary(dir);
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
  // The epoch's row counts the epoch (its last one once said 0 steps and
  // 0 images/s: its counters were reset before it was written).
  auto epochs = ReadCsv(dir + "/epochs.csv");
  ASSERT_TRUE(epochs.ok()) << epochs.status();
  ASSERT_EQ(epochs->rows.size(), 1u);
  EXPECT_EQ(Column(*epochs, "steps")[0], kSteps);
  EXPECT_GT(Column(*epochs, "images_per_sec")[0], 0);
  EXPECT_GT(Column(*epochs, "train_loss")[0], 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, ClusterTraining, ::testing::Values("sync", "async"));

// The test accuracy of the model in final_params.f32, evaluated here with
// the CPU backend on the full test set.
double EvaluateSavedParams(const std::string& path) {
  auto bytes = ReadFileToString(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  std::vector<float> params(bytes.ok() ? bytes->size() / sizeof(float) : 0);
  if (!params.empty()) std::memcpy(params.data(), bytes->data(), params.size() * sizeof(float));
  models::ModelOptions mo;
  mo.device = "cpu";
  mo.max_batch = 1000;
  auto model = models::CreateModel(mo);
  EXPECT_TRUE(model.ok() && (*model)->SetParams(params).ok());
  auto test = LoadMnist(testing::SourcePath("data/mnist"), Split::kTest);
  EXPECT_TRUE(test.ok()) << test.status();
  if (!model.ok() || !test.ok()) return -1;
  std::vector<float> images(1000 * 784);
  std::vector<int32_t> labels(1000);
  int64_t correct = 0;
  for (int64_t begin = 0; begin < test->size; begin += 1000) {
    std::vector<int64_t> indices(1000);
    std::iota(indices.begin(), indices.end(), begin);
    GatherBatch(*test, indices, Normalization{}, images.data(), labels.data());
    auto r = (*model)->Evaluate({1000, images.data(), labels.data(), nullptr});
    EXPECT_TRUE(r.ok());
    correct += r.ok() ? r->correct : 0;
  }
  return static_cast<double>(correct) / static_cast<double>(test->size);
}

// In async a slow worker goes on pushing after the chief's last step; the
// reported accuracy must still be that of the final model, the one saved.
TEST(ClusterTrainingWithStraggler, ReportsTheAccuracyOfTheFinalModel) {
  const std::string dir = testing::MakeTempDir("straggler");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 2);
  std::vector<std::unique_ptr<testing::RunningProcess>> tasks;
  tasks.push_back(testing::RunningProcess::Start(testing::BinaryPath("ps_server"),
                                                 {testing::SecretFlag()},
                                                 testing::TfConfigFor(spec, "ps", 0)));
  for (int w = 0; w < 2; ++w) {
    std::vector<std::string> flags = {"--mode=async", "--max_steps=40", "--device=cpu",
                                      "--data_dir=" + testing::SourcePath("data/mnist"),
                                      "--run_dir=" + dir, "--log_every_steps=0",
                                      testing::SecretFlag()};
    if (w == 1) flags.push_back("--straggler_delay_ms=30");
    tasks.push_back(testing::RunningProcess::Start(testing::BinaryPath("worker"), flags,
                                                   testing::TfConfigFor(spec, "worker", w)));
  }
  for (auto& t : tasks) {
    ASSERT_NE(t, nullptr);
    auto code = t->Wait(kTimeoutS);
    ASSERT_TRUE(code.ok() && *code == 0) << t->output();
  }
  const proto::RunSummary summary = testing::ReadRunSummary(dir);
  EXPECT_EQ(summary.updates_applied(), 80);  // both workers' 40 gradients
  EXPECT_DOUBLE_EQ(summary.final_test_accuracy(), EvaluateSavedParams(dir + "/final_params.f32"));
}

}  // namespace
}  // namespace pstrain

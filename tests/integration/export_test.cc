// A trained model leaves the system: runs trained here by `pstrain launch`
// are exported with `pstrain export`, accepted by ONNX's own checker
// (Debian's python3-onnx), and run by an independent runtime (ONNX Runtime,
// npm's onnxruntime-node, tools/onnx/evaluate_onnx.js) on the 10k MNIST
// test images: it must classify exactly as many correctly as `pstrain
// evaluate` and the run's own final evaluation did, with the same loss.
// Bad input exits 2 naming what is wrong.

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_dir.h"
#include "common/file_util.h"
#include "common/json.h"
#include "dataset/mnist_dataset.h"
#include "export/png_image.h"
#include "export/saved_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/run_outputs.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunningProcess;

constexpr double kTimeoutS = 300;

struct Result {
  int code = -1;
  std::string output;
};

Result Run(const std::string& binary, std::vector<std::string> args) {
  auto p = RunningProcess::Start(binary, std::move(args));
  auto code = p->Wait(kTimeoutS);
  EXPECT_TRUE(code.ok()) << binary << ": " << code.status() << "\n" << p->output();
  return {code.ok() ? *code : -1, p->output()};
}

Result Pstrain(std::vector<std::string> args) {
  return Run(testing::BinaryPath("pstrain"), std::move(args));
}

// Trains `model` into a fresh run directory; returns it.
std::string Train(const std::string& model, const std::string& spec,
                  std::vector<std::string> extra) {
  const std::string dir = testing::MakeTempDir("export_" + model);
  std::vector<std::string> args = {"launch",
                                   "--cluster_spec=" + testing::SourcePath(spec),
                                   "--free_ports",
                                   "--run_dir=" + dir,
                                   "--data_dir=" + testing::SourcePath("data/mnist"),
                                   "--device=cpu",
                                   "--mode=sync",
                                   "--seed=3",
                                   "--model=" + model,
                                   "--log_every_steps=0",
                                   "--echo=none"};
  args.insert(args.end(), extra.begin(), extra.end());
  const Result r = Pstrain(std::move(args));
  EXPECT_EQ(r.code, 0) << r.output;
  return dir;
}

struct Score {
  int64_t correct = -1;
  int64_t count = -1;
  double loss = -1;
};

// `pstrain evaluate`'s line: "... accuracy 0.9593 (9593 of 10000), loss
// 0.127210".
Score Evaluate(const std::string& run_dir, const std::string& checkpoint) {
  const Result r = Pstrain({"evaluate", "--run_dir=" + run_dir, "--checkpoint=" + checkpoint,
                            "--data_dir=" + testing::SourcePath("data/mnist")});
  EXPECT_EQ(r.code, 0) << r.output;
  std::smatch m;
  Score s;
  if (std::regex_search(r.output, m,
                        std::regex(R"(accuracy [0-9.]+ \((\d+) of (\d+)\), loss ([0-9.]+))"))) {
    s.correct = std::stoll(m[1]);
    s.count = std::stoll(m[2]);
    s.loss = std::stod(m[3]);
  } else {
    ADD_FAILURE() << "no accuracy line in: " << r.output;
  }
  return s;
}

// The model file accepted by ONNX's checker.
void ExpectOnnxCheckerAccepts(const std::string& model) {
  const Result r = Run("/usr/bin/python3", {"-c",
                                            "import sys, onnx\n"
                                            "m = onnx.load(sys.argv[1])\n"
                                            "onnx.checker.check_model(m, full_check=True)\n"
                                            "print('onnx', onnx.__version__, 'checker: ok, "
                                            "opset', m.opset_import[0].version)\n",
                                            model});
  EXPECT_EQ(r.code, 0) << "ONNX's checker refused " << model << ":\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr("checker: ok, opset 13"));
}

// ONNX Runtime's score of `model` on the MNIST test set.
Score OnnxRuntimeScore(const std::string& model) {
  const std::string node = testing::FindProgram("node");
  EXPECT_FALSE(node.empty()) << "node not found on PATH (Debian: apt-get install nodejs)";
  if (node.empty()) return {};
  const Result r = Run(node, {testing::SourcePath("tools/onnx/evaluate_onnx.js"), model,
                              testing::SourcePath("data/mnist")});
  EXPECT_EQ(r.code, 0) << "ONNX Runtime failed (tools/fetch_onnxruntime.sh installs it):\n"
                       << r.output;
  std::smatch m;
  Score s;
  if (std::regex_search(
          r.output, m,
          std::regex(R"re("correct":(\d+),"count":(\d+),"mean_loss":([0-9.eE+-]+))re"))) {
    s.correct = std::stoll(m[1]);
    s.count = std::stoll(m[2]);
    s.loss = std::stod(m[3]);
  } else {
    ADD_FAILURE() << "no score from ONNX Runtime: " << r.output;
  }
  std::cout << "ONNX Runtime: " << r.output;
  return s;
}

// Exports, checks, and compares ONNX Runtime's score with pstrain's.
void ExpectRuntimeScoresAsPstrain(const std::string& run_dir, const std::string& checkpoint,
                                  const std::string& out) {
  const Result r = Pstrain({"export", "--run_dir=" + run_dir, "--checkpoint=" + checkpoint,
                            "--format=onnx", "--out=" + out});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("wrote " + out + " (ONNX, opset 13"));
  ExpectOnnxCheckerAccepts(out);
  const Score ours = Evaluate(run_dir, checkpoint);
  const Score theirs = OnnxRuntimeScore(out);
  EXPECT_EQ(ours.count, 10000);
  EXPECT_EQ(theirs.count, 10000);
  EXPECT_EQ(theirs.correct, ours.correct)
      << "ONNX Runtime and pstrain disagree on some test images";
  EXPECT_NEAR(theirs.loss, ours.loss, 1e-5 + 1e-4 * ours.loss);
}

class ExportedMnistCnn : public ::testing::Test {
 protected:
  // One 2 ps + 2 worker run, with checkpoints, shared by the tests.
  static void SetUpTestSuite() {
    run_dir_ = new std::string(Train("mnist_cnn", "cluster_specs/local_2ps_2w.json",
                                     {"--max_steps=120", "--checkpoint_every_steps=40"}));
  }
  static void TearDownTestSuite() { delete run_dir_; }
  static std::string* run_dir_;
};
std::string* ExportedMnistCnn::run_dir_ = nullptr;

TEST_F(ExportedMnistCnn, OnnxRuntimeScoresTheFinalModelExactlyAsTheRunDid) {
  const std::string out = *run_dir_ + "/model.onnx";
  ExpectRuntimeScoresAsPstrain(*run_dir_, "", out);
  // And as the chief's own final evaluation, which summary.json keeps.
  const proto::RunSummary summary = testing::ReadRunSummary(*run_dir_);
  const Score theirs = OnnxRuntimeScore(out);
  EXPECT_EQ(theirs.correct, std::llround(summary.final_test_accuracy() * 10000));
  EXPECT_GT(summary.final_test_accuracy(),
            0.8);  // a trained model, not a lucky constant
}

TEST_F(ExportedMnistCnn, ACheckpointExportsAndScoresAsPstrainScoresIt) {
  ExpectRuntimeScoresAsPstrain(*run_dir_, "ckpt-40", *run_dir_ + "/ckpt-40.onnx");
  const Score at40 = Evaluate(*run_dir_, "ckpt-40");
  const Score final_score = Evaluate(*run_dir_, "");
  EXPECT_NE(at40.correct, final_score.correct);  // another model: it trained on
}

TEST_F(ExportedMnistCnn, BadInputExitsTwoNamingWhatIsWrong) {
  Result r = Pstrain({"export", "--run_dir=" + *run_dir_ + "/none"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("no such run directory"));
  r = Pstrain({"export", "--run_dir=" + *run_dir_, "--format=tflite"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("--format=tflite: expected onnx"));
  r = Pstrain({"export", "--run_dir=" + *run_dir_, "--checkpoint=ckpt-41"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("ckpt-41"));
  // A truncated copy of the run's parameters.
  const std::string copy = testing::MakeTempDir("truncated");
  auto params = ReadFileToString(*run_dir_ + "/final_params.f32");
  ASSERT_TRUE(params.ok());
  ASSERT_TRUE(
      WriteFileAtomic(copy + "/final_params.f32", params->substr(0, params->size() - 4)).ok());
  ASSERT_TRUE(
      WriteFileAtomic(copy + "/launch.json", *ReadFileToString(*run_dir_ + "/launch.json")).ok());
  r = Pstrain({"evaluate", "--run_dir=" + copy});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr(copy + "/final_params.f32"));
  EXPECT_THAT(r.output, HasSubstr("21840 parameters"));
}

// `pstrain predict` on PNGs of MNIST test images: for each, the class and
// probability that the model's evaluation gives (Evaluate with the class as
// the label: correct, and exp(-loss) its probability), and the same with
// the images inverted and --invert.
TEST_F(ExportedMnistCnn, PredictClassifiesPngsAsTheModelEvaluatesThem) {
  const std::string dir = testing::MakeTempDir("predict");
  auto test = LoadMnist(testing::SourcePath("data/mnist"), Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  auto saved = LoadSavedModel(*run_dir_, "");
  ASSERT_TRUE(saved.ok()) << saved.status();
  models::ModelOptions options;
  options.name = "mnist_cnn";
  options.max_batch = 1;
  auto model = models::CreateModel(options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->SetParams(saved->params).ok());
  constexpr int kImages = 12;
  std::vector<std::string> args = {"predict", "--run_dir=" + *run_dir_};
  std::vector<std::string> inverted_args = {"predict", "--run_dir=" + *run_dir_, "--invert"};
  std::vector<std::string> expected;
  for (int i = 0; i < kImages; ++i) {
    GrayImage image{28, 28, {}};
    image.pixels.assign(test->pixels.begin() + i * 784, test->pixels.begin() + (i + 1) * 784);
    const std::string path = absl::StrCat(dir, "/", i, ".png");
    ASSERT_TRUE(WritePng(path, image).ok());
    for (uint8_t& p : image.pixels) p = static_cast<uint8_t>(255 - p);
    const std::string inverted = absl::StrCat(dir, "/inverted", i, ".png");
    ASSERT_TRUE(WritePng(inverted, image).ok());
    args.push_back(path);
    inverted_args.push_back(inverted);
    // The evaluation's view of image i.
    std::vector<float> x(784);
    int32_t label = 0;
    const int64_t index = i;
    GatherBatch(*test, absl::MakeConstSpan(&index, 1), Normalization{}, x.data(), &label);
    for (int32_t c = 0; c < 10; ++c) {
      models::Batch b;
      b.n = 1;
      b.images = x.data();
      b.labels = &c;
      auto r = (*model)->Evaluate(b);
      ASSERT_TRUE(r.ok()) << r.status();
      if (r->correct == 1) {
        expected.push_back(absl::StrFormat("%s: %d (p %.4f", path, c, std::exp(-r->loss_sum)));
        break;
      }
    }
  }
  ASSERT_EQ(expected.size(), static_cast<size_t>(kImages));
  const Result r = Pstrain(args);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const std::string& e : expected) EXPECT_THAT(r.output, HasSubstr(e));
  const Result inverted = Pstrain(inverted_args);
  ASSERT_EQ(inverted.code, 0) << inverted.output;
  for (int i = 0; i < kImages; ++i) {
    // The same class and probability, under the inverted file's name.
    std::string e = expected[static_cast<size_t>(i)];
    e.replace(0, e.find(':'), absl::StrCat(dir, "/inverted", i, ".png"));
    EXPECT_THAT(inverted.output, HasSubstr(e));
  }
  // A wrongly sized image or a file that is not a PNG: exit 2 naming it,
  // and nothing classified.
  ASSERT_TRUE(WritePng(dir + "/big.png", GrayImage{32, 32, std::vector<uint8_t>(1024, 0)}).ok());
  Result bad = Pstrain({"predict", "--run_dir=" + *run_dir_, args[2], dir + "/big.png"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.output, HasSubstr(dir + "/big.png: 32 x 32 pixels; mnist_cnn takes 28 x 28"));
  EXPECT_THAT(bad.output, Not(HasSubstr(args[2] + ":")));
  bad = Pstrain({"predict", "--run_dir=" + *run_dir_, *run_dir_ + "/summary.json"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.output, HasSubstr("summary.json: not a PNG"));
  bad = Pstrain({"predict", "--run_dir=" + *run_dir_});
  EXPECT_EQ(bad.code, 2);
}

// The larger network (1.2M parameters, two 3x3 convolutions, 9216 features
// into the first linear layer), briefly trained.
TEST(ExportedCnnLarge, OnnxRuntimeScoresItExactlyAsPstrainDoes) {
  const std::string dir =
      Train("cnn_large", "cluster_specs/local_1ps_1w.json", {"--max_steps=4", "--batch_size=32"});
  ExpectRuntimeScoresAsPstrain(dir, "", dir + "/model.onnx");
}

}  // namespace
}  // namespace pstrain

// TensorBoard event files of a real run, read back by an independent
// reader (tools/tensorboard/read_events.py: its own CRC-32C and protobuf
// decoding, TensorFlow's field numbers): every worker's file starts with
// the version record, its train/loss scalars are its steps CSV's losses at
// the same steps, and the chief's test/accuracy and test/loss are
// evals.csv's. A damaged byte makes the reader fail naming the offset.

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/csv.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using testing::RunningProcess;

struct Scalar {
  int64_t step = 0;
  double value = 0;
  double wall_time = 0;
};

struct EventLog {
  std::vector<std::string> versions;                   // file_version records
  std::map<std::string, std::vector<Scalar>> scalars;  // by tag, in file order
};

struct Output {
  int code = -1;
  std::string text;
};

Output RunProgram(const std::string& binary, std::vector<std::string> args) {
  auto p = RunningProcess::Start(binary, std::move(args));
  auto code = p->Wait(300);
  EXPECT_TRUE(code.ok()) << code.status() << "\n" << p->output();
  return {code.ok() ? *code : -1, p->output()};
}

Output ReadEvents(const std::string& path) {
  return RunProgram("/usr/bin/python3",
                    {testing::SourcePath("tools/tensorboard/read_events.py"), path});
}

EventLog Parse(const std::string& text) {
  EventLog log;
  for (const absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    auto v = ParseJson(line, "read_events.py");
    EXPECT_TRUE(v.ok()) << v.status() << ": " << line;
    if (!v.ok()) continue;
    const auto& f = v->struct_value().fields();
    if (f.count("file_version")) {
      log.versions.push_back(f.at("file_version").string_value());
      continue;
    }
    log.scalars[f.at("tag").string_value()].push_back(
        {static_cast<int64_t>(f.at("step").number_value()), f.at("value").number_value(),
         f.at("wall_time").number_value()});
  }
  return log;
}

class TensorBoardRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_dir_ = new std::string(testing::MakeTempDir("tb_run"));
    const Output r = RunProgram(
        testing::BinaryPath("pstrain"),
        {"launch", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_2ps_2w.json"),
         "--free_ports", "--run_dir=" + *run_dir_,
         "--data_dir=" + testing::SourcePath("data/mnist"), "--device=cpu", "--mode=async",
         "--seed=2", "--max_steps=60", "--eval_every_steps=20", "--log_every_steps=0",
         "--echo=none"});
    ASSERT_EQ(r.code, 0) << r.text;
  }
  static void TearDownTestSuite() { delete run_dir_; }
  static std::string* run_dir_;
};
std::string* TensorBoardRun::run_dir_ = nullptr;

TEST_F(TensorBoardRun, EachWorkersLossesAreItsStepsCsvAtTheSameSteps) {
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    const Output out = ReadEvents(absl::StrCat(*run_dir_, "/tb/worker", rank));
    ASSERT_EQ(out.code, 0) << out.text;
    const EventLog log = Parse(out.text);
    ASSERT_EQ(log.versions.size(), 1u);  // one file, one version record
    EXPECT_EQ(log.versions[0], "brain.Event:2");
    auto csv = ReadCsv(absl::StrCat(*run_dir_, "/steps_worker", rank, ".csv"));
    ASSERT_TRUE(csv.ok()) << csv.status();
    const int step_col = csv->Column("step"), loss_col = csv->Column("loss"),
              time_col = csv->Column("unix_time");
    const std::vector<Scalar>& loss = log.scalars.at("train/loss");
    ASSERT_EQ(loss.size(), csv->rows.size());
    ASSERT_GE(loss.size(), 20u);
    for (size_t i = 0; i < loss.size(); ++i) {
      const auto& row = csv->rows[i];
      EXPECT_EQ(loss[i].step, std::stoll(row[step_col])) << i;
      const double want = std::stod(row[loss_col]);  // %.6g in the CSV
      EXPECT_NEAR(loss[i].value, want, 1e-5 * std::max(1.0, std::fabs(want))) << i;
      EXPECT_NEAR(loss[i].wall_time, std::stod(row[time_col]), 1e-3) << i;
    }
    for (const char* tag :
         {"train/staleness", "train/images_per_sec", "train/compute_ms", "train/comm_ms"}) {
      EXPECT_EQ(log.scalars.at(tag).size(), loss.size()) << tag;
    }
    EXPECT_EQ(log.scalars.at("train/learning_rate").size(), 1u);
    EXPECT_GT(log.scalars.at("train/learning_rate")[0].value, 0);
    EXPECT_EQ(log.scalars.count("test/accuracy"), rank == 0 ? 1u : 0u);
  }
}

TEST_F(TensorBoardRun, TheChiefsTestScalarsAreEvalsCsv) {
  const Output out = ReadEvents(*run_dir_ + "/tb/worker0");
  ASSERT_EQ(out.code, 0) << out.text;
  const EventLog log = Parse(out.text);
  auto csv = ReadCsv(*run_dir_ + "/evals.csv");
  ASSERT_TRUE(csv.ok()) << csv.status();
  const std::vector<Scalar>& accuracy = log.scalars.at("test/accuracy");
  const std::vector<Scalar>& loss = log.scalars.at("test/loss");
  ASSERT_EQ(accuracy.size(), csv->rows.size());
  ASSERT_EQ(loss.size(), csv->rows.size());
  ASSERT_GE(accuracy.size(), 3u);  // steps 20, 40 and the final evaluation
  for (size_t i = 0; i < accuracy.size(); ++i) {
    const auto& row = csv->rows[i];
    EXPECT_EQ(accuracy[i].step, std::stoll(row[csv->Column("step")]));
    EXPECT_NEAR(accuracy[i].value, std::stod(row[csv->Column("test_accuracy")]), 1e-6);
    EXPECT_NEAR(loss[i].value, std::stod(row[csv->Column("test_loss")]), 1e-5);
  }
  EXPECT_GT(accuracy.back().value, 0.5);  // a model that learned
}

TEST_F(TensorBoardRun, TheReaderRefusesADamagedFileNamingTheOffset) {
  const Output list = ReadEvents(*run_dir_ + "/tb/worker1");
  ASSERT_EQ(list.code, 0);
  const std::string file = std::string(ParseJson(list.text.substr(0, list.text.find('\n')), "x")
                                           ->struct_value()
                                           .fields()
                                           .at("file")
                                           .string_value());
  std::string bytes = *ReadFileToString(file);
  const std::string damaged = testing::MakeTempDir("tb_damaged") + "/events.out.tfevents.1.h.w";
  bytes[bytes.size() / 2] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomic(damaged, bytes).ok());
  const Output out = ReadEvents(damaged);
  EXPECT_EQ(out.code, 1);
  EXPECT_THAT(out.text, HasSubstr("CRC does not match at offset"));
}

}  // namespace
}  // namespace pstrain

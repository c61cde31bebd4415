// WorkerRuntime, the worker apart from its model, driven as its clients
// drive it (Connect, Start, Resume, BeginStep .. EndStep, ReportDone,
// FinishChief) against real ps servers in this process: a one-worker sync
// job ends exactly where SGD does, and options that cannot work together
// are refused before anything starts.

#include "worker/worker_runtime.h"

#include <memory>
#include <vector>

#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/file_util.h"
#include "google/protobuf/util/json_util.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/live_shards.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr double kLr = 0.5;

class WorkerRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(job_.shards != nullptr && job_.shards->ok());
    spec_ = job_.spec;
    spec_.set_task({TaskType::kWorker, 0});
  }

  WorkerRuntimeOptions Options() const {
    WorkerRuntimeOptions o;
    o.train.mode = proto::SYNC;
    o.train.lr = kLr;
    o.train.momentum = 0;
    o.train.connect_timeout_s = 30;
    o.tensors = {{"a", 5}, {"b", 6}, {"c", 4}};
    o.steps_per_epoch = 3;
    o.total_steps = 3;
    o.initial_params = [](absl::Span<float> p) {
      for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(i);
    };
    return o;
  }

  LiveJob job_ = StartLiveJob(2, 1);
  ClusterSpec spec_;
  const TransportSecurity& security_ = job_.security;
};

TEST_F(WorkerRuntimeTest, AOneWorkerSyncJobEndsWhereSgdDoes) {
  WorkerRuntimeOptions options = Options();
  options.train.run_dir = testing::MakeTempDir("runtime");
  auto rt = WorkerRuntime::Create(spec_, options, security_);
  ASSERT_TRUE(rt.ok()) << rt.status();
  WorkerRuntime& w = **rt;
  EXPECT_TRUE(w.is_chief());
  ASSERT_TRUE(w.Connect().ok());
  ASSERT_TRUE(w.Start().ok());
  ASSERT_TRUE(w.Resume().ok());
  std::vector<float> expected(15);
  for (int i = 0; i < 15; ++i) expected[i] = static_cast<float>(i);
  EXPECT_THAT(std::vector<float>(w.params().begin(), w.params().end()),
              ::testing::ElementsAreArray(expected));
  int steps = 0;
  while (!w.TrainingDone()) {
    ASSERT_LT(steps, 3);
    StepInfo info;
    info.start_us = w.BeginStep();
    info.examples = 4;
    info.loss = 1.0f;
    for (int i = 0; i < 15; ++i) w.grads()[i] = static_cast<float>((i + steps) % 3) - 1.0f;
    for (int i = 0; i < 15; ++i) expected[i] -= static_cast<float>(kLr) * w.grads()[i];
    ASSERT_TRUE(w.EndStep(info).ok());
    ++steps;
    EXPECT_EQ(w.global_step(), steps);
    EXPECT_EQ(w.MinVersion(), steps);
  }
  EXPECT_EQ(steps, 3);
  EXPECT_THAT(std::vector<float>(w.params().begin(), w.params().end()),
              ::testing::ElementsAreArray(expected));
  EXPECT_EQ(w.Mark().step, 3);
  ASSERT_TRUE(w.ReportDone().ok());
  ASSERT_TRUE(w.FinishChief().ok());  // SHUTDOWN: the ps servers end
  // summary.json says where the chief's steps went, in the step log's means.
  auto json = ReadFileToString(options.train.run_dir + "/summary.json");
  ASSERT_TRUE(json.ok()) << json.status();
  proto::RunSummary summary;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*json, &summary).ok());
  EXPECT_EQ(summary.steps_per_worker(), 3);
  EXPECT_EQ(summary.chief_step_ms().steps(), 3);
  EXPECT_GT(summary.chief_step_ms().comm_ms(), 0);
  EXPECT_GE(summary.chief_step_ms().compute_ms(), 0);
  EXPECT_LE(summary.chief_step_ms().wait_ms(), summary.chief_step_ms().comm_ms());
}

TEST_F(WorkerRuntimeTest, OptionsThatCannotWorkTogetherAreRefusedFirst) {
  TrainOptions o = Options().train;
  o.checkpoint_every_steps = 10;  // no --checkpoint_dir
  absl::Status s = WorkerRuntime::CheckOptions(spec_, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--checkpoint_dir"));

  o = Options().train;
  o.ps_replicas = 1;
  auto one_ps = WithFreePorts(ClusterSpec::Local(1, 1, 1));
  ASSERT_TRUE(one_ps.ok());
  one_ps->set_task({TaskType::kWorker, 0});
  s = WorkerRuntime::CheckOptions(*one_ps, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--ps_replicas"));

  EXPECT_TRUE(WorkerRuntime::CheckOptions(spec_, Options().train).ok());
}

TEST_F(WorkerRuntimeTest, AnEmptyTensorInTheLayoutIsRefused) {
  WorkerRuntimeOptions o = Options();
  o.tensors.push_back({"empty", 0});
  auto rt = WorkerRuntime::Create(spec_, o, security_);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain

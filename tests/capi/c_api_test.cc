// The C API from C++, as any language's binding sees it: libpstrain.so
// alone (linked as a shared library), its status codes and last error.
// Misuse (null handles and pointers, wrong sizes, calls out of order)
// returns an error and changes nothing; a worker driven through it trains
// against a real ps process over CURVE, and its steps are the ps's SGD.

#include "include/pstrain/c_api.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/child_process.h"
#include "common/free_ports.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/job_secret.h"

namespace {

using ::testing::HasSubstr;

std::string LastError() { return PstrainGetLastError(); }

std::string TempDir() {
  std::string pattern = ::testing::TempDir() + "/c_api_test.XXXXXX";
  const char* made = mkdtemp(pattern.data());
  return made == nullptr ? ::testing::TempDir() : std::string(made);
}

TEST(CApi, VersionIsTheHeaders) { EXPECT_EQ(PstrainVersion(), PSTRAIN_C_API_VERSION); }

TEST(CApi, NullHandlesAndPointersAreUsageErrors) {
  int rank = 0;
  EXPECT_EQ(PstrainTaskGetRank(nullptr, &rank, nullptr, nullptr, nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(LastError(), "task is NULL");
  EXPECT_EQ(PstrainTaskCreateFromEnv(nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(LastError(), "out is NULL");
  // Rows of an init_std past f32's range would be infinite.
  const int64_t id = 7;
  float row[4];
  EXPECT_EQ(PstrainEmbeddingInitialRows(4, 0, 1e308, 1, 0, 1, &id, row), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(LastError(), "init_std is 1e+308; 0 to 1e36");
  ASSERT_EQ(PstrainEmbeddingInitialRows(4, 0, 1e36, 1, 0, 1, &id, row), PSTRAIN_OK);
  for (float v : row) EXPECT_TRUE(std::isfinite(v)) << v;
  PstrainTaskHandle task = nullptr;
  EXPECT_EQ(PstrainTaskCreate(nullptr, "", 1, "", "", &task), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(task, nullptr);
  EXPECT_EQ(PstrainTaskGetRunDir(nullptr, nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerBeginStep(nullptr, 1), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerSetStepExamples(nullptr, 1), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(LastError(), "worker is NULL");
  int64_t rejoins = 0;
  EXPECT_EQ(PstrainWorkerGetRejoins(nullptr, &rejoins), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerGetVersions(nullptr, &rejoins, nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerTensorReady(nullptr, 0), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerEndStep(nullptr, 0.0), PSTRAIN_ERROR_USAGE);
  int on = 0;
  EXPECT_EQ(PstrainWorkerTimeline(nullptr, &on), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerLayerSpan(nullptr, "conv1", 0, 0, 0), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerLogEvaluation(nullptr, 0.5, 0.1, 1.0), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerFinish(nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerClose(nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerEmbeddingPull(nullptr, 0, 0, nullptr, nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerEmbeddingPullTables(nullptr, 1, nullptr, nullptr, nullptr, nullptr),
            PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerEmbeddingPrefetch(nullptr, 1, nullptr, nullptr, nullptr),
            PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerEmbeddingPrefetched(nullptr, nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerGetPosition(nullptr, nullptr, nullptr, nullptr, nullptr),
            PSTRAIN_ERROR_USAGE);
  PstrainWorkerHandle worker = nullptr;
  const char* names[] = {"w"};
  const int64_t sizes[] = {4};
  float buffer[4] = {};
  EXPECT_EQ(PstrainWorkerCreate(nullptr, "", 1, names, sizes, buffer, buffer, 4, &worker),
            PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(worker, nullptr);
  EXPECT_EQ(PstrainPermutation(10, 1, 0, nullptr), PSTRAIN_ERROR_USAGE);
  double settings[PSTRAIN_GROUP_FIELDS] = {};
  int absent = 0, reduced = 0, slots = 0;
  EXPECT_EQ(PstrainWorkerSetStepOptions(nullptr, 1, settings, 0, nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerReduceGradients(nullptr, 0, nullptr, &absent, &reduced),
            PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerGetOptimizerState(nullptr, &slots, nullptr, 0, nullptr),
            PSTRAIN_ERROR_USAGE);
  const char* json = nullptr;
  EXPECT_EQ(PstrainTaskDescribeJob(nullptr, "", &json), PSTRAIN_ERROR_USAGE);
  const int64_t steps[] = {0};
  EXPECT_EQ(PstrainWorkerCreateWithState(nullptr, "", 1, names, sizes, buffer, buffer, 4, nullptr,
                                         0, steps, &worker),
            PSTRAIN_ERROR_USAGE);
  // Freeing nothing is allowed.
  EXPECT_EQ(PstrainWorkerFree(nullptr), PSTRAIN_OK);
  EXPECT_EQ(PstrainTaskFree(nullptr), PSTRAIN_OK);
}

TEST(CApi, TheLastErrorIsPerThread) {
  EXPECT_EQ(PstrainWorkerFinish(nullptr), PSTRAIN_ERROR_USAGE);
  std::string other = "unset";
  std::thread([&] { other = LastError(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_EQ(LastError(), "worker is NULL");
}

const char* kChiefTfConfig =
    R"({"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]},
        "task": {"type": "worker", "index": 0}})";

TEST(CApi, BadConfigurationIsAConfigError) {
  PstrainTaskHandle task = nullptr;
  EXPECT_EQ(PstrainTaskCreate("{not json", "", 1, "", "", &task), PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("TF_CONFIG"));
  EXPECT_EQ(PstrainTaskCreate("", "", 1, "", "", &task), PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("TF_CONFIG is not set"));
  const std::string ps_task = R"({"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]},
                                  "task": {"type": "ps", "index": 0}})";
  EXPECT_EQ(PstrainTaskCreate(ps_task.c_str(), "", 1, "", "", &task), PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("a script runs as a chief or a worker"));
  EXPECT_EQ(PstrainTaskCreate(kChiefTfConfig, "", 0, "", "", &task), PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("PSTRAIN_SECRET_FILE"));
  EXPECT_EQ(PstrainTaskCreate(kChiefTfConfig, "", 1, "", R"(["--no_such_flag=1"])", &task),
            PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("--no_such_flag: not a training flag"));
  EXPECT_EQ(PstrainTaskCreate(kChiefTfConfig, "", 1, "", R"(["--mode=sometimes"])", &task),
            PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("--mode"));
  EXPECT_EQ(PstrainTaskCreate(kChiefTfConfig, "", 1, "", R"({"mode": "sync"})", &task),
            PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("PSTRAIN_FLAGS: expected a JSON array"));
  // JSON nested 40,000 deep took protobuf's parser minutes.
  const std::string deep = std::string(40000, '[') + std::string(40000, ']');
  EXPECT_EQ(PstrainTaskCreate(kChiefTfConfig, "", 1, "", deep.c_str(), &task),
            PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("nested 40000 deep (at most 64)"));
  EXPECT_EQ(PstrainTaskCreate(deep.c_str(), "", 1, "", "", &task), PSTRAIN_ERROR_CONFIG);
  // A secret file without end is read no further than a secret could be.
  EXPECT_EQ(PstrainTaskCreate(kChiefTfConfig, "/dev/zero", 0, "", "", &task), PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("more than 4096 bytes"));
  // A training flag that is not the job's to give (the task's own).
  EXPECT_EQ(PstrainTaskCreate(kChiefTfConfig, "", 1, "", R"(["--cluster_spec=x"])", &task),
            PSTRAIN_ERROR_CONFIG);
  EXPECT_EQ(task, nullptr);
}

TEST(CApi, TheTaskSaysWhoThisProcessIs) {
  PstrainTaskHandle task = nullptr;
  ASSERT_EQ(PstrainTaskCreate(kChiefTfConfig, "", 1, "/tmp/run", R"(["--mode=async"])", &task),
            PSTRAIN_OK)
      << LastError();
  int rank = -1, workers = 0, chief = 0, dynamic = 1;
  ASSERT_EQ(PstrainTaskGetRank(task, &rank, &workers, &chief, &dynamic), PSTRAIN_OK);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(workers, 1);
  EXPECT_EQ(chief, 1);
  EXPECT_EQ(dynamic, 0);
  const char* run_dir = nullptr;
  ASSERT_EQ(PstrainTaskGetRunDir(task, &run_dir), PSTRAIN_OK);
  EXPECT_STREQ(run_dir, "/tmp/run");
  EXPECT_EQ(PstrainTaskFree(task), PSTRAIN_OK);
}

TEST(CApi, ThePermutationIsOneOfTheDataAndTheSameEveryTime) {
  std::vector<int64_t> a(1000), b(1000), c(1000);
  ASSERT_EQ(PstrainPermutation(1000, 7, 0, a.data()), PSTRAIN_OK);
  ASSERT_EQ(PstrainPermutation(1000, 7, 0, b.data()), PSTRAIN_OK);
  ASSERT_EQ(PstrainPermutation(1000, 7, 1, c.data()), PSTRAIN_OK);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 1000u);
  EXPECT_EQ(*std::min_element(a.begin(), a.end()), 0);
  EXPECT_EQ(*std::max_element(a.begin(), a.end()), 999);
  EXPECT_EQ(PstrainPermutation(0, 7, 0, a.data()), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainPermutation(10, 7, -1, a.data()), PSTRAIN_ERROR_USAGE);
}

// One ps process (CURVE, a fresh job secret) and this process as the
// chief, a worker of a 1-ps, 1-worker job.
class CApiWithPs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    secret_ = dir_ + "/job.secret";
    ASSERT_TRUE(pstrain::JobSecret::Generate().WriteNewFile(secret_).ok());
    auto ports = pstrain::FreeLoopbackPorts(2, {});
    ASSERT_TRUE(ports.ok()) << ports.status();
    const std::string cluster = absl::StrFormat(
        R"("cluster": {"worker": ["127.0.0.1:%d"], "ps": ["127.0.0.1:%d"]})", (*ports)[0],
        (*ports)[1]);
    chief_tf_config_ = absl::StrCat("{", cluster, R"(, "task": {"type": "worker", "index": 0}})");
    pstrain::SpawnOptions ps;
    ps.binary = std::string(PSTRAIN_BIN_DIR) + "/ps_server";
    ps.args = {"--secret_file=" + secret_};
    ps.extra_env = {absl::StrCat("TF_CONFIG={", cluster, R"(, "task": {"type": "ps", "index": 0}})")};
    auto process = pstrain::ChildProcess::Spawn(ps);
    ASSERT_TRUE(process.ok()) << process.status();
    ps_ = std::make_unique<pstrain::ChildProcess>(*std::move(process));
  }

  void TearDown() override {
    if (ps_ != nullptr && !ps_->exited()) ps_->Signal(SIGKILL);
  }

  PstrainTaskHandle MakeTask(const char* flags = R"(["--mode=sync", "--log_every_steps=0"])") {
    PstrainTaskHandle task = nullptr;
    EXPECT_EQ(
        PstrainTaskCreate(chief_tf_config_.c_str(), secret_.c_str(), 0, dir_.c_str(), flags, &task),
        PSTRAIN_OK)
        << LastError();
    return task;
  }

  // The ps's exit code, waiting up to `timeout_s` (reading its output).
  int WaitPs(double timeout_s) {
    char buf[4096];
    for (int i = 0; i < timeout_s * 10 && !ps_->Reap(); ++i) {
      while (ps_->output_fd() >= 0 && read(ps_->output_fd(), buf, sizeof(buf)) > 0) {
      }
      usleep(100000);
    }
    return ps_->exited() ? ps_->exit_code() : -1000;
  }

  std::string dir_, secret_, chief_tf_config_;
  std::unique_ptr<pstrain::ChildProcess> ps_;
};

TEST_F(CApiWithPs, CallsOutOfOrderAreRefusedAndTheStepsAreThePsSgd) {
  PstrainTaskHandle task = MakeTask();
  ASSERT_NE(task, nullptr);
  const char* names[] = {"a", "b"};
  const int64_t sizes[] = {3, 5};
  std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> initial = params;
  std::vector<float> grads(8, 0.0f);
  const char* job = R"({"optimizer": "sgd", "lr": 0.5, "momentum": 0, "steps_per_epoch": 3,
                        "epochs": 1, "batch_size": 4})";
  PstrainWorkerHandle worker = nullptr;
  // Sizes that do not add up, and an empty tensor.
  EXPECT_EQ(PstrainWorkerCreate(task, job, 2, names, sizes, params.data(), grads.data(), 9, &worker),
            PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("the buffers hold 9 floats; the layout's tensors add up to 8"));
  const int64_t empty[] = {3, 0};
  EXPECT_EQ(PstrainWorkerCreate(task, job, 2, names, empty, params.data(), grads.data(), 3, &worker),
            PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerCreate(task, R"({"optimizer": "rmsprop"})", 2, names, sizes,
                                params.data(), grads.data(), 8, &worker),
            PSTRAIN_ERROR_CONFIG);
  // More epochs than the epoch lines count ("epoch 1/-1530494976").
  EXPECT_EQ(PstrainWorkerCreate(task, R"({"total_steps": 1e15, "steps_per_epoch": 1})", 2, names,
                                sizes, params.data(), grads.data(), 8, &worker),
            PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("is more than 1073741824 epochs"));
  // Sizes whose sum wraps around (to 0 with four of 2^62: a division by
  // it was a SIGFPE), a name that is not UTF-8 (a header the ps cannot
  // read: Create never returned), one of 16 MiB.
  const char* four[] = {"a", "b", "c", "d"};
  const int64_t huge[] = {int64_t{1} << 62, int64_t{1} << 62, int64_t{1} << 62, int64_t{1} << 62};
  const std::vector<float> slots(8, 0.0f);
  const int64_t steps[] = {0, 0, 0, 0};
  EXPECT_EQ(PstrainWorkerCreateWithState(task, job, 4, four, huge, params.data(), grads.data(), 0,
                                         slots.data(), 8, steps, &worker),
            PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("hold more than 2^48 floats"));
  const char* not_utf8[] = {"a", "\xff\xfe"};
  EXPECT_EQ(
      PstrainWorkerCreate(task, job, 2, not_utf8, sizes, params.data(), grads.data(), 8, &worker),
      PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("tensor 1's name is not UTF-8"));
  const std::string long_name(16 << 20, 'x');
  const char* long_names[] = {"a", long_name.c_str()};
  EXPECT_EQ(
      PstrainWorkerCreate(task, job, 2, long_names, sizes, params.data(), grads.data(), 8, &worker),
      PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("tensor 1's name has 16777216 bytes; 1 to 4096"));
  EXPECT_EQ(worker, nullptr);

  ASSERT_EQ(PstrainWorkerCreate(task, job, 2, names, sizes, params.data(), grads.data(), 8, &worker),
            PSTRAIN_OK)
      << LastError();
  EXPECT_EQ(params, initial);  // the chief's are the job's
  EXPECT_EQ(PstrainTaskFree(task), PSTRAIN_ERROR_USAGE);  // its worker lives
  // Out of order: nothing happens.
  EXPECT_EQ(PstrainWorkerEndStep(worker, 0.0), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("no step is under way"));
  EXPECT_EQ(PstrainWorkerTensorReady(worker, 0), PSTRAIN_ERROR_USAGE);
  // (Finish with steps left would leave the job: tests/python, torch_loops.)
  EXPECT_EQ(PstrainWorkerClose(worker), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("Finish first"));
  EXPECT_EQ(PstrainWorkerBeginStep(worker, -1), PSTRAIN_ERROR_USAGE);
  // More examples than a ps takes: refused here, the worker still usable
  // (the ps's refusal at EndStep left it failed for good).
  EXPECT_EQ(PstrainWorkerBeginStep(worker, (1 << 24) + 1), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("num_examples is 16777217; 0 to 16777216"));
  // An evaluation's time: NaN or past a year would corrupt the summary.
  EXPECT_EQ(PstrainWorkerLogEvaluation(worker, 0.5, 0.1, INFINITY), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerLogEvaluation(worker, 0.5, 0.1, NAN), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerLayerSpan(worker, "\xc3", 0, 1, 1), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("layer is not UTF-8"));
  // No timeline in this job: spans are checked, then dropped.
  int timeline = 1;
  ASSERT_EQ(PstrainWorkerTimeline(worker, &timeline), PSTRAIN_OK);
  EXPECT_EQ(timeline, 0);
  EXPECT_EQ(PstrainWorkerTimeline(worker, nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(PstrainWorkerLayerSpan(worker, "a", 0, 1, 1), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("no step is under way"));
  // No ps went away: no rejoin (tests/python, torch_recovery: one that did).
  int64_t rejoins = -1;
  ASSERT_EQ(PstrainWorkerGetRejoins(worker, &rejoins), PSTRAIN_OK);
  EXPECT_EQ(rejoins, 0);
  EXPECT_EQ(PstrainWorkerGetRejoins(worker, nullptr), PSTRAIN_ERROR_USAGE);
  EXPECT_EQ(LastError(), "rejoins is NULL");

  for (int step = 0; step < 3; ++step) {
    int64_t at = -1, total = 0, per_epoch = 0;
    int done = 1;
    ASSERT_EQ(PstrainWorkerGetPosition(worker, &at, &total, &per_epoch, &done), PSTRAIN_OK);
    EXPECT_EQ(at, step);
    EXPECT_EQ(total, 3);
    EXPECT_EQ(per_epoch, 3);
    EXPECT_EQ(done, 0);
    // Sync: every shard's parameters are at the job's step.
    int64_t lowest = -1, highest = -1;
    ASSERT_EQ(PstrainWorkerGetVersions(worker, &lowest, &highest), PSTRAIN_OK);
    EXPECT_EQ(lowest, step);
    EXPECT_EQ(highest, step);
    ASSERT_EQ(PstrainWorkerBeginStep(worker, 4), PSTRAIN_OK) << LastError();
    EXPECT_EQ(PstrainWorkerBeginStep(worker, 4), PSTRAIN_ERROR_USAGE);
    EXPECT_EQ(PstrainWorkerLayerSpan(worker, nullptr, 0, 1, 1), PSTRAIN_ERROR_USAGE);
    EXPECT_EQ(PstrainWorkerLayerSpan(worker, "", 0, 1, 1), PSTRAIN_ERROR_USAGE);
    EXPECT_EQ(PstrainWorkerLayerSpan(worker, "a", 1, 1, -1), PSTRAIN_ERROR_USAGE);
    EXPECT_EQ(PstrainWorkerLayerSpan(worker, "a", 1, -1, 5), PSTRAIN_ERROR_USAGE);
    EXPECT_EQ(PstrainWorkerLayerSpan(worker, "a", 1, INT64_MAX - 2, 5), PSTRAIN_ERROR_USAGE);
    EXPECT_EQ(PstrainWorkerLayerSpan(worker, "a", 1, 1, 5), PSTRAIN_OK) << LastError();
    for (int i = 0; i < 8; ++i) grads[i] = static_cast<float>(i + 1);
    ASSERT_EQ(PstrainWorkerTensorReady(worker, 1), PSTRAIN_OK);
    EXPECT_EQ(PstrainWorkerTensorReady(worker, 1), PSTRAIN_ERROR_USAGE);
    EXPECT_EQ(PstrainWorkerTensorReady(worker, 2), PSTRAIN_ERROR_USAGE);
    EXPECT_THAT(LastError(), HasSubstr("tensor 2 is not one of the 2"));
    EXPECT_EQ(PstrainWorkerSetStepExamples(worker, 0), PSTRAIN_ERROR_USAGE);
    EXPECT_THAT(LastError(), HasSubstr("a tensor of the step is ready already"));
    ASSERT_EQ(PstrainWorkerEndStep(worker, 0.25), PSTRAIN_OK) << LastError();
  }
  // Three steps of plain SGD on the ps: p -= lr * g, g = i + 1.
  for (int i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(params[i], initial[i] - 3 * 0.5f * static_cast<float>(i + 1)) << i;
  }
  int done = 0;
  ASSERT_EQ(PstrainWorkerGetPosition(worker, nullptr, nullptr, nullptr, &done), PSTRAIN_OK);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(PstrainWorkerBeginStep(worker, 4), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("no step is left"));
  EXPECT_EQ(PstrainWorkerLogEvaluation(worker, 1.5, 0.1, 1.0), PSTRAIN_ERROR_USAGE);
  ASSERT_EQ(PstrainWorkerLogEvaluation(worker, 0.75, 0.5, 0.01), PSTRAIN_OK) << LastError();
  ASSERT_EQ(PstrainWorkerFinish(worker), PSTRAIN_OK) << LastError();
  EXPECT_EQ(PstrainWorkerFinish(worker), PSTRAIN_ERROR_USAGE);
  ASSERT_EQ(PstrainWorkerClose(worker), PSTRAIN_OK) << LastError();
  EXPECT_EQ(WaitPs(30), 0);  // the chief shut it down
  std::ifstream summary(dir_ + "/summary.json");
  std::stringstream text;
  text << summary.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"final_test_accuracy\": 0.75"));
  EXPECT_THAT(text.str(), HasSubstr("\"updates_applied\": 3"));
  EXPECT_EQ(PstrainWorkerFree(worker), PSTRAIN_OK);
  EXPECT_EQ(PstrainTaskFree(task), PSTRAIN_OK);
}

// Forward ahead: EndStep returns with the parameters the step before
// brought (the first: the initial ones), the position moves on at once,
// Land takes the step in flight (not inside a step), Finish the last.
TEST_F(CApiWithPs, ForwardAheadHandsEachStepTheParametersOfTheStepBefore) {
  PstrainTaskHandle task = MakeTask(R"(["--mode=async", "--log_every_steps=0"])");
  ASSERT_NE(task, nullptr);
  const char* names[] = {"a", "b"};
  const int64_t sizes[] = {3, 5};
  std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> grads(8, 0.0f);
  PstrainWorkerHandle worker = nullptr;
  const char* sync_job = R"({"forward_ahead": true, "mode": "sync"})";
  EXPECT_EQ(
      PstrainWorkerCreate(task, sync_job, 2, names, sizes, params.data(), grads.data(), 8, &worker),
      PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("for async and ssp jobs"));
  EXPECT_EQ(PstrainWorkerCreate(task, R"({"forward_ahead": 1})", 2, names, sizes, params.data(),
                                grads.data(), 8, &worker),
            PSTRAIN_ERROR_CONFIG);
  const char* job = R"({"optimizer": "sgd", "lr": 0.5, "momentum": 0, "total_steps": 4,
                        "forward_ahead": true})";
  ASSERT_EQ(
      PstrainWorkerCreate(task, job, 2, names, sizes, params.data(), grads.data(), 8, &worker),
      PSTRAIN_OK)
      << LastError();
  // P[k]: the ps's parameters after k updates, g_k = (i + 1) (k + 1), at
  // the lr of 0.25 the first step sets, which holds for the steps after
  // (settings hold until set again; ahead, they wait for the step before).
  std::vector<std::vector<float>> p = {params};
  for (int k = 0; k < 4; ++k) {
    p.push_back(p.back());
    for (int i = 0; i < 8; ++i) p.back()[i] -= 0.25f * static_cast<float>((i + 1) * (k + 1));
  }
  double settings[PSTRAIN_GROUP_FIELDS] = {};
  settings[PSTRAIN_GROUP_LR] = 0.25;
  const int none[] = {0};
  ASSERT_EQ(PstrainWorkerLand(worker), PSTRAIN_OK) << "nothing in flight";
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(PstrainWorkerBeginStep(worker, 4), PSTRAIN_OK) << LastError();
    if (k == 0) {
      ASSERT_EQ(PstrainWorkerSetStepOptions(worker, 1, settings, 0, none), PSTRAIN_OK)
          << LastError();
    }
    EXPECT_EQ(PstrainWorkerLand(worker), PSTRAIN_ERROR_USAGE);
    for (int i = 0; i < 8; ++i) grads[i] = static_cast<float>((i + 1) * (k + 1));
    ASSERT_EQ(PstrainWorkerEndStep(worker, 0.25), PSTRAIN_OK) << LastError();
    // The grads are the library's now: the next backward may write them.
    std::fill(grads.begin(), grads.end(), 1e6f);
    EXPECT_EQ(params, p[k]) << "after step " << k;
    int64_t at = -1;
    int done = -1;
    ASSERT_EQ(PstrainWorkerGetPosition(worker, &at, nullptr, nullptr, &done), PSTRAIN_OK);
    EXPECT_EQ(at, k + 1);
    EXPECT_EQ(done, k == 3 ? 1 : 0);
    if (k == 1) {
      ASSERT_EQ(PstrainWorkerLand(worker), PSTRAIN_OK) << LastError();
      EXPECT_EQ(params, p[2]) << "Land takes step 1's reply";
    }
  }
  ASSERT_EQ(PstrainWorkerFinish(worker), PSTRAIN_OK) << LastError();
  EXPECT_EQ(params, p[4]);
  ASSERT_EQ(PstrainWorkerClose(worker), PSTRAIN_OK) << LastError();
  EXPECT_EQ(WaitPs(30), 0);
  std::ifstream summary(dir_ + "/summary.json");
  std::stringstream text;
  text << summary.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"updates_applied\": 4"));
  EXPECT_THAT(text.str(), HasSubstr("\"max_staleness\": 1"));
  EXPECT_EQ(PstrainWorkerFree(worker), PSTRAIN_OK);
  EXPECT_EQ(PstrainTaskFree(task), PSTRAIN_OK);
}

// A script's calls (C API 3): the step's settings and absent tensors, the
// workers' average, the optimizer's state read and given at the start, the
// job described; and their misuse, refused with nothing changed.
TEST_F(CApiWithPs, AScriptsStepSettingsAverageAndOptimizerState) {
  PstrainTaskHandle task = MakeTask();
  ASSERT_NE(task, nullptr);
  const char* described = nullptr;
  ASSERT_EQ(PstrainTaskDescribeJob(task, R"({"optimizer": "adam"})", &described), PSTRAIN_OK)
      << LastError();
  EXPECT_THAT(described, HasSubstr("\"mode\": \"sync\""));
  EXPECT_THAT(described, HasSubstr("\"optimizer\": \"adam\""));
  EXPECT_THAT(described, HasSubstr("\"lr\": 0.001"));  // adam's default
  EXPECT_EQ(PstrainTaskDescribeJob(task, R"({"optimizer": "rmsprop"})", &described),
            PSTRAIN_ERROR_CONFIG);
  const char* names[] = {"a", "b"};
  const int64_t sizes[] = {3, 5};
  std::vector<float> params = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> grads(8, 0.0f);
  // Adam's state: exp_avg then exp_avg_sq, tensor a at step 4, b at 0.
  std::vector<float> slots(16, 0.0f);
  for (int i = 0; i < 8; ++i) slots[8 + i] = 0.01f;
  const int64_t steps[] = {4, 0};
  const char* job = R"({"optimizer": "adam", "lr": 0.1, "total_steps": 2,
                        "tensor_groups": [0, 1]})";
  PstrainWorkerHandle worker = nullptr;
  // A state of the wrong size for Adam is refused before anything joins.
  EXPECT_EQ(PstrainWorkerCreateWithState(task, job, 2, names, sizes, params.data(), grads.data(),
                                         8, slots.data(), 8, steps, &worker),
            PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("adam over this layout takes 16"));
  EXPECT_EQ(PstrainWorkerCreateWithState(task, job, 2, names, sizes, params.data(), grads.data(),
                                         8, slots.data(), 7, steps, &worker),
            PSTRAIN_ERROR_USAGE);
  // A negative exp_avg_sq: every update would be refused as non-finite
  // (its square root), the parameters frozen without a word.
  std::vector<float> negative = slots;
  negative[8 + 2] = -1;
  EXPECT_EQ(PstrainWorkerCreateWithState(task, job, 2, names, sizes, params.data(), grads.data(), 8,
                                         negative.data(), 16, steps, &worker),
            PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("exp_avg_sq of parameter 2 of the shard is -1"));
  ASSERT_EQ(PstrainWorkerCreateWithState(task, job, 2, names, sizes, params.data(), grads.data(),
                                         8, slots.data(), 16, steps, &worker),
            PSTRAIN_OK)
      << LastError();
  int num_slots = 0;
  std::vector<float> read(16, -1.0f);
  std::vector<int64_t> read_steps(2, -1);
  ASSERT_EQ(PstrainWorkerGetOptimizerState(worker, &num_slots, nullptr, 0, nullptr), PSTRAIN_OK);
  EXPECT_EQ(num_slots, 2);
  EXPECT_EQ(PstrainWorkerGetOptimizerState(worker, &num_slots, read.data(), 15, read_steps.data()),
            PSTRAIN_ERROR_USAGE);
  ASSERT_EQ(PstrainWorkerGetOptimizerState(worker, &num_slots, read.data(), 16, read_steps.data()),
            PSTRAIN_OK)
      << LastError();
  EXPECT_EQ(read, slots);
  EXPECT_EQ(read_steps, (std::vector<int64_t>{4, 0}));

  // A step: misuse first, then tensor b absent, group 0 at lr 0.1.
  double settings[2 * PSTRAIN_GROUP_FIELDS] = {};
  for (int g = 0; g < 2; ++g) {
    settings[g * PSTRAIN_GROUP_FIELDS + PSTRAIN_GROUP_LR] = 0.1;
    settings[g * PSTRAIN_GROUP_FIELDS + PSTRAIN_GROUP_BETA1] = 0.9;
    settings[g * PSTRAIN_GROUP_FIELDS + PSTRAIN_GROUP_BETA2] = 0.999;
    settings[g * PSTRAIN_GROUP_FIELDS + PSTRAIN_GROUP_EPS] = 1e-8;
  }
  const int absent[] = {1};
  EXPECT_EQ(PstrainWorkerSetStepOptions(worker, 2, settings, 1, absent), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("no step is under way"));
  EXPECT_EQ(PstrainWorkerSetStepExamples(worker, 4), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("SetStepExamples: no step is under way"));
  ASSERT_EQ(PstrainWorkerBeginStep(worker, 0), PSTRAIN_OK) << LastError();
  EXPECT_EQ(PstrainWorkerSetStepExamples(worker, -1), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("num_examples is -1"));
  // Begun before the examples were known (a script's forward).
  ASSERT_EQ(PstrainWorkerSetStepExamples(worker, 4), PSTRAIN_OK) << LastError();
  EXPECT_EQ(PstrainWorkerSetStepOptions(worker, 1, settings, 1, absent), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("settings of 1 parameter groups; the layout has 2"));
  const int outside[] = {2};
  EXPECT_EQ(PstrainWorkerSetStepOptions(worker, 2, settings, 1, outside), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("SetStepOptions: an absent tensor is not one of the 2"));
  EXPECT_EQ(PstrainWorkerSetStepOptions(worker, 2, settings, 3, absent), PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("num_absent is 3"));
  double bad[2 * PSTRAIN_GROUP_FIELDS];
  std::copy(settings, settings + 2 * PSTRAIN_GROUP_FIELDS, bad);
  bad[PSTRAIN_GROUP_BETA1] = 1.0;
  EXPECT_EQ(PstrainWorkerSetStepOptions(worker, 2, bad, 1, absent), PSTRAIN_ERROR_CONFIG);
  EXPECT_THAT(LastError(), HasSubstr("beta1"));
  EXPECT_EQ(PstrainWorkerSetStepOptions(worker, 2, nullptr, 0, nullptr), PSTRAIN_ERROR_USAGE);
  // One worker: its average is its own gradient.
  for (int i = 0; i < 8; ++i) grads[i] = 0.5f;
  int everywhere[2] = {-1, -1};
  int reduced = 0;
  EXPECT_EQ(PstrainWorkerReduceGradients(worker, 1, outside, everywhere, &reduced),
            PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("Reduce: an absent tensor is not one of the 2"));
  EXPECT_EQ(PstrainWorkerReduceGradients(worker, -1, absent, everywhere, &reduced),
            PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("num_absent is -1"));
  EXPECT_EQ(PstrainWorkerReduceGradients(worker, 1, nullptr, everywhere, &reduced),
            PSTRAIN_ERROR_USAGE);
  EXPECT_THAT(LastError(), HasSubstr("absent is NULL"));
  ASSERT_EQ(PstrainWorkerReduceGradients(worker, 1, absent, everywhere, &reduced), PSTRAIN_OK)
      << LastError();
  EXPECT_EQ(reduced, 1);
  ASSERT_EQ(PstrainWorkerSetStepExamples(worker, 4), PSTRAIN_OK) << LastError();
  EXPECT_EQ(everywhere[0], 0);
  EXPECT_EQ(everywhere[1], 1);
  EXPECT_EQ(grads, std::vector<float>(8, 0.5f));
  ASSERT_EQ(PstrainWorkerSetStepOptions(worker, 2, settings, 1, absent), PSTRAIN_OK) << LastError();
  ASSERT_EQ(PstrainWorkerEndStep(worker, 0.1), PSTRAIN_OK) << LastError();
  // Tensor a took Adam's fifth step from the loaded moments; b stayed.
  for (int i = 3; i < 8; ++i) EXPECT_EQ(params[i], static_cast<float>(i + 1)) << i;
  for (int i = 0; i < 3; ++i) EXPECT_LT(params[i], static_cast<float>(i + 1)) << i;
  ASSERT_EQ(PstrainWorkerGetOptimizerState(worker, &num_slots, read.data(), 16, read_steps.data()),
            PSTRAIN_OK);
  EXPECT_EQ(read_steps, (std::vector<int64_t>{5, 0}));
  EXPECT_EQ(read[3], 0.0f);  // b's exp_avg untouched
  // The settings hold until set again: a step without SetStepOptions
  // leaves b alone too.
  const std::vector<float> after_first = params;
  ASSERT_EQ(PstrainWorkerBeginStep(worker, 4), PSTRAIN_OK) << LastError();
  ASSERT_EQ(PstrainWorkerEndStep(worker, 0.1), PSTRAIN_OK) << LastError();
  for (int i = 3; i < 8; ++i) EXPECT_EQ(params[i], after_first[i]) << i;
  for (int i = 0; i < 3; ++i) EXPECT_LT(params[i], after_first[i]) << i;
  ASSERT_EQ(PstrainWorkerGetOptimizerState(worker, &num_slots, read.data(), 16, read_steps.data()),
            PSTRAIN_OK);
  EXPECT_EQ(read_steps, (std::vector<int64_t>{6, 0}));
  EXPECT_EQ(PstrainWorkerFree(worker), PSTRAIN_OK);
  EXPECT_EQ(PstrainTaskFree(task), PSTRAIN_OK);
}

}  // namespace

// WorkerRuntime, the worker apart from its model, driven as its clients
// drive it (Connect, Start, Resume, BeginStep .. EndStep, ReportDone,
// FinishChief) against real ps servers in this process: a one-worker sync
// job ends exactly where SGD does, a step a ps lost (restored from its
// standby) is sent again with its embedding rows, a refused row push fails
// its step, and options that cannot work together are refused before
// anything starts.

#include "worker/worker_runtime.h"

#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/cluster_spec.h"
#include "common/embedding.h"
#include "common/file_util.h"
#include "common/free_ports.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
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
    // Backward's progress as a model reports it: the gradient from offset
    // 10 on final at the step's start (and reported again 2 ms later, as a
    // layer without parameters does), the rest 2 ms later.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const int64_t later = MonotonicMicros();
    const std::vector<std::pair<int64_t, int64_t>> final_at = {
        {10, info.start_us}, {10, later}, {0, later}};
    info.backward_final = &final_at;
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
  // How long before the push each offset's gradient was final, the mean
  // over the steps, offsets ascending: what `pstrain plan` reads.
  ASSERT_EQ(summary.chief_step_ms().backward_leads_size(), 2);
  const proto::BackwardLead& all = summary.chief_step_ms().backward_leads(0);
  const proto::BackwardLead& from10 = summary.chief_step_ms().backward_leads(1);
  EXPECT_EQ(all.begin(), 0);
  EXPECT_EQ(from10.begin(), 10);
  EXPECT_GE(all.lead_ms(), 0);
  EXPECT_GE(from10.lead_ms() - all.lead_ms(), 2.0 - 1e-6);  // its first report's, not the repeat's
  EXPECT_LE(from10.lead_ms(), summary.chief_step_ms().compute_ms() + 1e-6);
}

// A one-worker sync job with an embedding table and a hot standby, 5
// steps. With `lose_ps0`, ps 0 stops after taking step 2's rows and
// before its gradient (ps 1 applies the step alone), comes back empty, and
// the chief restores it from its standby (ps 1): the worker must send
// step 2's rows again with its gradient. Returns the parameters and the
// table's rows of ids 0..39 at the end.
std::vector<float> RunWithTable(LiveJob& job, bool lose_ps0) {
  ClusterSpec spec = job.spec;
  spec.set_task({TaskType::kWorker, 0});
  WorkerRuntimeOptions o;
  o.train.mode = proto::SYNC;
  o.train.lr = kLr;
  o.train.momentum = 0;
  o.train.connect_timeout_s = 30;
  o.train.ps_replicas = 1;
  o.tensors = {{"a", 5}, {"b", 6}};
  o.steps_per_epoch = 5;
  o.total_steps = 5;
  o.initial_params = [](absl::Span<float> p) {
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(i);
  };
  proto::EmbeddingTableConfig table;
  table.set_name("t");
  table.set_dim(2);
  table.set_optimizer(proto::ROW_ADAGRAD);
  table.set_lr(0.1);
  table.set_eps(1e-10);
  table.set_init_std(1.0);
  o.tables = {table};
  auto rt = WorkerRuntime::Create(spec, o, job.security);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return {};
  WorkerRuntime& w = **rt;
  EXPECT_TRUE(w.Connect().ok());
  EXPECT_TRUE(w.Start().ok());
  EXPECT_TRUE(w.Resume().ok());
  for (int step = 0; step < 5; ++step) {
    StepInfo info;
    info.start_us = w.BeginStep();
    info.examples = 4;
    info.loss = 1.0f;
    std::vector<int64_t> ids;
    for (int64_t id = step; id < 40; id += 3) ids.push_back(id);  // rows on both ps
    std::vector<float> grads(ids.size() * 2);
    for (size_t i = 0; i < grads.size(); ++i)
      grads[i] = 0.1f * static_cast<float>((i + step) % 5) - 0.2f;
    EmbeddingRows rows;
    rows.table = 0;
    rows.dim = 2;
    rows.ids = ids;
    rows.grads = grads;
    rows.has_grad = true;
    EXPECT_TRUE(w.EmbeddingPush(4, {&rows, 1}).ok());
    for (int i = 0; i < 11; ++i) w.grads()[i] = static_cast<float>((i + step) % 3) - 1.0f;
    if (lose_ps0 && step == 2) job.shards->Stop(0);
    absl::Status s = w.EndStep(info);
    if (lose_ps0 && step == 2) {
      EXPECT_FALSE(s.ok()) << "ps 0 was stopped: the step cannot end whole";
      job.shards->Restart(0);
      s = w.Rejoin(s);             // the chief restores ps 0 from its standby
      if (s.ok()) s = w.Resume();  // and sends step 2 again where it was lost
    }
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(w.global_step(), step + 1);
  }
  std::vector<int64_t> all(40);
  for (int64_t id = 0; id < 40; ++id) all[id] = id;
  std::vector<float> out(w.params().begin(), w.params().end());
  std::vector<float> table_rows(all.size() * 2);
  EmbeddingRows pull;
  pull.table = 0;
  pull.dim = 2;
  pull.ids = all;
  pull.rows = absl::MakeSpan(table_rows);
  EXPECT_TRUE(w.EmbeddingPull({&pull, 1}).ok());
  out.insert(out.end(), table_rows.begin(), table_rows.end());
  EXPECT_TRUE(w.ReportDone().ok());
  EXPECT_TRUE(w.FinishChief().ok());
  return out;
}

TEST_F(WorkerRuntimeTest, AStepAPsLostIsSentAgainWithItsRowsAfterItsStandbyRestoresIt) {
  const std::vector<float> lost = RunWithTable(job_, /*lose_ps0=*/true);
  LiveJob reference = StartLiveJob(2, 1);
  ASSERT_TRUE(reference.shards != nullptr && reference.shards->ok());
  const std::vector<float> whole = RunWithTable(reference, /*lose_ps0=*/false);
  ASSERT_EQ(lost.size(), 11u + 80u);
  EXPECT_EQ(lost, whole) << "the run whose ps 0 was lost ends elsewhere (parameters, then rows)";
}

// A 3 ps + 1 worker sync job with a hot standby, 24 steps, whose
// gradients depend on the step alone (so any history that applies each
// step once ends where the uninterrupted run ends), with checkpoints
// every 2 steps in `checkpoint_dir` ("": none). With `lose`: ps 2 stops
// (shard 2 fails over to its standby ps 0, term 1) and comes back (given
// back, term 2: ps 0 now holds a term-2 replica of it); then ps 1 and
// ps 2 stop together and come back empty, and with no standby left for
// shard 1, every shard goes back to the newest checkpoint (or the initial
// parameters); two steps on, ps 1 stops once more and is restored from
// its standby. Returns the final parameters.
std::vector<float> RunThroughLosses(LiveJob& job, bool lose, const std::string& checkpoint_dir) {
  ClusterSpec spec = job.spec;
  spec.set_task({TaskType::kWorker, 0});
  WorkerRuntimeOptions o;
  o.train.mode = proto::SYNC;
  o.train.lr = kLr;
  o.train.momentum = 0;
  o.train.connect_timeout_s = 30;
  o.train.ps_replicas = 1;
  o.train.failover_after_s = 0.5;
  o.train.heartbeat_interval_s = 0.1;
  o.train.recovery_timeout_s = 30;  // a torn job fails in 30 s, not 120
  o.train.checkpoint_dir = checkpoint_dir;
  o.train.checkpoint_every_steps = checkpoint_dir.empty() ? 0 : 2;
  o.tensors = {{"a", 5}, {"b", 6}, {"c", 7}};
  o.steps_per_epoch = 24;
  o.total_steps = 24;
  o.initial_params = [](absl::Span<float> p) {
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(i);
  };
  auto rt = WorkerRuntime::Create(spec, o, job.security);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return {};
  WorkerRuntime& w = **rt;
  EXPECT_TRUE(w.Connect().ok());
  EXPECT_TRUE(w.Start().ok());
  EXPECT_TRUE(w.Resume().ok());
  int event = 0;        // the losses so far
  int steps_since = 0;  // steps ended since the last loss (or the give-back)
  bool given_back = false;
  for (int tries = 0; !w.TrainingDone() && tries < 200; ++tries) {
    const int step = static_cast<int>(w.global_step());
    StepInfo info;
    info.start_us = w.BeginStep();
    info.examples = 4;
    info.loss = 1.0f;
    for (int i = 0; i < 18; ++i) {
      w.grads()[i] = 0.01f * static_cast<float>((7 * i + 3 * step) % 11) - 0.04f;
    }
    if (lose && event == 0 && step == 2) {
      job.shards->Stop(2);  // failed over to ps 0
      ++event;
    } else if (lose && event == 1 && steps_since == 3) {
      job.shards->Restart(2);  // given back once the heartbeat sees it
      ++event;
    } else if (lose && event == 2 && !given_back) {
      absl::SleepFor(absl::Milliseconds(250));  // the steps wait for the heartbeat
    } else if (lose && event == 2 && steps_since == 2) {
      job.shards->Stop(1);
      job.shards->Stop(2);
      job.shards->Restart(1);
      job.shards->Restart(2);
      ++event;
    } else if (lose && event == 3 && steps_since == 2) {
      job.shards->Stop(1);
      job.shards->Restart(1);
      ++event;
    }
    const int before = event;
    absl::Status s = w.EndStep(info);
    if (s.ok()) s = w.CheckShardsHome();  // as the runtime's clients go on
    if (s.ok()) w.MaybeCheckpoint();
    bool rejoined = false;
    if (!s.ok()) {
      rejoined = true;
      s = w.Rejoin(s);
      if (s.ok()) s = w.Resume();
    }
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return {};
    if (event == 2 && rejoined) given_back = true;  // the step ended to give shard 2 back
    const bool on = before == event && !(event == 2 && rejoined) && w.global_step() > step;
    steps_since = on ? steps_since + 1 : 0;
  }
  EXPECT_TRUE(w.TrainingDone());
  if (lose) {
    EXPECT_EQ(event, 4) << "not every loss happened";
  }
  std::vector<float> out(w.params().begin(), w.params().end());
  EXPECT_TRUE(w.ReportDone().ok());
  EXPECT_TRUE(w.FinishChief().ok());
  return out;
}

// The shards restored after the double loss are served at a term above
// every copy of them that is left: ps 0's term-2 replica of shard 2
// included. At a lower term, ps 0 refused every state of the restored
// shard 2 as older than its replica, and the chief's next recovery took
// that replica, from before the rollback, for the newer state: shard 2
// went back to a state of steps undone, with nothing counted as lost, and
// the shards stayed torn.
class RestoredAfterFailover : public ::testing::TestWithParam<bool> {};

TEST_P(RestoredAfterFailover, TheShardOutranksItsStandbysOldReplica) {
  const bool checkpoints = GetParam();
  PsServerOptions ps;
  if (checkpoints) ps.checkpoint_dir = testing::MakeTempDir("restored_after_failover");
  LiveJob lost = StartLiveJob(3, 1, ps);
  ASSERT_TRUE(lost.shards != nullptr && lost.shards->ok());
  const std::vector<float> params = RunThroughLosses(lost, /*lose=*/true, ps.checkpoint_dir);
  LiveJob reference = StartLiveJob(3, 1);
  ASSERT_TRUE(reference.shards != nullptr && reference.shards->ok());
  const std::vector<float> whole = RunThroughLosses(reference, /*lose=*/false, "");
  ASSERT_EQ(whole.size(), 18u);
  EXPECT_EQ(params, whole) << "the run through the losses ends elsewhere";
}

INSTANTIATE_TEST_SUITE_P(WorkerRuntime, RestoredAfterFailover, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "FromACheckpoint" : "FromTheInitialState");
                         });

// A step's row gradients go out without waiting for their answer (the
// dense push follows at once): a ps's refusal of them must still fail the
// step, with the ps's words, and that ps must apply none of the refused
// request's rows (the other ps took a well-formed request of its own).
TEST_F(WorkerRuntimeTest, ARefusedRowPushFailsItsStepWithTheRefusal) {
  WorkerRuntimeOptions o = Options();
  proto::EmbeddingTableConfig table;
  table.set_name("t");
  table.set_dim(2);
  table.set_num_embeddings(10);
  table.set_optimizer(proto::ROW_SGD);
  table.set_lr(0.5);
  table.set_init_std(1.0);
  o.tables = {table};
  auto rt = WorkerRuntime::Create(spec_, o, security_);
  ASSERT_TRUE(rt.ok()) << rt.status();
  WorkerRuntime& w = **rt;
  ASSERT_TRUE(w.Connect().ok());
  ASSERT_TRUE(w.Start().ok());
  ASSERT_TRUE(w.Resume().ok());
  const std::vector<int64_t> ids = {0, 1, 2, 3, 50};  // 50 is outside [0, 10)
  std::vector<float> before(ids.size() * 2);
  EmbeddingRows pull;
  pull.table = 0;
  pull.dim = 2;
  pull.ids = absl::MakeConstSpan(ids).first(4);
  pull.rows = absl::MakeSpan(before).first(8);
  ASSERT_TRUE(w.EmbeddingPull({&pull, 1}).ok());
  StepInfo info;
  info.start_us = w.BeginStep();
  info.examples = 4;
  const std::vector<float> grads(ids.size() * 2, 1.0f);
  EmbeddingRows rows;
  rows.table = 0;
  rows.dim = 2;
  rows.ids = ids;
  rows.grads = grads;
  rows.has_grad = true;
  ASSERT_TRUE(w.EmbeddingPush(4, {&rows, 1}).ok()) << "sent, not answered yet";
  for (int i = 0; i < 15; ++i) w.grads()[i] = 1.0f;
  const absl::Status s = w.EndStep(info);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("EMBEDDING_PUSH refused"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("50"));
  // A new connection reads the refusing ps's rows as they were.
  auto again = WorkerRuntime::Create(spec_, o, security_);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->Connect().ok());
  ASSERT_TRUE((*again)->Start().ok());
  std::vector<float> after(8);
  pull.rows = absl::MakeSpan(after);
  ASSERT_TRUE((*again)->EmbeddingPull({&pull, 1}).ok());
  const int refusing = EmbeddingShardOf(50, 2);
  int checked = 0;
  for (size_t i = 0; i < 4; ++i) {
    if (EmbeddingShardOf(ids[i], 2) != refusing) continue;
    EXPECT_EQ(after[2 * i], before[2 * i]) << "id " << ids[i];
    EXPECT_EQ(after[2 * i + 1], before[2 * i + 1]) << "id " << ids[i];
    ++checked;
  }
  EXPECT_GT(checked, 0) << "ids 0..3 are all on the other ps: pick others";
}

// Async, one worker: each step stages the next step's ids; the next
// step's pull of them takes the rows its push brought, which are the rows
// a pull of the ps gives then, and a pull between steps asks the ps. A
// prefetch larger than one request may hold is refused when it is staged.
TEST_F(WorkerRuntimeTest, APrefetchBringsWhatAPullWouldAndOnlyAStepTakesIt) {
  WorkerRuntimeOptions o = Options();
  o.train.mode = proto::ASYNC;
  o.train.max_message_mb = 1;
  proto::EmbeddingTableConfig table;
  table.set_name("t");
  table.set_dim(4);
  table.set_optimizer(proto::ROW_ADAGRAD);
  table.set_lr(0.1);
  table.set_eps(1e-10);
  table.set_init_std(1.0);
  o.tables = {table};
  o.steps_per_epoch = 4;
  o.total_steps = 4;
  auto rt = WorkerRuntime::Create(spec_, o, security_);
  ASSERT_TRUE(rt.ok()) << rt.status();
  WorkerRuntime& w = **rt;
  ASSERT_TRUE(w.Connect().ok());
  ASSERT_TRUE(w.Start().ok());
  ASSERT_TRUE(w.Resume().ok());
  const auto ids_of = [](int step) {
    std::vector<int64_t> ids;
    for (int64_t id = step; id < 30; id += 2) ids.push_back(id);  // rows on both ps
    return ids;
  };
  const auto rows_of = [](const std::vector<int64_t>& ids, std::vector<float>* rows) {
    EmbeddingRows r;
    r.dim = 4;
    r.ids = ids;
    rows->assign(ids.size() * 4, 0.0f);
    r.rows = absl::MakeSpan(*rows);
    return r;
  };
  for (int step = 0; step < 4; ++step) {
    const std::vector<int64_t> ids = ids_of(step);
    std::vector<float> taken, asked;
    ASSERT_TRUE(w.EmbeddingPull({rows_of(ids, &taken)}, /*prefetched=*/true).ok());
    ASSERT_TRUE(w.EmbeddingPull({rows_of(ids, &asked)}, /*prefetched=*/false).ok());
    EXPECT_EQ(taken, asked) << "step " << step;
    EXPECT_EQ(w.prefetched_tables(), step) << "step " << step;
    StepInfo info;
    info.start_us = w.BeginStep();
    info.examples = 4;
    std::vector<float> grads(ids.size() * 4);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 7) - 0.02f;
    EmbeddingRows push;
    push.dim = 4;
    push.ids = ids;
    push.grads = grads;
    push.has_grad = true;
    ASSERT_TRUE(w.EmbeddingPush(4, {&push, 1}).ok());
    std::vector<float> unused;
    const std::vector<int64_t> next = ids_of(step + 1);
    ASSERT_TRUE(w.StageEmbeddingPrefetch({rows_of(next, &unused)}).ok());
    // 2^24 ids, or rows over the 1 MiB limit: refused, nothing staged.
    std::vector<int64_t> many(70000);
    for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i);
    const absl::Status over = w.StageEmbeddingPrefetch({rows_of(many, &unused)});
    EXPECT_TRUE(absl::IsInvalidArgument(over)) << over;
    EXPECT_THAT(std::string(over.message()), HasSubstr("--max_message_mb"));
    for (int i = 0; i < 15; ++i) w.grads()[i] = 0.5f;
    ASSERT_TRUE(w.EndStep(info).ok());
  }
  std::vector<float> between;
  ASSERT_TRUE(w.EmbeddingPull({rows_of(ids_of(4), &between)}, /*prefetched=*/false).ok());
  EXPECT_EQ(w.prefetched_tables(), 3);
  ASSERT_TRUE(w.ReportDone().ok());
  ASSERT_TRUE(w.FinishChief().ok());
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

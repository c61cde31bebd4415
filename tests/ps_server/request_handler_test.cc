// The ps's protocol logic without sockets: each test drives one shard with
// requests from several "workers" (peers) and checks the replies it gets
// back, parked ones included.

#include "ps_server/request_handler.h"

#include "tests/ps_server/request_handler_fixture.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>

#include "common/file_util.h"
#include "common/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST_F(RequestHandlerTest, RegisterIsParkedUntilTheChiefsInit) {
  EXPECT_TRUE(Send(1, MakeMessage(Base(proto::REGISTER, 1), {})).empty());
  std::vector<Reply> out = Init(proto::SYNC, 2);
  ASSERT_EQ(out.size(), 2u);  // INIT's reply and the parked REGISTER's
  EXPECT_EQ(out[1].peer, Peer(1));
  EXPECT_FALSE(IsError(out[1]));
  EXPECT_EQ(out[1].header.job().num_workers(), 2);
  EXPECT_TRUE(H().workers().registered(1));
}

// Found by fuzz_request: a REGISTER parked before INIT was aborted with the
// worker's own request header (is_reply unset, the worker as sender).
TEST_F(RequestHandlerTest, AbortedParkedRegisterGetsAReplyFromThePs) {
  EXPECT_TRUE(Send(1, MakeMessage(Base(proto::REGISTER, 1), {})).empty());
  std::vector<Reply> out;
  H().AbortParked(absl::CancelledError("shutting down"), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, Peer(1));
  EXPECT_TRUE(out[0].header.is_reply());
  EXPECT_FALSE(out[0].header.has_sender());  // an error reply names no task, shard or job
  EXPECT_EQ(out[0].header.job_id(), 0u);
  EXPECT_EQ(out[0].header.type(), proto::REGISTER);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kCancelled));
}

TEST_F(RequestHandlerTest, SyncParksPullUntilAllWorkersPushed) {
  Init(proto::SYNC, 3);
  RegisterAll(3);
  EXPECT_TRUE(Push(0, 0, 0, 1.0f).empty());
  EXPECT_TRUE(Push(1, 0, 0, 2.0f).empty());
  EXPECT_TRUE(Pull(1, 1, 1).empty());  // wants version 1: parked too
  std::vector<Reply> out = Push(2, 0, 0, 3.0f);
  ASSERT_EQ(out.size(), 4u);  // three PUSH_PULL replies and the parked PULL
  for (const Reply& r : out) {
    EXPECT_FALSE(IsError(r));
    EXPECT_TRUE(r.with_params);
    EXPECT_EQ(r.header.version(), 1);
  }
  // Average (1+2+3)/3 = 2, lr 0.5: 1 - 0.5*2 = 0.
  EXPECT_FLOAT_EQ(H().params()[0], 0.0f);
  EXPECT_EQ(H().Stats().updates_applied(), 1);
}

// A reply says how long the ps held its request back (Header.parked_us): a
// worker's step time splits into communication and waiting with it.
TEST_F(RequestHandlerTest, RepliesSayHowLongTheirRequestWasParked) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  EXPECT_TRUE(Push(0, 0, 0, 1.0f).empty());
  clock_.AdvanceMicros(7000);
  std::vector<Reply> out = Push(1, 0, 0, 2.0f);
  ASSERT_EQ(out.size(), 2u);
  std::map<std::string, int64_t> parked_us;
  for (const Reply& r : out) parked_us[r.peer] = r.header.parked_us();
  EXPECT_EQ(parked_us[Peer(0)], 7000);  // waited for rank 1
  EXPECT_EQ(parked_us[Peer(1)], 0);     // completed the version
  // Served at once: no wait.
  out = Pull(0, 1, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.parked_us(), 0);
}

TEST_F(RequestHandlerTest, SyncAveragesWeightedByExamples) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Push(0, 0, 0, 1.0f, /*n=*/3);
  Push(1, 0, 0, 5.0f, /*n=*/1);
  // (3*1 + 1*5) / 4 = 2 -> 1 - 0.5*2 = 0.
  EXPECT_FLOAT_EQ(H().params()[0], 0.0f);
}

TEST_F(RequestHandlerTest, SyncDropsStalePushesAndCountsThem) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  for (int64_t v = 0; v < 2; ++v) {
    Push(0, v, v, 1.0f);
    Push(1, v, v, 1.0f);
  }
  ASSERT_EQ(H().version(), 2);
  // Computed on version 0: stale. (A rank's repeat of the version just
  // applied is a duplicate instead: recovery_test.cc.)
  std::vector<Reply> out = Push(1, 0, 0, 100.0f);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(IsError(out[0]));
  EXPECT_TRUE(out[0].header.dropped());
  EXPECT_TRUE(out[0].with_params);  // the newest parameters, at once
  EXPECT_FLOAT_EQ(H().params()[0], 0.0f);  // the stale gradient never reached them
  const proto::ShardStats s = H().Stats();
  EXPECT_EQ(s.stale_gradients_dropped(), 1);
  EXPECT_EQ(s.gradients_received(), 5);
  EXPECT_EQ(s.gradients_applied(), 4);
}

TEST_F(RequestHandlerTest, SyncCountsADuplicateGradientOnceAndRefusesFutureOnes) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Push(0, 0, 0, 1.0f, 1, /*then_pull=*/false);
  // A restarted worker repeating the step its predecessor pushed: answered,
  // not applied twice (the version still waits for rank 1).
  std::vector<Reply> dup = Push(0, 0, 0, 1.0f, 1, false);
  ASSERT_EQ(dup.size(), 1u);
  EXPECT_FALSE(IsError(dup[0]));
  EXPECT_EQ(H().version(), 0);
  EXPECT_EQ(H().Stats().duplicate_requests(), 1);
  std::vector<Reply> future = Push(1, 0, 5, 1.0f, 1, false);
  ASSERT_EQ(future.size(), 1u);
  EXPECT_THAT(future[0].header.error().message(), HasSubstr("version 5"));
}

TEST_F(RequestHandlerTest, BackupWorkersApplyWithoutTheSlowestAndDropItLater) {
  Init(proto::SYNC, 3, 0, /*backup=*/1);
  RegisterAll(3);
  Push(0, 0, 0, 1.0f);
  std::vector<Reply> out = Push(1, 0, 0, 3.0f);
  ASSERT_EQ(out.size(), 2u);  // applied after 2 of 3: nobody waits for rank 2
  EXPECT_EQ(H().version(), 1);
  EXPECT_FLOAT_EQ(H().params()[0], 0.0f);  // average of 1 and 3
  std::vector<Reply> late = Push(2, 0, 0, 50.0f);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(late[0].header.dropped());
  EXPECT_FLOAT_EQ(H().params()[0], 0.0f);
  const proto::ShardStats s = H().Stats();
  EXPECT_EQ(s.late_gradients_dropped(), 1);
  EXPECT_EQ(s.gradients_received(), s.gradients_applied() + s.late_gradients_dropped() +
                                        s.stale_gradients_dropped());
}

TEST_F(RequestHandlerTest, BackupWorkersDropEveryLateGradientHoweverFarBehind) {
  Init(proto::SYNC, 3, 0, /*backup=*/1);
  RegisterAll(3);
  for (int v = 0; v < 3; ++v) {  // ranks 0 and 1 make three versions
    Push(0, v, v, 1.0f);
    Push(1, v, v, 1.0f);
  }
  ASSERT_EQ(H().version(), 3);
  std::vector<Reply> out = Push(2, 0, 0, 50.0f);  // the straggler, three versions behind
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].header.dropped());
  EXPECT_EQ(out[0].header.version(), 3);  // served the current version at once
  const proto::ShardStats s = H().Stats();
  EXPECT_EQ(s.late_gradients_dropped(), 1);
  EXPECT_EQ(s.stale_gradients_dropped(), 0);
}

TEST_F(RequestHandlerTest, SyncDropsPushesAfterTheJobsLastVersion) {
  Init(proto::SYNC, 3, 0, /*backup=*/1, false, /*total_steps=*/1);
  RegisterAll(3);
  Push(0, 0, 0, 1.0f);
  Push(1, 0, 0, 1.0f);
  ASSERT_EQ(H().version(), 1);
  // A straggler that saw version 1 on this shard (but not yet on another)
  // pushes once more: nothing is left to apply, and nobody would ever join
  // it, so it is dropped and answered at once instead of parked.
  std::vector<Reply> out = Push(2, 1, 1, 50.0f);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].header.dropped());
  EXPECT_EQ(H().version(), 1);
  EXPECT_FLOAT_EQ(H().params()[0], 0.5f);  // 1 - 0.5 x mean(1, 1)
  EXPECT_EQ(H().Stats().late_gradients_dropped(), 1);
}

TEST_F(RequestHandlerTest, AsyncAppliesOnArrivalAndRecordsStaleness) {
  Init(proto::ASYNC, 2);
  RegisterAll(2);
  std::vector<Reply> a = Push(0, 0, 0, 1.0f);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].header.staleness(), 0);
  EXPECT_EQ(a[0].header.version(), 1);
  std::vector<Reply> b = Push(1, 0, 0, 1.0f);  // computed on 0, shard at 1
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].header.staleness(), 1);
  EXPECT_FLOAT_EQ(H().params()[0], 0.0f);  // 1 - 0.5 - 0.5
  const proto::ShardStats s = H().Stats();
  EXPECT_EQ(s.updates_applied(), 2);
  ASSERT_EQ(s.staleness_histogram_size(), 2);
  EXPECT_EQ(s.staleness_histogram(0), 1);
  EXPECT_EQ(s.staleness_histogram(1), 1);
  EXPECT_EQ(s.max_staleness(), 1);
}

TEST_F(RequestHandlerTest, StalenessAwareLearningRateDividesTheStep) {
  Init(proto::ASYNC, 3, 0, 0, /*staleness_lr=*/true);
  RegisterAll(3);
  Push(0, 0, 0, 1.0f);  // staleness 0: full step, 1 -> 0.5
  Push(1, 0, 0, 1.0f);  // staleness 1: full step, 0.5 -> 0
  Push(2, 0, 0, 1.0f);  // staleness 2: half step, 0 -> -0.25
  EXPECT_FLOAT_EQ(H().params()[0], -0.25f);
}

TEST_F(RequestHandlerTest, SspAlsoDividesTheStepByStaleness) {
  Init(proto::SSP, 3, /*staleness=*/2, 0, /*staleness_lr=*/true);
  RegisterAll(3);
  Push(0, 0, 0, 1.0f);  // staleness 0: 1 -> 0.5
  Push(1, 0, 0, 1.0f);  // staleness 1: 0.5 -> 0
  Push(2, 0, 0, 1.0f);  // staleness 2: half step, 0 -> -0.25
  EXPECT_FLOAT_EQ(H().params()[0], -0.25f);
}

TEST_F(RequestHandlerTest, SspParksAWorkerTooFarAheadOfTheSlowest) {
  Init(proto::SSP, 2, /*staleness=*/1);
  RegisterAll(2);
  // Rank 0 finishes steps 0 and 1 while rank 1 has finished none.
  EXPECT_EQ(Push(0, 0, 0, 0.1f).size(), 1u);  // next step 1: 1 - 0 <= 1, served
  EXPECT_TRUE(Push(0, 1, 1, 0.1f).empty());   // next step 2: 2 - 0 > 1, parked
  EXPECT_EQ(H().Stats().ssp_waits(), 1);
  std::vector<Reply> out = Push(1, 0, 0, 0.1f);  // the slowest finishes step 0
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].peer, Peer(0));  // rank 0 released
  EXPECT_EQ(out[1].header.min_clock(), 1);  // the slowest worker's clock it was served at
  EXPECT_EQ(out[1].header.step(), 0);  // a reply with parameters carries no step
}

// Found by the dynamic-worker emulation: an SSP shard restored alone from
// a checkpoint has the checkpoint's clocks, behind the workers' own steps.
// Each worker's PULL says how many steps it has finished; without that,
// every first pull would wait for steps nobody pushes again.
TEST_F(RequestHandlerTest, SspPullsStateTheWorkersClocks) {
  Init(proto::SSP, 2, /*staleness=*/1);
  RegisterAll(2);
  EXPECT_TRUE(Pull(0, 300, 0).empty());  // rank 1 is at 0 on this shard: wait
  std::vector<Reply> out = Pull(1, 300, 0);
  ASSERT_EQ(out.size(), 2u);  // both served: the slowest has done 300 steps
  for (const Reply& r : out) EXPECT_FALSE(IsError(r));
  EXPECT_EQ(H().Stats().ssp_waits(), 1);
}

// The learning-rate schedule is applied where the update is: version v of
// a sync shard uses the schedule's rate for update v (here a warm-up of 2:
// lr/2, then lr).
TEST_F(RequestHandlerTest, EachVersionUsesTheSchedulesRate) {
  spec_workers_ = 2;
  proto::Header h = Base(proto::INIT, 0);
  proto::JobConfig* job = h.mutable_job();
  job->set_mode(proto::SYNC);
  job->set_num_workers(2);
  job->set_learning_rate(0.5);
  job->set_lr_schedule("step");
  job->set_lr_step_size(1);
  job->set_lr_gamma(0.5);
  job->set_warmup_steps(2);
  ASSERT_EQ(Send(0, MakeMessage(h, {1.0f, 1.0f, 1.0f, 1.0f})).size(), 1u);
  RegisterAll(2);
  const float expected[] = {1.0f - 0.25f, 0.75f - 0.5f, 0.25f - 0.5f, -0.25f - 0.25f};
  for (int v = 0; v < 4; ++v) {  // rates 0.25, 0.5 (warm-up), then 0.5, 0.25 (step)
    Push(0, v, v, 1.0f);
    Push(1, v, v, 1.0f);
    EXPECT_FLOAT_EQ(H().params()[0], expected[v]) << "version " << v;
  }
  // A schedule the ps cannot run is refused at INIT, not applied.
  proto::Header bad = Base(proto::INIT, 0);
  bad.mutable_job()->set_mode(proto::SYNC);
  bad.mutable_job()->set_num_workers(2);
  bad.mutable_job()->set_learning_rate(0.5);
  bad.mutable_job()->set_lr_schedule("sawtooth");
  handler_.reset();
  std::vector<Reply> out = Send(0, MakeMessage(bad, {1.0f, 1.0f, 1.0f, 1.0f}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("sawtooth"));
}

// Every optimizer runs on the shard (ps_server/shard_store.h has their
// rules): one sync version of Adam from p = 1, both workers pushing 0.1,
// moves p by lr x m^ / (sqrt(v^) + eps) = 0.5 x 0.1 / (0.1 + 1e-8); the
// state is the parameters, exp_avg and exp_avg_sq.
TEST_F(RequestHandlerTest, ASyncShardAppliesAdamWithItsMoments) {
  optimizer_ = AdamJob();
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Push(0, 0, 0, 0.1f);
  Push(1, 0, 0, 0.1f);
  EXPECT_NEAR(H().params()[0], 1.0 - 0.5 * 0.1 / (0.1 + 1e-8), 1e-6);
  const std::vector<float> state = H().StateSnapshot();
  ASSERT_EQ(state.size(), 3u * kSize);
  EXPECT_FLOAT_EQ(state[kSize], 0.1f * 0.1f);              // exp_avg
  EXPECT_FLOAT_EQ(state[2 * kSize], 0.001f * 0.1f * 0.1f);  // exp_avg_sq
}

TEST_F(RequestHandlerTest, InitRefusesAnOptimizerItCannotRunNamingTheField) {
  for (int variant = 0; variant < 3; ++variant) {
    optimizer_ = AdamJob();
    if (variant == 0) optimizer_.set_optimizer(static_cast<proto::Optimizer>(9));  // a later build's
    if (variant == 1) optimizer_.set_eps(0.0);
    if (variant == 2) optimizer_.set_beta1(1.0);
    handler_.reset();
    std::vector<Reply> out = Init(proto::SYNC, 2);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(out[0].header.error().message(),
                HasSubstr(variant == 0 ? "optimizer 9" : variant == 1 ? "eps" : "beta1"));
    EXPECT_FALSE(H().initialized());
  }
}

TEST_F(RequestHandlerTest, CountersAddUp) {
  Init(proto::SYNC, 2, 0, 1);
  RegisterAll(2);
  for (int step = 0; step < 5; ++step) {
    Push(0, step, step, 1.0f);
    Push(1, step, step, 1.0f);  // always late: the version moved on after rank 0
  }
  const proto::ShardStats s = H().Stats();
  EXPECT_EQ(s.gradients_received(), 10);
  EXPECT_EQ(s.gradients_received(), s.gradients_applied() + s.stale_gradients_dropped() +
                                        s.late_gradients_dropped());
  EXPECT_EQ(s.pushes_by_rank(0), 5);
  EXPECT_EQ(s.pushes_by_rank(1), 5);
}

TEST_F(RequestHandlerTest, BarrierAnswersWhenEveryWorkerArrived) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  proto::Header b0 = Base(proto::BARRIER, 0);
  b0.set_barrier_name("done");
  b0.mutable_report()->set_images(128);
  EXPECT_TRUE(Send(0, MakeMessage(b0, {})).empty());
  proto::Header b1 = Base(proto::BARRIER, 1);
  b1.set_barrier_name("done");
  b1.mutable_report()->set_images(64);
  EXPECT_EQ(Send(1, MakeMessage(b1, {})).size(), 2u);
  const proto::ShardStats s = H().Stats();
  ASSERT_EQ(s.workers_size(), 2);
  EXPECT_EQ(s.workers(0).images() + s.workers(1).images(), 192);
  // A barrier is single-use per name and rank: the same name starts afresh,
  // without waiting for a rank past its final report (it is gone).
  proto::Header again = Base(proto::BARRIER, 0);
  again.set_barrier_name(b0.barrier_name());
  EXPECT_EQ(Send(0, MakeMessage(again, {})).size(), 1u);
}

// Seen under ASan on a busy machine: the chief's final evaluation outlasted
// the ps's peer timeout, and the ps failed the job naming a worker that had
// finished and exited. A worker's final report tells the ps it may go.
TEST_F(RequestHandlerTest, KnowsWhichWorkersSentTheirFinalReport) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  EXPECT_FALSE(H().reported_done(1));
  proto::Header b1 = Base(proto::BARRIER, 1);
  b1.set_barrier_name("done");
  b1.mutable_report()->set_images(64);
  EXPECT_TRUE(Send(1, MakeMessage(b1, {})).empty());
  EXPECT_TRUE(H().reported_done(1));
  EXPECT_FALSE(H().reported_done(0));
}

TEST_F(RequestHandlerTest, RefusesRequestsOfAnotherJobPlanOrProtocol) {
  Init(proto::SYNC, 2);
  proto::Header h = Base(proto::PULL, 1);
  h.set_job_id(kJob + 1);
  std::vector<Reply> out = Send(1, MakeMessage(h, {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("another cluster spec"));

  h = Base(proto::PULL, 1);
  h.set_plan_fingerprint(kPlan + 1);
  out = Send(1, MakeMessage(h, {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("plan fingerprint"));

  h = Base(proto::PULL, 1);
  h.set_protocol_version(99);
  out = Send(1, MakeMessage(h, {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("protocol version 99"));
  EXPECT_EQ(H().Stats().rejected_requests(), 3);
}

TEST_F(RequestHandlerTest, RefusesBadRangesPayloadsAndRanks) {
  Init(proto::SYNC, 2);
  proto::Header h = Base(proto::PUSH, 1);
  h.set_range_end(kSize + 1);
  EXPECT_THAT(Send(1, MakeMessage(h, std::vector<float>(kSize)))[0].header.error().message(),
              HasSubstr("range"));
  h = Base(proto::PUSH, 1);
  EXPECT_THAT(Send(1, MakeMessage(h, std::vector<float>(kSize + 1)))[0].header.error().message(),
              HasSubstr("larger than the shard"));
  h = Base(proto::PUSH, 1);
  EXPECT_THAT(Send(1, MakeMessage(h, std::vector<float>(kSize - 1)))[0].header.error().message(),
              HasSubstr("payload of 12 bytes"));
  h = Base(proto::PUSH, 1);
  EXPECT_THAT(Send(1, MakeMessage(h, {}))[0].header.error().message(), HasSubstr("payload of 0"));
  h = Base(proto::PULL, 5);
  EXPECT_THAT(Send(5, MakeMessage(h, {}))[0].header.error().message(), HasSubstr("rank 5"));
  h = Base(static_cast<proto::MessageType>(77), 1);
  EXPECT_THAT(Send(1, MakeMessage(h, {}))[0].header.error().message(), HasSubstr("unknown message type"));
  EXPECT_EQ(H().version(), 0);
}

TEST_F(RequestHandlerTest, DropsNonFiniteGradients) {
  Init(proto::ASYNC, 1);
  proto::Header h = Base(proto::PUSH, 0);
  std::vector<float> grad(kSize, 1.0f);
  grad[2] = std::nanf("");
  std::vector<Reply> out = Send(0, MakeMessage(h, grad));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("not finite in f32"));
  EXPECT_FLOAT_EQ(H().params()[2], 1.0f);
  EXPECT_EQ(H().Stats().nonfinite_gradients_dropped(), 1);
}

TEST_F(RequestHandlerTest, RefusesTrainingBeforeInitAndASecondInit) {
  std::vector<Reply> out = Pull(1, 0, 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("not been initialised"));
  Init(proto::SYNC, 2);
  out = Init(proto::SYNC, 2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("already initialised"));
}

TEST_F(RequestHandlerTest, InitFromANonChiefIsRefused) {
  proto::Header h = Base(proto::INIT, 1);
  h.mutable_job()->set_mode(proto::SYNC);
  h.mutable_job()->set_num_workers(2);
  h.mutable_job()->set_learning_rate(0.1);
  std::vector<Reply> out = Send(1, MakeMessage(h, std::vector<float>(kSize, 0.0f)));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("chief"));
  EXPECT_FALSE(H().initialized());
}

TEST_F(RequestHandlerTest, MalformedMessagesAreAnsweredAndCounted) {
  std::vector<Reply> out;
  H().HandleMalformed({"junk", ""}, absl::InvalidArgumentError("bad header"), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, "junk");
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("malformed"));
  EXPECT_EQ(H().Stats().malformed_requests(), 1);
}

TEST_F(RequestHandlerTest, FailureAnswersParkedAndLaterRequests) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  EXPECT_TRUE(Push(0, 0, 0, 1.0f).empty());
  std::vector<Reply> out;
  H().Fail(absl::AbortedError("worker:1 presumed dead"), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("worker:1 presumed dead"));
  out = Pull(0, 1, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("worker:1 presumed dead"));
  // STATS still works, so a user can see what happened.
  proto::Header stats = Base(proto::STATS, 0);
  out = Send(0, MakeMessage(stats, {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(IsError(out[0]));
}

TEST_F(RequestHandlerTest, BoundsWhatAPeerCanMakeItHold) {
  // Pulls for a version no push could complete are refused outright.
  Init(proto::SYNC, 2);
  RegisterAll(2);
  std::vector<Reply> out = Pull(1, 0, 5);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("at most the next version"));
  // Honest-looking pulls for the next version park, up to a bound per rank.
  int refused = 0;
  for (int i = 0; i < 20; ++i) {
    out = Pull(1, 0, 1);
    if (!out.empty()) {
      EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
      ++refused;
    }
  }
  EXPECT_EQ(refused, 12);
  // Barriers: a bounded number open at once.
  for (int i = 0; i < 20; ++i) {
    proto::Header b = Base(proto::BARRIER, 1);
    b.set_barrier_name("b" + std::to_string(i));
    out = Send(1, MakeMessage(b, {}));
    EXPECT_EQ(out.empty(), i < 16) << i;
  }
}

TEST_F(RequestHandlerTest, OnlyTheChiefShutsTheShardDown) {
  Init(proto::SYNC, 2);
  std::vector<Reply> out = Send(1, MakeMessage(Base(proto::SHUTDOWN, 1), {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(IsError(out[0]));
  EXPECT_FALSE(H().shutdown_requested());
  out = Send(0, MakeMessage(Base(proto::SHUTDOWN, 0), {}));
  EXPECT_TRUE(H().shutdown_requested());
}


// --- Security: roles bound to identity, repeats, poison, sizes, leaks. ---

class AuthenticatedHandlerTest : public RequestHandlerTest {
 protected:
  AuthenticatedHandlerTest() {
    principals_["chief:0"] = {Role::kChief, 0};
    principals_["worker:0"] = {Role::kWorker, 1};
    principals_["ps:0"] = {Role::kPs, -1};
    principals_["client"] = {Role::kClient, -1};
  }
  std::vector<Reply> SendAs(const std::string& who, int rank, const Message& m) {
    user_id_ = who;
    return Send(rank, m);
  }
};

TEST_F(AuthenticatedHandlerTest, RolesComeFromTheIdentityNotTheHeader) {
  user_id_ = "chief:0";
  Init(proto::SYNC, 2);
  // worker:0 (rank 1) claiming rank 0 may neither train as it nor shut down.
  std::vector<Reply> out = SendAs("worker:0", 0, MakeMessage(Base(proto::SHUTDOWN, 0), {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("claims rank 0"));
  out = SendAs("worker:0", 1, MakeMessage(Base(proto::SHUTDOWN, 1), {}));
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("only the chief may SHUTDOWN"));
  EXPECT_FALSE(H().shutdown_requested());
  // A client reads counters and nothing else.
  proto::Header client = Base(proto::STATS, 0);
  client.mutable_sender()->set_type(proto::CLIENT);
  EXPECT_FALSE(IsError(SendAs("client", 0, MakeMessage(client, {}))[0]));
  client.set_type(proto::SHUTDOWN);
  EXPECT_TRUE(IsError(SendAs("client", 0, MakeMessage(client, {}))[0]));
  client.set_type(proto::PULL);
  EXPECT_TRUE(IsError(SendAs("client", 0, MakeMessage(client, {}))[0]));
  // Someone the transport did not authenticate never gets in.
  EXPECT_TRUE(IsError(SendAs("", 0, MakeMessage(Base(proto::STATS, 0), {}))[0]));
  EXPECT_EQ(H().Stats().unauthorized_requests(), 5);
  EXPECT_FALSE(IsError(SendAs("chief:0", 0, MakeMessage(Base(proto::SHUTDOWN, 0), {})).back()));
  EXPECT_TRUE(H().shutdown_requested());
}

TEST_F(AuthenticatedHandlerTest, OnlyTheChiefMayInit) {
  proto::Header h = Base(proto::INIT, 1);
  h.mutable_job()->set_mode(proto::SYNC);
  h.mutable_job()->set_num_workers(2);
  h.mutable_job()->set_learning_rate(0.1);
  std::vector<Reply> out = SendAs("worker:0", 1, MakeMessage(h, std::vector<float>(kSize, 0.0f)));
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("only the chief may INIT"));
  EXPECT_FALSE(H().initialized());
}

TEST_F(RequestHandlerTest, InitMustAgreeWithTheSpecsWorkerCount) {
  spec_workers_ = 2;
  H();
  std::vector<Reply> out = Init(proto::SYNC, 9);  // a crafted INIT: more workers than the spec
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("cluster spec has 2"));
  EXPECT_FALSE(H().initialized());
  // Liveness and registration stay sized by the spec whatever INIT said.
  EXPECT_EQ(H().workers().size(), 2);
}

TEST_F(RequestHandlerTest, ARepeatedPushIsAnsweredAgainButNeverAppliedTwice) {
  Init(proto::ASYNC, 1);
  proto::Header h = Base(proto::PUSH, 0);
  h.set_num_examples(1);
  const Message push = MakeMessage(h, std::vector<float>(kSize, 1.0f));
  std::vector<Reply> first = Send(0, push);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_FALSE(IsError(first[0]));
  EXPECT_FLOAT_EQ(H().params()[0], 0.5f);  // 1 - 0.5 * 1
  std::vector<Reply> again = Send(0, push);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_FALSE(IsError(again[0]));
  EXPECT_EQ(again[0].header.request_id(), h.request_id());
  EXPECT_FLOAT_EQ(H().params()[0], 0.5f);
  EXPECT_EQ(H().Stats().updates_applied(), 1);
  EXPECT_EQ(H().Stats().duplicate_requests(), 1);
  // Long forgotten: refused, still not applied.
  for (int i = 0; i < 10; ++i) {
    proto::Header b = Base(proto::BARRIER, 0);
    b.set_barrier_name("x" + std::to_string(i % 8));
    Send(0, MakeMessage(b, {}));
  }
  again = Send(0, push);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].header.error().code(), static_cast<int>(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(H().Stats().updates_applied(), 1);
}

TEST_F(RequestHandlerTest, ARepeatOfAParkedRequestIsAnsweredOnceWhereTheRepeatCameFrom) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  proto::Header h = Base(proto::PUSH_PULL, 0);
  h.set_num_examples(1);
  const Message push = MakeMessage(h, std::vector<float>(kSize, 1.0f));
  EXPECT_TRUE(Send(0, push).empty());  // parked until rank 1 pushes
  std::vector<Reply> out;
  H().Handle({"reconnected", ""}, push, &out);
  EXPECT_TRUE(out.empty());
  out = Push(1, 0, 0, 1.0f);
  ASSERT_EQ(out.size(), 2u);
  const bool rerouted = out[0].peer == "reconnected" || out[1].peer == "reconnected";
  EXPECT_TRUE(rerouted);
  EXPECT_EQ(H().Stats().updates_applied(), 1);
  EXPECT_EQ(H().Stats().gradients_received(), 2);
}

TEST_F(RequestHandlerTest, AHugeFiniteGradientIsRefusedAndTheShardUnchanged) {
  Init(proto::ASYNC, 1);
  proto::Header h = Base(proto::PUSH, 0);
  h.set_num_examples(1);
  std::vector<Reply> out = Send(0, MakeMessage(h, std::vector<float>(kSize, 3e38f)));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("not finite in f32"));
  EXPECT_FLOAT_EQ(H().params()[0], 1.0f);
  EXPECT_EQ(H().version(), 0);
  EXPECT_EQ(H().Stats().nonfinite_gradients_dropped(), 1);
}

TEST_F(RequestHandlerTest, AnUpdateThatWouldOverflowTheParametersIsRefused) {
  Init(proto::ASYNC, 1);
  // Each gradient passes alone (squared norm 3.24e38 < FLT_MAX) and moves
  // p by 4.5e18; the third would leave parameters whose squared norm
  // overflows f32 (4 x 1.35e19^2), so it is refused and nothing changes.
  std::vector<Reply> out;
  for (int i = 0; i < 3; ++i) {
    proto::Header h = Base(proto::PUSH, 0);
    h.set_num_examples(1);
    h.set_step(i);
    out = Send(0, MakeMessage(h, std::vector<float>(kSize, -9e18f)));
    ASSERT_EQ(out.size(), 1u);
    if (i < 2) {
      EXPECT_FALSE(IsError(out[0])) << i;
    }
  }
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("non-finite in f32"));
  EXPECT_FLOAT_EQ(H().params()[0], 1.0f + 9e18f);
  EXPECT_EQ(H().version(), 2);
  EXPECT_EQ(H().Stats().refused_updates(), 1);
}

TEST_F(RequestHandlerTest, BeforeInitOnlyInitMayBeLarge) {
  proto::Header h = Base(proto::REGISTER, 1);
  std::vector<Reply> out = Send(1, MakeMessage(h, std::vector<float>(20000, 0.0f)));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("before INIT"));
  EXPECT_EQ(H().Stats().oversized_requests(), 1);
}

TEST_F(RequestHandlerTest, RefusalsCarryNoJobIdFingerprintRangeOrVersion) {
  Init(proto::SYNC, 2);
  proto::Header h = Base(proto::PULL, 1);
  h.set_job_id(kJob + 1);
  std::vector<Reply> out = Send(1, MakeMessage(h, {}));
  out.push_back(Send(1, MakeMessage(Base(proto::PUSH, 1), {}))[0]);
  std::vector<Reply> malformed;
  H().HandleMalformed({"junk", ""}, absl::InvalidArgumentError("bad"), &malformed);
  out.push_back(malformed[0]);
  for (const Reply& r : out) {
    ASSERT_TRUE(IsError(r));
    EXPECT_EQ(r.header.job_id(), 0u);
    EXPECT_EQ(r.header.plan_fingerprint(), 0u);
    EXPECT_EQ(r.header.range_end(), 0u);
    EXPECT_EQ(r.header.version(), 0);
    EXPECT_FALSE(r.header.has_sender());
    EXPECT_THAT(r.header.error().message(), ::testing::Not(HasSubstr("10b")));
  }
}

TEST_F(RequestHandlerTest, OnlyValidTrafficKeepsAWorkerAlive) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  clock_.AdvanceSeconds(30);
  proto::Header bad = Base(proto::HEARTBEAT, 1);
  bad.set_job_id(kJob + 1);
  Send(1, MakeMessage(bad, {}));
  EXPECT_GE(H().workers().SilentSeconds(1), 30.0);
  Send(1, MakeMessage(Base(proto::HEARTBEAT, 1), {}));
  EXPECT_EQ(H().workers().SilentSeconds(1), 0.0);
}

// Without dynamic workers total_steps is each worker's own count: every
// push of an async job is applied.
TEST_F(RequestHandlerTest, AnAsyncJobAppliesEveryWorkersSteps) {
  ASSERT_EQ(Init(proto::ASYNC, 2, 0, 0, false, /*total_steps=*/2).size(), 1u);
  RegisterAll(2);
  for (int step = 0; step < 2; ++step) {
    for (int rank : {0, 1}) ASSERT_EQ(Push(rank, step, H().version(), 0.5f).size(), 1u);
  }
  EXPECT_EQ(H().Stats().updates_applied(), 4);
  EXPECT_EQ(H().Stats().late_gradients_dropped(), 0);
}

}  // namespace
}  // namespace pstrain

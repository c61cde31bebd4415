// Recovery on the ps, without sockets or sleeping: a FakeClock
// makes workers silent, DeclareSilentDead declares them dead, and the tests
// check what the shard stops (and starts again) waiting for; a restarted
// worker's new session; a restarted ps that asks to rejoin; a rollback.

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_server/request_handler.h"
#include "tests/ps_server/request_handler_fixture.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kPeerTimeoutS = 10.0;

class RecoveryTest : public RequestHandlerTest {
 protected:
  // Makes `silent` silent for longer than the peer timeout while every
  // other rank of `workers` keeps talking (a heartbeat each).
  std::vector<Reply> Silence(int silent, int workers) {
    clock_.AdvanceSeconds(kPeerTimeoutS + 1);
    for (int r = 0; r < workers; ++r) {
      if (r != silent) Send(r, MakeMessage(Base(proto::HEARTBEAT, r), {}));
    }
    std::vector<Reply> out;
    declared_ = H().DeclareSilentDead(kPeerTimeoutS, &out);
    return out;
  }

  std::vector<Reply> Register(int rank, uint64_t session) {
    proto::Header h = Base(proto::REGISTER, rank);
    h.set_session(session);
    return Send(rank, MakeMessage(h, {}));
  }

  // A PUSH_PULL of `value`s by `rank`'s client `session` for sync step
  // (and version) `step`.
  std::vector<Reply> PushAs(int rank, uint64_t session, int64_t step, float value) {
    proto::Header h = Base(proto::PUSH_PULL, rank);
    h.set_session(session);
    h.set_step(step);
    h.set_version(step);
    h.set_num_examples(1);
    return Send(rank, MakeMessage(h, std::vector<float>(kSize, value)));
  }

  // A PULL of version `version` itself (Header.exact_version).
  std::vector<Reply> PullExactly(int rank, uint64_t session, int64_t version) {
    proto::Header h = Base(proto::PULL, rank);
    h.set_session(session);
    h.set_step(version);
    h.set_version(version);
    h.set_exact_version(true);
    return Send(rank, MakeMessage(h, {}));
  }

  std::vector<int> declared_;
};

TEST_F(RecoveryTest, ASyncVersionStopsWaitingForAWorkerDeclaredDead) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  EXPECT_TRUE(Push(0, 0, 0, 1.0f).empty());  // parked: waits for rank 1
  std::vector<Reply> out = Silence(1, 2);
  EXPECT_THAT(declared_, ElementsAre(1));
  EXPECT_EQ(H().version(), 1);  // rank 0's gradient alone made the version
  EXPECT_FLOAT_EQ(H().params()[0], 0.5f);
  ASSERT_EQ(out.size(), 1u);  // rank 0's parked PUSH_PULL, answered
  EXPECT_EQ(out[0].peer, Peer(0));
  EXPECT_TRUE(out[0].with_params);
  EXPECT_EQ(H().Stats().workers_declared_dead(), 1);
  // Declared once, not at every check.
  EXPECT_TRUE(H().DeclareSilentDead(kPeerTimeoutS, &out).empty());
}

TEST_F(RecoveryTest, ADeadWorkerIsWaitedForAgainOnceHeardFrom) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Silence(1, 2);
  Push(0, 0, 0, 1.0f);
  ASSERT_EQ(H().version(), 1);
  Send(1, MakeMessage(Base(proto::HEARTBEAT, 1), {}));
  EXPECT_FALSE(H().workers().dead(1));
  EXPECT_EQ(H().Stats().workers_rejoined(), 1);
  EXPECT_TRUE(Push(0, 1, 1, 1.0f).empty());  // waits for rank 1 again
  EXPECT_EQ(H().version(), 1);
  EXPECT_EQ(Push(1, 1, 1, 1.0f).size(), 2u);
  EXPECT_EQ(H().version(), 2);
}

TEST_F(RecoveryTest, ABarrierCompletesWithoutADeadWorker) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  proto::Header b = Base(proto::BARRIER, 0);
  b.set_barrier_name("done");
  EXPECT_TRUE(Send(0, MakeMessage(b, {})).empty());
  std::vector<Reply> out = Silence(1, 2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.type(), proto::BARRIER);
  EXPECT_FALSE(IsError(out[0]));
}

TEST_F(RecoveryTest, AWorkerThatRejoinsAfterTheOthersFinishedPassesTheFinalBarrierAlone) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  proto::Header done = Base(proto::BARRIER, 1);
  done.set_barrier_name("done");
  *done.mutable_report() = proto::WorkerReport();
  EXPECT_TRUE(Send(1, MakeMessage(done, {})).empty());
  Silence(0, 2);  // the chief, frozen: rank 1 passes "done" without it
  ASSERT_TRUE(H().reported_done(1));
  // The chief wakes and reports done: rank 1, long gone, is not waited for.
  proto::Header chief = Base(proto::BARRIER, 0);
  chief.set_barrier_name("done");
  std::vector<Reply> out = Send(0, MakeMessage(chief, {}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(IsError(out[0]));
}

TEST_F(RecoveryTest, SspStopsWaitingForADeadWorker) {
  Init(proto::SSP, 2, /*staleness=*/1);
  RegisterAll(2);
  Push(0, 0, 0, 0.1f);
  Push(0, 1, 1, 0.1f);
  // Rank 0 would start step 3 with rank 1 still at 0: more than 1 ahead.
  EXPECT_TRUE(Pull(0, 3, 0).empty());
  std::vector<Reply> out = Silence(1, 2);
  ASSERT_EQ(out.size(), 2u);  // both of rank 0's waiting requests
  for (const Reply& r : out) EXPECT_TRUE(r.with_params);
}

TEST_F(RecoveryTest, ARestartedWorkerContinuesAfterTheStepItsPredecessorPushed) {
  Init(proto::SYNC, 2);
  ASSERT_EQ(Register(1, /*session=*/111).size(), 1u);
  EXPECT_TRUE(Push(1, 0, 0, 1.0f).empty());  // parked, then the process dies
  // The restarted process: a new session. Its position is after the step
  // whose gradient is in (version 0 + 1); the old parked pull is dropped.
  std::vector<Reply> reg = Register(1, 222);
  ASSERT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg[0].header.step(), 1);
  std::vector<Reply> out = Push(0, 0, 0, 1.0f);
  ASSERT_EQ(out.size(), 1u);  // the chief's reply only: nothing left for the dead session
  EXPECT_EQ(out[0].peer, Peer(0));
  EXPECT_EQ(H().version(), 1);
}

// The process before a restarted rank 1 died between its pushes of step 0
// to two shards: this one had it, and went on to version 1 with the
// chief's. The other shard still waits for it, so the new process computes
// step 0 again, on version 0 of every shard: this shard sends the
// parameters that version had (exact_version), and counts the repeated
// push once. Its parameters stay those of the uninterrupted run.
TEST_F(RecoveryTest, ARestartedWorkerRepeatsAStepOnTheParametersItWasComputedOn) {
  Init(proto::SYNC, 2);
  ASSERT_EQ(Register(1, /*session=*/111).size(), 1u);
  EXPECT_TRUE(PushAs(1, 111, 0, 1.0f).empty());
  ASSERT_EQ(Push(0, 0, 0, 1.0f).size(), 2u);  // version 1: the chief's reply and rank 1's
  ASSERT_EQ(H().version(), 1);
  const std::vector<float> after(H().params().begin(), H().params().end());
  ASSERT_EQ(after, std::vector<float>(kSize, 0.5f));
  std::vector<Reply> reg = Register(1, 222);
  ASSERT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg[0].header.step(), 1);  // its clock here; the other shard says 0
  std::vector<Reply> out = PullExactly(1, 222, 0);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  EXPECT_TRUE(out[0].with_params);
  EXPECT_TRUE(out[0].previous_params);
  EXPECT_EQ(out[0].header.version(), 0);
  const zmq::message_t frame = H().ParamsFrame(/*previous=*/true);
  EXPECT_EQ(std::vector<float>(frame.data<float>(), frame.data<float>() + kSize),
            std::vector<float>(kSize, 1.0f));  // version 0's
  out = PushAs(1, 222, 0, 1.0f);
  ASSERT_EQ(out.size(), 1u);  // answered at once, with version 1
  EXPECT_FALSE(out[0].header.dropped());
  EXPECT_EQ(out[0].header.version(), 1);
  EXPECT_EQ(H().version(), 1);
  EXPECT_EQ(std::vector<float>(H().params().begin(), H().params().end()), after);
  EXPECT_EQ(H().Stats().duplicate_requests(), 1);
  EXPECT_EQ(H().Stats().stale_gradients_dropped(), 0);
  // Two versions on, version 0 is gone: the current parameters.
  EXPECT_TRUE(PushAs(1, 222, 1, 1.0f).empty());
  ASSERT_EQ(Push(0, 1, 1, 1.0f).size(), 2u);
  out = PullExactly(1, 222, 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].previous_params);
  EXPECT_EQ(out[0].header.version(), 2);
}

TEST_F(RecoveryTest, ARestartedWorkerCanRepeatABarrier) {
  Init(proto::ASYNC, 2);
  ASSERT_EQ(Register(1, 111).size(), 1u);
  proto::Header b = Base(proto::BARRIER, 1);
  b.set_barrier_name("done");
  b.set_session(111);
  EXPECT_TRUE(Send(1, MakeMessage(b, {})).empty());
  ASSERT_EQ(Register(1, 222).size(), 1u);
  b.set_session(222);
  b.set_request_id(1000);
  EXPECT_TRUE(Send(1, MakeMessage(b, {})).empty());  // not "already in barrier"
  proto::Header c = Base(proto::BARRIER, 0);
  c.set_barrier_name("done");
  std::vector<Reply> out = Send(0, MakeMessage(c, {}));
  ASSERT_EQ(out.size(), 2u);  // both answered, the dead session's not
  for (const Reply& r : out) EXPECT_FALSE(IsError(r));
}

TEST_F(RecoveryTest, ARestartedPsAsksWorkersToRejoinUntilItIsRestored) {
  instance_ = 0xabc;
  std::vector<Reply> out = Push(1, 5, 5, 1.0f);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(IsError(out[0]));
  EXPECT_TRUE(out[0].header.rejoin());
  EXPECT_EQ(out[0].header.ps_instance(), 0xabcu);
}

TEST_F(RecoveryTest, UnregisteredWorkersOfAFreshJobAreNotDeclaredDead) {
  Init(proto::SYNC, 2);
  clock_.AdvanceSeconds(100);
  Send(0, MakeMessage(Base(proto::HEARTBEAT, 0), {}));
  std::vector<Reply> out;
  EXPECT_TRUE(H().DeclareSilentDead(kPeerTimeoutS, &out).empty());
}

TEST_F(RecoveryTest, ShutdownTellsAWorkerThatMissedTheEndThatTrainingIsOver) {
  Init(proto::SYNC, 3);
  RegisterAll(3);
  EXPECT_TRUE(Push(1, 0, 0, 1.0f).empty());  // parked: rank 1 is frozen after this
  proto::Header done = Base(proto::BARRIER, 2);
  done.set_barrier_name("done");
  *done.mutable_report() = proto::WorkerReport();
  Send(2, MakeMessage(done, {}));  // rank 2 finished, waiting in "done"
  std::vector<Reply> out = Send(0, MakeMessage(Base(proto::SHUTDOWN, 0), {}));
  // The parked requests of ranks 1 and 2 are answered "training is over",
  // the chief's is answered, and rank 1 gets a notice on its socket too;
  // rank 2, which reported done, none.
  int notices = 0, aborted = 0;
  for (const Reply& r : out) {
    if (r.notice) {
      ++notices;
      EXPECT_EQ(r.peer, Peer(1));
      EXPECT_TRUE(r.header.job_finished());
      EXPECT_EQ(r.header.type(), proto::SHUTDOWN);
    } else if (IsError(r)) {
      ++aborted;
      EXPECT_TRUE(r.header.job_finished());
    }
  }
  EXPECT_EQ(notices, 1);
  EXPECT_EQ(aborted, 2);
}

class RollbackTest : public CheckpointRequestTest {};

TEST_F(RollbackTest, ARollbackAnswersParkedRequestsWithRejoinAndGoesBackToTheFile) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Version(0, 0.1f);
  std::vector<Reply> saved = Save(0, 1);
  ASSERT_EQ(saved.size(), 1u);
  ASSERT_FALSE(IsError(saved[0])) << saved[0].header.error().message();
  const std::vector<float> at_save = Params();
  Version(1, 0.2f);
  EXPECT_TRUE(Pull(1, 2, 3).empty());  // parked until version 3
  // Without rollback a live shard refuses to be restored.
  std::vector<Reply> refused = Restore(1, saved[0].header.saved().checksum(), false);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].header.error().code(), static_cast<int>(absl::StatusCode::kAlreadyExists));
  std::vector<Reply> out = Restore(1, saved[0].header.saved().checksum(), false,
                                   /*rollback=*/true, /*generation=*/7);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].peer, Peer(1));
  EXPECT_TRUE(out[0].header.rejoin());
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("rolled back"));
  EXPECT_FALSE(IsError(out[1]));
  EXPECT_EQ(H().version(), 1);
  EXPECT_EQ(Params(), at_save);
  EXPECT_EQ(H().generation(), 7);
  EXPECT_EQ(H().Stats().rollbacks(), 1);
  std::vector<Reply> reg = Send(1, MakeMessage(Base(proto::REGISTER, 1), {}));
  ASSERT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg[0].header.generation(), 7);
  EXPECT_EQ(reg[0].header.step(), 1);
}

}  // namespace
}  // namespace pstrain

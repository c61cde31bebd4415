// The hot standby (--ps_replicas=1), without processes: the standby's
// requests on a RequestHandler (REPLICATE kept only from its primary,
// FETCH_REPLICA, RESTORE from the state), and the primary's Replicator over
// a real loopback socket: a reply that shows a new state waits until the
// standby has it.

#include <cstring>
#include <thread>

#include "common/embedding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_server/replicator.h"
#include "ps_server/request_handler.h"
#include "tests/ps_server/request_handler_fixture.h"
#include "transport/state_parts.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// A REPLICATE of shard `shard` (range [0, kSize)) from ps `from`: a state
// of `floats` floats (SGD's: parameters and momentum) for a job with
// `optimizer`'s fields.
Message Replicate(int from, int shard, int64_t version, float value,
                  const proto::JobConfig& optimizer = proto::JobConfig(), int floats = 2 * kSize) {
  proto::Header h;
  h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h.set_job_id(kJob);
  h.set_type(proto::REPLICATE);
  h.mutable_sender()->set_type(proto::PS);
  h.mutable_sender()->set_index(from);
  h.set_shard_index(shard);
  h.set_num_shards(2);
  h.set_range_begin(0);
  h.set_range_end(kSize);
  h.set_plan_fingerprint(kPlan);
  h.set_encoding(proto::F32);
  h.mutable_replica()->set_seq(7);
  h.mutable_replica()->set_version(version);
  h.mutable_replica()->set_updates(version);
  for (int r = 0; r < 2; ++r) h.mutable_replica()->add_worker_clocks(version);
  *h.mutable_job() = optimizer;
  return MakeMessage(std::move(h), std::vector<float>(static_cast<size_t>(floats), value));
}

// ps 1 of 2: the standby of shard 0.
class StandbyTest : public RequestHandlerTest {
 protected:
  RequestHandler& Standby() {
    if (standby_ == nullptr) {
      RequestHandlerOptions o{kJob, 1, 2, 2, {}, &clock_, "", 0x5b};
      standby_ = std::make_unique<RequestHandler>(o);
    }
    return *standby_;
  }
  std::vector<Reply> ToStandby(const Message& m) {
    std::vector<Reply> out;
    Standby().Handle({"peer", ""}, m, &out);
    return out;
  }
  // The standby's ROUTER on loopback (router_), and the primary's
  // Replicator to it (replicator_), whose messages it takes up to
  // `max_message_bytes`.
  void ConnectReplicator(int64_t max_message_bytes = int64_t{1} << 30) {
    auto router = BindRouter(context_, "tcp://127.0.0.1:0", SocketOptions());
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    ReplicatorOptions ro;
    ro.standby_name = "ps:1";
    ro.endpoint = router_.get(zmq::sockopt::last_endpoint);
    ro.socket.max_message_bytes = max_message_bytes;
    auto replicator = Replicator::Create(context_, ro, &clock_);
    ASSERT_TRUE(replicator.ok()) << replicator.status();
    replicator_ = *std::move(replicator);
  }
  // A Replicator to a standby that is not there (nothing listens).
  std::unique_ptr<Replicator> ReplicatorToNowhere(double give_up_s) {
    ReplicatorOptions ro;
    ro.standby_name = "ps:1";
    ro.endpoint = "tcp://127.0.0.1:1";
    ro.give_up_s = give_up_s;
    auto replicator = Replicator::Create(context_, ro, &clock_);
    EXPECT_TRUE(replicator.ok()) << replicator.status();
    return replicator.ok() ? *std::move(replicator) : nullptr;
  }
  // The job's table "users": rows of 64 floats, Adagrad.
  void AddUsersTable() {
    proto::EmbeddingTableConfig* t = optimizer_.add_tables();
    t->set_name("users");
    t->set_dim(64);
    t->set_optimizer(proto::ROW_ADAGRAD);
    t->set_lr(0.1);
    t->set_eps(1e-10);
    t->set_init_std(1.0);
  }
  // ps 0 of 2 with a table of 400 rows (64 floats and their Adagrad sums
  // each: about 200 KB), made by one step of rank 1 whose dense push is
  // not sent yet.
  void InitWithRows() {
    num_shards_ = 2;
    AddUsersTable();
    ASSERT_FALSE(IsError(Init(proto::ASYNC, 2)[0]));
    RegisterAll(2);
    ASSERT_NO_FATAL_FAILURE(PushRows(0, 400));
  }
  // Rank 1's gradients of step `step` for `rows` rows (its dense push is
  // not sent).
  void PushRows(int64_t step, size_t rows) {
    std::vector<int64_t> ids;
    for (int64_t id = 0; ids.size() < rows; ++id) {
      if (EmbeddingShardOf(id, 2) == 0) ids.push_back(id);
    }
    proto::Header push = Base(proto::EMBEDDING_PUSH, 1);
    push.set_step(step);
    push.set_version(step);
    proto::EmbeddingSlice* slice = push.mutable_embedding()->add_slices();
    slice->set_num_ids(static_cast<int64_t>(ids.size()));
    slice->set_has_grad(true);
    std::vector<float> payload(ids.size() * 2 + ids.size() * 64, 0.5f);
    std::memcpy(payload.data(), ids.data(), ids.size() * sizeof(int64_t));
    const std::vector<Reply> out = Send(1, MakeMessage(push, payload));
    ASSERT_EQ(out.size(), 1u);
    ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  }
  std::unique_ptr<RequestHandler> standby_;
  zmq::context_t context_{1};
  zmq::socket_t router_;
  std::unique_ptr<Replicator> replicator_;
};

TEST_F(StandbyTest, KeepsItsPrimarysStateAndGivesItToTheChief) {
  std::vector<Reply> ack = ToStandby(Replicate(0, 0, 5, 0.25f));
  ASSERT_EQ(ack.size(), 1u);
  EXPECT_FALSE(IsError(ack[0])) << ack[0].header.error().message();
  EXPECT_EQ(ack[0].header.replica().seq(), 7u);
  EXPECT_EQ(Standby().Stats().replica_version(), 5);
  // Held before this ps was initialised itself (a restarted standby).
  EXPECT_FALSE(Standby().initialized());

  proto::Header fetch = Base(proto::FETCH_REPLICA, 0);
  fetch.set_shard_index(0);
  std::vector<Reply> got = ToStandby(MakeMessage(fetch, {}));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_FALSE(IsError(got[0])) << got[0].header.error().message();
  EXPECT_EQ(got[0].header.replica().version(), 5);
  ASSERT_NE(got[0].payload, nullptr);
  EXPECT_EQ(*got[0].payload, std::vector<float>(2 * kSize, 0.25f));
  fetch.set_shard_index(1);
  got = ToStandby(MakeMessage(fetch, {}));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].header.error().code(), static_cast<int>(absl::StatusCode::kNotFound));
}

TEST_F(StandbyTest, RefusesAStateFromAnyoneButItsPrimary) {
  // ps 1 is nobody's primary for this standby (it is the standby itself).
  std::vector<Reply> out = ToStandby(Replicate(1, 1, 5, 0.25f));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("standby of ps:0"));
  // A worker may not replicate at all.
  Message m = Replicate(0, 0, 5, 0.25f);
  m.header.mutable_sender()->set_type(proto::WORKER);
  m.header.set_rank(1);
  out = ToStandby(m);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(Standby().Stats().replica_version(), -1);
}

// An Adam shard's state is its parameters, exp_avg and exp_avg_sq: kept
// whole, and refused when its size is another optimizer's.
TEST_F(StandbyTest, KeepsAnAdamStateAndRefusesOneOfAnotherSize) {
  std::vector<Reply> ack = ToStandby(Replicate(0, 0, 5, 0.25f, AdamJob(), 3 * kSize));
  ASSERT_EQ(ack.size(), 1u);
  EXPECT_FALSE(IsError(ack[0])) << ack[0].header.error().message();
  proto::Header fetch = Base(proto::FETCH_REPLICA, 0);
  fetch.set_shard_index(0);
  std::vector<Reply> got = ToStandby(MakeMessage(fetch, {}));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_NE(got[0].payload, nullptr);
  EXPECT_EQ(*got[0].payload, std::vector<float>(3 * kSize, 0.25f));
  EXPECT_EQ(got[0].header.job().optimizer(), proto::ADAM);

  std::vector<Reply> out = ToStandby(Replicate(0, 0, 6, 0.5f, AdamJob(), 2 * kSize));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("adam's 2 slot(s)"));
  proto::JobConfig unknown = AdamJob();
  unknown.set_optimizer(static_cast<proto::Optimizer>(9));
  out = ToStandby(Replicate(0, 0, 6, 0.5f, unknown, 3 * kSize));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("optimizer 9"));
  EXPECT_EQ(Standby().Stats().replica_version(), 5);  // the good one is still held
}

class StandbyRestoreTest : public StandbyTest,
                           public ::testing::WithParamInterface<proto::Optimizer> {};

// The restarted primary takes the state (RESTORE from_payload), then both
// apply one more version: they stay equal, slots and step count included.
TEST_P(StandbyRestoreTest, ARestoreFromAStateContinuesFromItExactly) {
  momentum_ = 0.5;
  if (GetParam() != proto::SGD) optimizer_ = AdamJob(GetParam());
  Init(proto::SYNC, 2);
  RegisterAll(2);
  Push(0, 0, 0, 0.1f);
  Push(1, 0, 0, 0.1f);
  ASSERT_EQ(H().version(), 1);
  const std::vector<float> state = H().StateSnapshot();
  const proto::ReplicaState replica = H().ReplicaStateNow();
  // A fresh ps (the restarted primary) takes it, then both apply one more
  // version: they stay equal.
  RequestHandlerOptions o{kJob, 0, 1, 2, {}, &clock_, "", 0};
  RequestHandler restarted(o);
  proto::Header r = Base(proto::RESTORE, 0);
  r.mutable_job()->set_mode(proto::SYNC);
  r.mutable_job()->set_num_workers(2);
  r.mutable_job()->set_learning_rate(0.5);
  r.mutable_job()->set_momentum(0.5);
  r.mutable_job()->MergeFrom(optimizer_);
  r.mutable_restore()->set_from_payload(true);
  *r.mutable_replica() = replica;
  std::vector<Reply> out;
  restarted.Handle({Peer(0), ""}, MakeMessage(r, state), &out);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].header.error().code(), 0) << out[0].header.error().message();
  EXPECT_EQ(restarted.version(), 1);
  for (RequestHandler* h : {&H(), &restarted}) {
    for (int rank = 0; rank < 2; ++rank) {
      proto::Header p = Base(proto::PUSH, rank);
      p.set_step(1);
      p.set_version(1);
      p.set_num_examples(1);
      std::vector<Reply> ignored;
      h->Handle({Peer(rank), ""}, MakeMessage(p, std::vector<float>(kSize, 0.3f)), &ignored);
    }
  }
  EXPECT_EQ(restarted.StateSnapshot(), H().StateSnapshot());
  EXPECT_EQ(H().StateSnapshot().size(), (GetParam() == proto::SGD ? 2u : 3u) * kSize);
  // A state of another optimizer's size is refused, naming the sizes.
  RequestHandler other(o);
  std::vector<float> short_state = state;
  short_state.resize(short_state.size() - kSize);
  out.clear();
  other.Handle({Peer(0), ""}, MakeMessage(r, short_state), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(other.initialized());
}

INSTANTIATE_TEST_SUITE_P(StandbyTest, StandbyRestoreTest,
                         ::testing::Values(proto::SGD, proto::ADAM, proto::ADAMW),
                         [](const ::testing::TestParamInfo<proto::Optimizer>& p) {
                           return proto::Optimizer_Name(p.param);
                         });

// The primary's Replicator against a standby handler behind a real ROUTER.
TEST_F(StandbyTest, AReplyShowingANewStateWaitsForTheStandbysAcknowledgement) {
  num_shards_ = 2;  // ps 0 of 2, whose standby is ps 1
  Init(proto::ASYNC, 2);
  RegisterAll(2);
  zmq::context_t context(1);
  auto router = BindRouter(context, "tcp://127.0.0.1:0", SocketOptions());
  ASSERT_TRUE(router.ok()) << router.status();
  const std::string endpoint = router->get(zmq::sockopt::last_endpoint);
  ReplicatorOptions ro;
  ro.standby_name = "ps:1";
  ro.endpoint = endpoint;
  auto replicator = Replicator::Create(context, ro, &clock_);
  ASSERT_TRUE(replicator.ok()) << replicator.status();

  std::vector<Reply> replies = Push(1, 0, 0, 0.1f);  // applied: version 1
  ASSERT_EQ(replies.size(), 1u);
  (*replicator)->Hold(H(), &replies);
  EXPECT_TRUE(replies.empty());  // held: the standby lacks version 1
  std::vector<Reply> released;
  // Pump until the REPLICATE went out and the standby answered (bounded).
  for (int i = 0; i < 500 && released.empty(); ++i) {
    (*replicator)->Pump(H(), &released);
    RoutedMessage in = ReceiveRouted(*router);
    if (in.message.ok()) {
      std::vector<Reply> ack;
      Standby().Handle({"primary", ""}, *in.message, &ack);
      ASSERT_EQ(ack.size(), 1u);
      ASSERT_EQ(ack[0].header.error().code(), 0) << ack[0].header.error().message();
      ASSERT_TRUE(SendRouted(*router, in.identity, ack[0].header, {}).ok());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].peer, Peer(1));
  EXPECT_EQ(Standby().Stats().replica_version(), 1);
  EXPECT_EQ(H().Stats().replications(), 1);
  // Nothing changed since: a pull's reply passes at once.
  std::vector<Reply> pull = Pull(0, 0, 0);
  (*replicator)->Hold(H(), &pull);
  EXPECT_EQ(pull.size(), 1u);
}

TEST_F(StandbyTest, WithoutAStandbyTheRepliesGoOutAfterTheGiveUpTime) {
  Init(proto::ASYNC, 2);
  RegisterAll(2);
  std::unique_ptr<Replicator> replicator = ReplicatorToNowhere(/*give_up_s=*/5);
  ASSERT_NE(replicator, nullptr);
  std::vector<Reply> replies = Push(1, 0, 0, 0.1f);
  replicator->Hold(H(), &replies);
  std::vector<Reply> released;
  // The ps's loop pumps every 100 ms; here every half second, for 4.5 s,
  // then past the give-up time.
  for (int i = 0; i < 10; ++i) {
    replicator->Pump(H(), &released);
    EXPECT_TRUE(released.empty()) << i;
    clock_.AdvanceSeconds(0.5);
  }
  clock_.AdvanceSeconds(1);
  replicator->Pump(H(), &released);
  EXPECT_EQ(released.size(), 1u);
  EXPECT_EQ(H().Stats().unreplicated_releases(), 1);
}

// A primary paused (frozen) while its standby had not acknowledged a state
// does not give up on it the moment it wakes: its own pause says nothing
// of the standby, which gets the whole give-up time again.
TEST_F(StandbyTest, APausedPrimaryGivesItsStandbyTheWholeGiveUpTimeAgain) {
  Init(proto::ASYNC, 2);
  RegisterAll(2);
  std::unique_ptr<Replicator> replicator = ReplicatorToNowhere(/*give_up_s=*/5);
  ASSERT_NE(replicator, nullptr);
  std::vector<Reply> replies = Push(1, 0, 0, 0.1f);
  replicator->Hold(H(), &replies);
  ASSERT_TRUE(replies.empty());
  std::vector<Reply> released;
  replicator->Pump(H(), &released);
  clock_.AdvanceSeconds(60);  // frozen: the clock moves, the process spends no CPU
  replicator->Pump(H(), &released);
  EXPECT_TRUE(released.empty());
  for (int i = 0; i < 9; ++i) {
    clock_.AdvanceSeconds(0.5);
    replicator->Pump(H(), &released);
    EXPECT_TRUE(released.empty()) << i;
  }
  clock_.AdvanceSeconds(1);
  replicator->Pump(H(), &released);
  EXPECT_EQ(released.size(), 1u);
  EXPECT_EQ(H().Stats().unreplicated_releases(), 1);
}

// A primary whose shard moved while it was away: the ps that adopted it
// refuses its state, naming the term it serves the shard at. From then on
// every reply that shows its copy, held or new, stays held, nothing goes
// to the standby and nothing is released unreplicated however long; once
// the chief restores the shard here at that term or later, the held
// replies are answered with rejoin errors (they showed the replaced copy)
// and the restored state is replicated and answered as before.
TEST_F(StandbyTest, APrimaryWhoseShardMovedHoldsItsRepliesUntilRestored) {
  num_shards_ = 2;
  Init(proto::ASYNC, 2);
  RegisterAll(2);
  ASSERT_NO_FATAL_FAILURE(ConnectReplicator());
  // The standby, serving shard 0 at `term` (0: as its standby): answers
  // every REPLICATE that reached it, as HostedShards would; returns how
  // many.
  int64_t term = 2;
  const auto answer = [&] {
    int answered = 0;
    for (RoutedMessage in = ReceiveRouted(router_); in.message.ok(); in = ReceiveRouted(router_)) {
      std::vector<Reply> ack;
      if (term > 0) {
        ack.push_back({"", ErrorReply(in.message->header,
                                      absl::FailedPreconditionError("served by this ps now"))});
        ack[0].header.mutable_replica()->set_seq(in.message->header.replica().seq());
        ack[0].header.mutable_replica()->set_term(term);
      } else {
        ack = ToStandby(*in.message);
      }
      EXPECT_EQ(ack.size(), 1u);
      EXPECT_TRUE(SendRouted(router_, in.identity, ack[0].header, {}).ok());
      ++answered;
    }
    return answered;
  };
  std::vector<Reply> replies = Push(1, 0, 0, 0.1f);
  replicator_->Hold(H(), &replies);
  ASSERT_TRUE(replies.empty());
  std::vector<Reply> released;
  int answered = 0;
  for (int i = 0; i < 200 && answered == 0; ++i) {
    replicator_->Pump(H(), &released);
    answered += answer();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(answered, 1);
  for (int i = 0; i < 20; ++i) {  // the refusal is read
    replicator_->Pump(H(), &released);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_TRUE(released.empty());
  // New replies are held too: a push's and a pull's.
  replies = Push(0, 0, 0, 0.1f);
  std::vector<Reply> pull = Pull(1, 1, 0);
  replies.insert(replies.end(), pull.begin(), pull.end());
  ASSERT_EQ(replies.size(), 2u);
  replicator_->Hold(H(), &replies);
  EXPECT_TRUE(replies.empty());
  // Never given up on, and the standby is sent nothing.
  for (int i = 0; i < 30; ++i) {
    clock_.AdvanceSeconds(1);
    replicator_->Pump(H(), &released);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(answer(), 0);
  EXPECT_TRUE(released.empty());
  EXPECT_EQ(H().Stats().unreplicated_releases(), 0);
  // The chief gives the shard back: restored here from the adopter's
  // state at term 2, so served at term 3; the standby takes states again.
  term = 0;
  proto::Header r = Base(proto::RESTORE, 0);
  r.mutable_job()->set_mode(proto::ASYNC);
  r.mutable_job()->set_num_workers(2);
  r.mutable_job()->set_learning_rate(0.5);
  r.mutable_restore()->set_from_payload(true);
  r.mutable_restore()->set_rollback(true);  // in place of this ps's copy
  r.mutable_restore()->set_generation(1);
  *r.mutable_replica() = H().ReplicaStateNow();
  r.mutable_replica()->set_term(2);
  std::vector<Reply> out;
  H().Handle({Peer(0), ""}, MakeMessage(r, H().StateSnapshot()), &out);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  ASSERT_EQ(H().term(), 3);
  replies = Push(1, 5, H().version(), 0.1f);
  ASSERT_FALSE(IsError(replies[0])) << replies[0].header.error().message();
  replicator_->Hold(H(), &replies);
  EXPECT_TRUE(replies.empty());
  for (int i = 0; i < 500 && released.size() < 4; ++i) {
    replicator_->Pump(H(), &released);
    answer();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(released.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(released[i].header.rejoin()) << i;
    EXPECT_FALSE(released[i].with_params) << i;
    EXPECT_THAT(released[i].header.error().message(), HasSubstr("was replaced by the chief"));
  }
  EXPECT_EQ(released[0].peer, Peer(1));
  EXPECT_FALSE(IsError(released[3])) << released[3].header.error().message();
  EXPECT_EQ(released[3].peer, Peer(1));
  EXPECT_EQ(Standby().Stats().replica_term(), 3);
  EXPECT_EQ(H().Stats().replications(), 1);
  EXPECT_EQ(H().Stats().unreplicated_releases(), 0);
}

// A refusal that names no newer term than this ps's (a standby holding a
// replica of a newer term than a primary restored from a checkpoint), or
// an implausibly newer one, deposes nothing: the primary goes on as
// without a standby once it gives up.
TEST_F(StandbyTest, ARefusalWithoutAPlausibleNewerTermDeposesNothing) {
  num_shards_ = 2;
  for (const int64_t named : {int64_t{0}, int64_t{1000}}) {
    handler_.reset();  // a fresh primary and standby connection for each
    Init(proto::ASYNC, 2);
    RegisterAll(2);
    ASSERT_NO_FATAL_FAILURE(ConnectReplicator());
    std::vector<Reply> replies = Push(1, 0, 0, 0.1f);
    replicator_->Hold(H(), &replies);
    ASSERT_TRUE(replies.empty());
    std::vector<Reply> released;
    for (int i = 0; i < 400 && released.empty(); ++i) {
      replicator_->Pump(H(), &released);
      for (RoutedMessage in = ReceiveRouted(router_); in.message.ok();
           in = ReceiveRouted(router_)) {
        proto::Header no = ErrorReply(in.message->header, absl::FailedPreconditionError("no"));
        no.mutable_replica()->set_seq(in.message->header.replica().seq());
        no.mutable_replica()->set_term(named);
        ASSERT_TRUE(SendRouted(router_, in.identity, no, {}).ok());
      }
      clock_.AdvanceSeconds(0.1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_EQ(released.size(), 1u) << named;
    EXPECT_FALSE(IsError(released[0])) << named;
    EXPECT_EQ(H().Stats().unreplicated_releases(), 1) << named;
  }
}

// A standby slower than the resend time: the primary sends the state
// again, and the answer to the first copy still counts (it would wait
// for an answer to the newest copy forever, were each slower than that).
TEST_F(StandbyTest, AnAnswerToAnEarlierCopyOfTheStateCounts) {
  num_shards_ = 2;
  Init(proto::ASYNC, 2);
  RegisterAll(2);
  ASSERT_NO_FATAL_FAILURE(ConnectReplicator());
  std::vector<Reply> replies = Push(1, 0, 0, 0.1f);
  replicator_->Hold(H(), &replies);
  ASSERT_TRUE(replies.empty());
  // Two copies go out, a resend time apart; neither is answered yet.
  std::vector<RoutedMessage> copies;
  std::vector<Reply> released;
  for (int i = 0; i < 500 && copies.size() < 2; ++i) {
    replicator_->Pump(H(), &released);
    RoutedMessage in = ReceiveRouted(router_);
    if (in.message.ok()) {
      copies.push_back(std::move(in));
      clock_.AdvanceSeconds(1.5);  // past the resend time
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_LT(copies[0].message->header.replica().seq(), copies[1].message->header.replica().seq());
  EXPECT_TRUE(released.empty());
  // The standby answers the first copy only.
  std::vector<Reply> ack;
  Standby().Handle({"primary", ""}, *copies[0].message, &ack);
  ASSERT_EQ(ack.size(), 1u);
  ASSERT_TRUE(SendRouted(router_, copies[0].identity, ack[0].header, {}).ok());
  for (int i = 0; i < 500 && released.empty(); ++i) {
    replicator_->Pump(H(), &released);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(released.size(), 1u);
  EXPECT_EQ(H().Stats().replications(), 1);
  EXPECT_EQ(H().Stats().unreplicated_releases(), 0);
}

// A standby message limit that leaves no room for even a part of a state
// beside its header: nothing is sent (the standby would drop the
// connection on it, again and again), the primary gives up at once and
// its replies go out.
TEST_F(StandbyTest, AStateOverTheMessageLimitIsNotSentAndTheRepliesGoOut) {
  num_shards_ = 2;
  AddUsersTable();
  const std::vector<Reply> init = Init(proto::ASYNC, 2);
  ASSERT_EQ(init.size(), 1u);
  ASSERT_EQ(init[0].header.error().code(), 0) << init[0].header.error().message();
  RegisterAll(2);
  ASSERT_NO_FATAL_FAILURE(
      ConnectReplicator(/*max_message_bytes=*/16));  // less than the dense state alone
  std::vector<Reply> replies = Push(1, 0, 0, 0.1f);
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_EQ(replies[0].header.error().code(), 0) << replies[0].header.error().message();
  replicator_->Hold(H(), &replies);
  EXPECT_TRUE(replies.empty());  // held: the standby lacks the new state
  std::vector<Reply> released;
  for (int i = 0; i < 3; ++i) {
    replicator_->Pump(H(), &released);
    clock_.AdvanceSeconds(2);  // past the resend time: looked at again, still too large
  }
  EXPECT_EQ(released.size(), 1u);
  EXPECT_EQ(H().Stats().unreplicated_releases(), 1);
  EXPECT_EQ(H().Stats().replications(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(ReceiveRouted(router_).message.ok()) << "a REPLICATE over the limit went out";
}

// A state (with embedding tables) over the standby's message limit goes
// in parts, each a message within the limit, and is kept whole; the chief
// fetches it back in parts and restores a fresh ps from them part by part:
// it holds what the primary holds, tables included.
TEST_F(StandbyTest, AStateOverTheMessageLimitGoesInPartsAndComesBackInParts) {
  ASSERT_NO_FATAL_FAILURE(InitWithRows());
  constexpr int64_t kLimit = 96 * 1024;
  ASSERT_NO_FATAL_FAILURE(ConnectReplicator(kLimit));
  std::vector<Reply> replies = Push(1, 0, 0, 0.1f);
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_FALSE(IsError(replies[0])) << replies[0].header.error().message();
  ASSERT_EQ(H().Stats().tables(0).rows(), 400);
  replicator_->Hold(H(), &replies);
  EXPECT_TRUE(replies.empty());
  std::vector<Reply> released;
  int parts = 0;
  for (int i = 0; i < 2000 && released.empty(); ++i) {
    replicator_->Pump(H(), &released);
    RoutedMessage in = ReceiveRouted(router_);
    if (in.message.ok()) {
      EXPECT_LE(in.wire_bytes, static_cast<size_t>(kLimit));
      parts += in.message->header.has_state_part() ? 1 : 0;
      std::vector<Reply> ack;
      Standby().Handle({"primary", ""}, *in.message, &ack);
      ASSERT_EQ(ack.size(), 1u);
      ASSERT_FALSE(IsError(ack[0])) << ack[0].header.error().message();
      ASSERT_TRUE(SendRouted(router_, in.identity, ack[0].header, {}).ok());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(released.size(), 1u);
  EXPECT_GE(parts, 3);
  EXPECT_EQ(Standby().Stats().replica_version(), 1);
  EXPECT_EQ(H().Stats().replications(), 1);
  EXPECT_EQ(H().Stats().unreplicated_releases(), 0);

  // Fetched whole and in parts of 16 KiB: the same bytes.
  proto::Header fetch = Base(proto::FETCH_REPLICA, 0);
  fetch.set_shard_index(0);
  std::vector<Reply> whole = ToStandby(MakeMessage(fetch, {}));
  ASSERT_EQ(whole.size(), 1u);
  ASSERT_FALSE(IsError(whole[0])) << whole[0].header.error().message();
  EXPECT_FALSE(whole[0].header.has_state_part());
  const std::vector<float>& state = *whole[0].payload;
  ASSERT_GT(state.size() * sizeof(float), 3u * 16 * 1024);

  RequestHandlerOptions o{kJob, 0, 2, 2, {}, &clock_, "", 0};
  RequestHandler restarted(o);
  proto::Header restore = Base(proto::RESTORE, 0);
  *restore.mutable_job() = whole[0].header.job();
  *restore.mutable_replica() = whole[0].header.replica();
  *restore.mutable_stats() = whole[0].header.stats();  // the primary's, its tables' included
  restore.mutable_restore()->set_from_payload(true);
  std::vector<float> fetched;
  uint64_t stream = 0;
  int restore_parts = 0;
  for (uint64_t offset = 0; offset < state.size() * sizeof(float);) {
    fetch.mutable_state_part()->set_offset(offset);
    fetch.mutable_state_part()->set_part_bytes(16 * 1024);
    std::vector<Reply> got = ToStandby(MakeMessage(fetch, {}));
    ASSERT_EQ(got.size(), 1u);
    ASSERT_FALSE(IsError(got[0])) << got[0].header.error().message();
    const proto::StatePart& p = got[0].header.state_part();
    ASSERT_EQ(p.offset(), offset);
    ASSERT_EQ(p.total(), state.size() * sizeof(float));
    if (offset == 0) stream = p.stream();
    ASSERT_EQ(p.stream(), stream);
    ASSERT_LE(got[0].payload->size() * sizeof(float), 16u * 1024);
    fetched.insert(fetched.end(), got[0].payload->begin(), got[0].payload->end());
    // Relayed to the restarted ps as a RESTORE part.
    proto::Header r = restore;
    r.set_request_id(100 + restore_parts++);
    *r.mutable_state_part() = p;
    std::vector<Reply> out;
    restarted.Handle({Peer(0), ""}, MakeMessage(r, *got[0].payload), &out);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
    offset += got[0].payload->size() * sizeof(float);
    EXPECT_EQ(restarted.initialized(), offset == state.size() * sizeof(float));
  }
  // As bytes: the tables' encoding read as floats may hold NaNs.
  auto bytes = [](const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  EXPECT_EQ(bytes(fetched), bytes(state));
  ASSERT_TRUE(restarted.initialized());
  proto::ReplicaState mine, theirs;
  EXPECT_EQ(bytes(restarted.ReplicaPayloadNow(-1, &theirs)),
            bytes(H().ReplicaPayloadNow(-1, &mine)));
  // Each table counted once: by the tables restored, not again by the
  // copy of their counters the primary's sent along.
  ASSERT_EQ(whole[0].header.stats().tables_size(), 1);
  ASSERT_EQ(restarted.Stats().tables_size(), 1);
  EXPECT_EQ(restarted.Stats().tables(0).rows(), 400);

  // A part that does not continue the state is refused, and nothing is
  // restored from what came before it.
  RequestHandler other(o);
  proto::Header r = restore;
  r.mutable_state_part()->set_offset(0);
  r.mutable_state_part()->set_total(state.size() * sizeof(float));
  r.mutable_state_part()->set_stream(5);
  r.set_request_id(1000);
  std::vector<Reply> out;
  other.Handle({Peer(0), ""}, MakeMessage(r, StateSlice(state, 0, 4096)), &out);
  ASSERT_FALSE(IsError(out[0])) << out[0].header.error().message();
  r.mutable_state_part()->set_offset(8192);
  r.set_request_id(1001);
  out.clear();
  other.Handle({Peer(0), ""}, MakeMessage(r, StateSlice(state, 8192, 4096)), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(other.initialized());
  // A fetch from the middle after the replica changed (a new state kept)
  // is refused: the parts would be of two states.
  fetch.mutable_state_part()->set_offset(0);
  ASSERT_FALSE(IsError(ToStandby(MakeMessage(fetch, {}))[0]));
  Standby().KeepReplica(Standby().replica());
  fetch.mutable_state_part()->set_offset(16 * 1024);
  const std::vector<Reply> changed = ToStandby(MakeMessage(fetch, {}));
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].header.error().code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
}

// The last part of a state in parts resent before its answer came (the
// standby was checking the whole state): the first copy's answer is the
// state's, and the copy's refusal (the state is done with) changes
// nothing: the next state goes as a delta, not whole again. A whole
// REPLICATE from another ps in the middle of the parts drops nothing.
TEST_F(StandbyTest, AResentLastPartLeavesTheNextStateADelta) {
  ASSERT_NO_FATAL_FAILURE(InitWithRows());
  ASSERT_NO_FATAL_FAILURE(ConnectReplicator(96 * 1024));
  std::vector<Reply> replies = Push(1, 0, 0, 0.1f);
  replicator_->Hold(H(), &replies);
  ASSERT_TRUE(replies.empty());
  std::vector<Reply> released;
  std::vector<RoutedMessage> last;  // the last part's copies, answered late
  bool stranger_sent = false;
  for (int i = 0; i < 2000 && released.empty(); ++i) {
    replicator_->Pump(H(), &released);
    RoutedMessage in = ReceiveRouted(router_);
    if (!in.message.ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    const proto::StatePart& p = in.message->header.state_part();
    ASSERT_TRUE(in.message->header.has_state_part());
    if (p.offset() > 0 && !stranger_sent) {
      stranger_sent = true;
      std::vector<Reply> refused = ToStandby(Replicate(1, 1, 5, 0.25f));
      ASSERT_EQ(refused.size(), 1u);
      EXPECT_TRUE(IsError(refused[0]));
    }
    if (p.offset() + in.message->payload_bytes() == p.total()) {
      last.push_back(std::move(in));
      if (last.size() == 1) {
        clock_.AdvanceSeconds(3);  // past its resend time: a copy goes
        continue;
      }
      for (RoutedMessage& m : last) {  // both answered now, in order
        std::vector<Reply> ack;
        Standby().Handle({"primary", ""}, *m.message, &ack);
        ASSERT_EQ(ack.size(), 1u);
        ASSERT_TRUE(SendRouted(router_, m.identity, ack[0].header, {}).ok());
      }
      continue;
    }
    std::vector<Reply> ack;
    Standby().Handle({"primary", ""}, *in.message, &ack);
    ASSERT_EQ(ack.size(), 1u);
    ASSERT_FALSE(IsError(ack[0])) << ack[0].header.error().message();
    ASSERT_TRUE(SendRouted(router_, in.identity, ack[0].header, {}).ok());
  }
  ASSERT_EQ(last.size(), 2u);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(Standby().Stats().replica_version(), 1);
  // Let the copy's refusal come in, then a new state: a delta.
  for (int i = 0; i < 20; ++i) {
    replicator_->Pump(H(), &released);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_NO_FATAL_FAILURE(PushRows(1, 10));  // 10 rows change: a small delta
  replies = Push(1, 1, 1, 0.1f);
  replicator_->Hold(H(), &replies);
  ASSERT_TRUE(replies.empty());
  RoutedMessage next;
  for (int i = 0; i < 2000 && !next.message.ok(); ++i) {
    replicator_->Pump(H(), &released);
    next = ReceiveRouted(router_);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(next.message.ok());
  EXPECT_FALSE(next.message->header.has_state_part());
  EXPECT_TRUE(next.message->header.replica().tables_delta());
  std::vector<Reply> ack;
  Standby().Handle({"primary", ""}, *next.message, &ack);
  ASSERT_EQ(ack.size(), 1u);
  EXPECT_FALSE(IsError(ack[0])) << ack[0].header.error().message();
  EXPECT_EQ(Standby().Stats().replica_version(), 2);
}

// A standby that dies closes its connection: the primary stops holding
// replies back at once, not after the give-up time (the fake clock never
// moves here).
TEST_F(StandbyTest, AStandbyWhoseConnectionClosesIsGivenUpAtOnce) {
  num_shards_ = 2;
  Init(proto::ASYNC, 2);
  RegisterAll(2);
  zmq::context_t context(1);
  auto router = BindRouter(context, "tcp://127.0.0.1:0", SocketOptions());
  ASSERT_TRUE(router.ok()) << router.status();
  ReplicatorOptions ro;
  ro.standby_name = "ps:1";
  ro.endpoint = router->get(zmq::sockopt::last_endpoint);
  auto replicator = Replicator::Create(context, ro, &clock_);
  ASSERT_TRUE(replicator.ok()) << replicator.status();
  // One state acknowledged: the connection is up.
  std::vector<Reply> replies = Push(1, 0, 0, 0.1f);
  (*replicator)->Hold(H(), &replies);
  std::vector<Reply> released;
  for (int i = 0; i < 500 && released.empty(); ++i) {
    (*replicator)->Pump(H(), &released);
    RoutedMessage in = ReceiveRouted(*router);
    if (in.message.ok()) {
      std::vector<Reply> ack;
      Standby().Handle({"primary", ""}, *in.message, &ack);
      ASSERT_TRUE(SendRouted(*router, in.identity, ack[0].header, {}).ok());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(released.size(), 1u);
  // The standby dies; the next state is not held for long.
  router->close();
  replies = Push(1, 1, 1, 0.1f);
  (*replicator)->Hold(H(), &replies);
  EXPECT_TRUE(replies.empty());
  released.clear();
  for (int i = 0; i < 1000 && released.empty(); ++i) {
    (*replicator)->Pump(H(), &released);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(released.size(), 1u);
  EXPECT_EQ(H().Stats().unreplicated_releases(), 1);
}

// A REPLICATE of an older term than the replica held comes from a primary
// whose shard moved while it was away: refused, counted; a newer one is
// kept.
TEST_F(StandbyTest, RefusesAStateOfAnOlderTermThanTheOneItHolds) {
  Message newer = Replicate(0, 0, 9, 0.5f);
  newer.header.mutable_replica()->set_term(2);
  ASSERT_FALSE(IsError(ToStandby(newer)[0]));
  std::vector<Reply> out = ToStandby(Replicate(0, 0, 12, 0.25f));  // term 0
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.error().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(out[0].header.error().message(), HasSubstr("older than the replica held"));
  // The answer to that state (its seq). It names no term: a primary is
  // deposed only by the ps that serves its shard (a primary restored from
  // a checkpoint keeps its term, older than such a replica's).
  EXPECT_EQ(out[0].header.replica().seq(), 7u);
  EXPECT_EQ(out[0].header.replica().term(), 0);
  EXPECT_EQ(Standby().Stats().replica_version(), 9);
  EXPECT_EQ(Standby().Stats().replica_term(), 2);
  EXPECT_EQ(Standby().Stats().stale_replications_refused(), 1);
  Message next = Replicate(0, 0, 13, 0.125f);
  next.header.mutable_replica()->set_term(3);
  EXPECT_FALSE(IsError(ToStandby(next)[0]));
  EXPECT_EQ(Standby().Stats().replica_version(), 13);
}

}  // namespace
}  // namespace pstrain

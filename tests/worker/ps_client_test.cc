// PsClient against real ps servers in this process, over loopback TCP.

#include "worker/ps_client.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "common/cancellation.h"
#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "common/rejoin.h"
#include "common/shard_plan.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_server/ps_server.h"
#include "tests/test_util/live_shards.h"
#include "transport/transport.h"

namespace pstrain {
namespace {

TEST(PsClient, RefusesAnIoThreadCountOutsideOneToSixteen) {
  auto spec = WithFreePorts(ClusterSpec::Local(1, 1, 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plan = ShardPlan::Create("t", {{"w", 8}}, 1, ShardStrategy::kBalanced);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (int threads : {0, -1, 17}) {
    PsClientOptions options;
    options.io_threads = threads;
    auto client = PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, options);
    ASSERT_FALSE(client.ok()) << threads;
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(client.status().message()), ::testing::HasSubstr("--io_threads"));
  }
}

// With two I/O threads and two CURVE ps, ZeroMQ serves each connection on
// a thread of its own; every shard's parameters still come back whole.
TEST(PsClient, TwoIoThreadsPushAndPullEveryShardWithCurve) {
  auto spec = WithFreePorts(ClusterSpec::Local(2, 1, 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  TransportSecurity security;
  security.secret = JobSecret::Generate();
  const int64_t n = 100'003;  // shards of 50,002 and 50,001 floats
  auto plan = ShardPlan::Create("t", {{"w", n}}, 2, ShardStrategy::kBalanced);
  ASSERT_TRUE(plan.ok()) << plan.status();
  LiveShards shards(*spec, security);
  PsClientOptions options;
  options.security = security;
  options.io_threads = 2;
  auto client = PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, options);
  ASSERT_TRUE(client.ok()) << client.status();
  proto::JobConfig job;
  job.set_mode(proto::SYNC);
  job.set_num_workers(1);
  job.set_learning_rate(0.5);
  std::vector<float> params(n);
  for (int64_t i = 0; i < n; ++i) params[i] = static_cast<float>(i % 1000);
  ASSERT_TRUE((*client)->WaitForServers().ok());
  ASSERT_TRUE((*client)->Init(job, params).ok());
  std::vector<float> grads(n);
  for (int64_t i = 0; i < n; ++i) grads[i] = static_cast<float>(i % 7);
  std::vector<EncodedShard> pushed;
  for (int k = 0; k < 2; ++k) {
    const ShardRange r = plan->range(k);
    pushed.push_back({proto::F32,
                      0,
                      {reinterpret_cast<const char*>(grads.data() + r.begin),
                       static_cast<size_t>(r.size()) * sizeof(float)}});
  }
  std::vector<float> back(n, -1.0f);
  std::vector<ShardReply> replies;
  const std::vector<int64_t> versions = {0, 0};
  ASSERT_TRUE((*client)->PushPull(0, versions, 4, pushed, absl::MakeSpan(back), &replies).ok());
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].version, 1);
  EXPECT_EQ(replies[1].version, 1);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(back[i], params[i] - 0.5f * grads[i]) << i;  // SGD, lr 0.5, exact in f32
  }
  EXPECT_TRUE((*client)->Shutdown().ok());
}

// One shard of 1,000,003 floats (4 MB): with CURVE (over TCP) the push and the reply
// go in pieces, and the parameters come back exact, step after step;
// without it, whole.
TEST(PsClient, LargePayloadsGoInPiecesWithCurveOnly) {
  for (const bool curve : {true, false}) {
    SCOPED_TRACE(curve ? "curve" : "insecure");
    auto spec = WithFreePorts(ClusterSpec::Local(1, 1, 1));
    ASSERT_TRUE(spec.ok()) << spec.status();
    TransportSecurity security;
    if (curve) security.secret = JobSecret::Generate();
    const int64_t n = 1'000'003;
    auto plan = ShardPlan::Create("t", {{"w", n}}, 1, ShardStrategy::kBalanced);
    ASSERT_TRUE(plan.ok()) << plan.status();
    LiveShards shards(*spec, security);
    PsClientOptions options;
    options.security = security;
    options.colocated_ipc = false;  // CURVE over TCP, as from another host
    auto client = PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, options);
    ASSERT_TRUE(client.ok()) << client.status();
    proto::JobConfig job;
    job.set_mode(proto::SYNC);
    job.set_num_workers(1);
    job.set_learning_rate(0.25);
    std::vector<float> params(n);
    for (int64_t i = 0; i < n; ++i) params[i] = static_cast<float>(i % 4096);
    ASSERT_TRUE((*client)->WaitForServers().ok());
    ASSERT_TRUE((*client)->Init(job, params).ok());
    std::vector<float> grads(n);
    for (int64_t i = 0; i < n; ++i) grads[i] = static_cast<float>(i % 5);
    const std::vector<EncodedShard> pushed = {
        {proto::F32,
         0,
         {reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)}}};
    std::vector<float> back(n, -1.0f);
    std::vector<ShardReply> replies;
    std::vector<int64_t> versions = {0};
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(
          (*client)->PushPull(step, versions, 4, pushed, absl::MakeSpan(back), &replies).ok());
      versions[0] = replies[0].version;
      for (int64_t i = 0; i < n; ++i) params[i] -= 0.25f * grads[i];  // exact in f32
      ASSERT_EQ(back, params) << "step " << step;
    }
    EXPECT_EQ(versions[0], 3);
    if (curve) {
      // 4,000,012 bytes: 15 pieces of 250,004 and one of 249,952, each way.
      EXPECT_EQ((*client)->pieces_sent(), 3 * 16);
      EXPECT_EQ((*client)->pieces_received(), 3 * 16);
    } else {
      EXPECT_EQ((*client)->pieces_sent(), 0);
      EXPECT_EQ((*client)->pieces_received(), 0);
    }
    EXPECT_TRUE((*client)->Shutdown().ok());
  }
}

// The parameters a ps gives back after `steps` PUSH_PULLs of Adam over one
// shard of n floats, with `update_threads` (--update_threads).
std::vector<float> ParamsAfterSteps(int64_t n, int steps, int update_threads, bool curve) {
  auto spec = WithFreePorts(ClusterSpec::Local(1, 1, 1));
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return {};
  TransportSecurity security;
  if (curve) security.secret = JobSecret::Generate();
  auto plan = ShardPlan::Create("t", {{"w", n}}, 1, ShardStrategy::kBalanced);
  PsServerOptions ps_options;
  ps_options.update_threads = update_threads;
  LiveShards shards(*spec, security, ps_options);
  PsClientOptions options;
  options.security = security;
  auto client = PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, options);
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  proto::JobConfig job;
  job.set_mode(proto::SYNC);
  job.set_num_workers(1);
  job.set_learning_rate(0.01);
  job.set_optimizer(proto::ADAM);
  job.set_beta1(0.9);
  job.set_beta2(0.999);
  job.set_eps(1e-8);
  std::vector<float> params(n);
  for (int64_t i = 0; i < n; ++i) params[i] = static_cast<float>(i % 1013) * 1e-3f;
  EXPECT_TRUE((*client)->WaitForServers().ok());
  EXPECT_TRUE((*client)->Init(job, params).ok());
  std::vector<float> grads(n);
  std::vector<int64_t> versions = {0};
  std::vector<ShardReply> replies;
  for (int step = 0; step < steps; ++step) {
    for (int64_t i = 0; i < n; ++i) {
      grads[i] = static_cast<float>((i * (step + 3)) % 101) * 1e-2f - 0.5f;
    }
    const std::vector<EncodedShard> pushed = {
        {proto::F32,
         0,
         {reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)}}};
    EXPECT_TRUE(
        (*client)->PushPull(step, versions, 8, pushed, absl::MakeSpan(params), &replies).ok());
    versions[0] = replies[0].version;
  }
  EXPECT_EQ(versions[0], steps);
  EXPECT_TRUE((*client)->Shutdown().ok());
  return params;
}

// A shard's update shared out to helper threads (--update_threads, in
// chunks of 64Ki floats) gives the same parameters, bit for bit, as on the
// event loop alone: Adam over 669,706 floats (cnn_large), plaintext and
// CURVE (whose pushes and replies go in pieces).
TEST(PsClient, UpdateThreadsGiveTheSameParametersBitForBit) {
  for (const bool curve : {false, true}) {
    SCOPED_TRACE(curve ? "curve" : "insecure");
    const std::vector<float> alone = ParamsAfterSteps(669'706, 3, 1, curve);
    const std::vector<float> shared = ParamsAfterSteps(669'706, 3, 3, curve);
    ASSERT_EQ(alone.size(), 669'706u);
    ASSERT_TRUE(alone == shared);
  }
}

// A sync shard keeps its previous version's parameters: PullVersion gets
// them (in pieces over CURVE, from the buffer the next update writes into),
// the current version's as they are, and from a shard two versions past
// the one asked for, the current ones, saying so in the reply's version.
TEST(PsClient, PullVersionGetsThePreviousVersionFromAShardPastIt) {
  auto spec = WithFreePorts(ClusterSpec::Local(1, 1, 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  TransportSecurity security;
  security.secret = JobSecret::Generate();
  const int64_t n = 1'000'003;
  auto plan = ShardPlan::Create("t", {{"w", n}}, 1, ShardStrategy::kBalanced);
  ASSERT_TRUE(plan.ok()) << plan.status();
  LiveShards shards(*spec, security);
  PsClientOptions options;
  options.security = security;
  auto client = PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, options);
  ASSERT_TRUE(client.ok()) << client.status();
  // Whatever fails below, the ps's thread (LiveShards) is not left waiting.
  const absl::Cleanup shut_down = [&] { EXPECT_TRUE((*client)->Shutdown().ok()); };
  proto::JobConfig job;
  job.set_mode(proto::SYNC);
  job.set_num_workers(1);
  job.set_learning_rate(0.25);
  std::vector<std::vector<float>> at(3, std::vector<float>(n));  // [version] parameters
  for (int64_t i = 0; i < n; ++i) at[0][i] = static_cast<float>(i % 4096);
  ASSERT_TRUE((*client)->WaitForServers().ok());
  ASSERT_TRUE((*client)->Init(job, at[0]).ok());
  std::vector<float> grads(n);
  for (int64_t i = 0; i < n; ++i) grads[i] = static_cast<float>(i % 5);
  const std::vector<EncodedShard> pushed = {
      {proto::F32, 0, {reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)}}};
  std::vector<float> back(n, -1.0f);
  std::vector<ShardReply> replies;
  for (int v = 0; v < 2; ++v) {
    const std::vector<int64_t> versions = {v};
    ASSERT_TRUE((*client)->PushPull(v, versions, 4, pushed, absl::MakeSpan(back), &replies).ok());
    for (int64_t i = 0; i < n; ++i) at[v + 1][i] = at[v][i] - 0.25f * grads[i];  // exact in f32
    ASSERT_EQ(back, at[v + 1]);
    // At version v + 1: version v (the previous) and v + 1 (the current).
    for (int asked : {v, v + 1}) {
      std::fill(back.begin(), back.end(), -1.0f);
      ASSERT_TRUE((*client)->PullVersion(v + 1, asked, absl::MakeSpan(back), &replies).ok());
      EXPECT_EQ(replies[0].version, asked);
      ASSERT_EQ(back, at[asked]) << "version " << asked << " asked at version " << v + 1;
    }
  }
  // At version 2, version 0 is gone: the current parameters, version 2.
  ASSERT_TRUE((*client)->PullVersion(2, 0, absl::MakeSpan(back), &replies).ok());
  EXPECT_EQ(replies[0].version, 2);
  EXPECT_EQ(back, at[2]);
  // 4,000,012 bytes a reply: 16 pieces each, pushes and pulls alike.
  EXPECT_EQ((*client)->pieces_received(), 7 * 16);
}

// A ps that answers the first PUSH_PULL with the pieces `reply` makes of
// the request's header (HEARTBEATs go unanswered: the client's patience,
// 60 s by default, outlasts a test).
class FakePs {
 public:
  using Pieces = std::vector<std::pair<proto::Header, std::vector<float>>>;
  // `after` (may be empty): called after each message sent, with how many
  // went out so far (a test holds the rest back there).
  FakePs(const ClusterSpec& spec, std::function<Pieces(const proto::Header&)> reply,
         std::function<void(int sent)> after = {})
      : router_(context_, zmq::socket_type::router) {
    router_.set(zmq::sockopt::linger, 0);
    const std::string& address = spec.Address({TaskType::kPs, 0});
    router_.bind("tcp://127.0.0.1:" + address.substr(address.rfind(':') + 1));
    thread_ = std::thread([this, reply, after] {
      while (!stop_.load()) {
        zmq::socket_t* sockets[] = {&router_};
        auto readable = PollReadable(sockets, 50);
        if (!readable.ok() || !(*readable)[0]) continue;
        RoutedMessage m = ReceiveRouted(router_);
        if (!m.message.ok() || m.message->header.type() != proto::PUSH_PULL) continue;
        int sent = 0;
        for (auto& [header, floats] : reply(m.message->header)) {
          (void)SendRoutedFrame(router_, m.identity, header,
                                zmq::message_t(floats.data(), floats.size() * sizeof(float)));
          if (after) after(++sent);
        }
      }
    });
  }
  ~FakePs() {
    stop_ = true;
    thread_.join();
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t router_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A PUSH_PULL reply in the pieces `pieces` lists, (part, parts,
// piece_bytes, floats) of each message, whose floats count up from 100.
FakePs::Pieces ReplyPieces(const proto::Header& request,
                           const std::vector<std::tuple<int, int, int, int>>& pieces) {
  FakePs::Pieces out;
  float next = 100.0f;
  for (const auto& [part, parts, piece_bytes, floats] : pieces) {
    proto::Header h;
    h.set_type(proto::PUSH_PULL);
    h.set_is_reply(true);
    h.set_request_id(request.request_id());
    h.set_version(1);
    h.set_part(static_cast<uint32_t>(part));
    h.set_parts(static_cast<uint32_t>(parts));
    h.set_piece_bytes(static_cast<uint64_t>(piece_bytes));
    std::vector<float> values(static_cast<size_t>(floats));
    for (float& v : values) v = next++;
    out.emplace_back(h, values);
  }
  return out;
}

// One 16-float gradient of ones, as shard 0's push.
const std::vector<EncodedShard>& OnesPush() {
  static const std::vector<float> grads(16, 1.0f);
  static const std::vector<EncodedShard> pushed = {
      {proto::F32, 0, {reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)}}};
  return pushed;
}

// What a client makes of a ps's pieces (ReplyPieces), for a shard of 16
// floats.
absl::Status PushPullAgainst(const std::vector<std::tuple<int, int, int, int>>& pieces,
                             std::vector<float>* params) {
  auto spec = WithFreePorts(ClusterSpec::Local(1, 1, 1));
  if (!spec.ok()) return spec.status();
  auto plan = ShardPlan::Create("t", {{"w", 16}}, 1, ShardStrategy::kBalanced);
  if (!plan.ok()) return plan.status();
  FakePs ps(*spec, [&](const proto::Header& request) { return ReplyPieces(request, pieces); });
  PsClientOptions options;
  options.rpc_timeout_s = 3;
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                   PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, options));
  const std::vector<EncodedShard>& pushed = OnesPush();
  params->assign(16, -1.0f);
  std::vector<ShardReply> replies;
  const std::vector<int64_t> versions = {0};
  return client->PushPull(0, versions, 1, pushed, absl::MakeSpan(*params), &replies);
}

TEST(PsClient, TakesAReplyInPiecesInPlace) {
  std::vector<float> params;
  const absl::Status s = PushPullAgainst({{0, 3, 24, 6}, {1, 3, 24, 6}, {2, 3, 24, 4}}, &params);
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(params[i], 100.0f + static_cast<float>(i)) << i;
}

// Forward ahead's wait: WaitParams(end) returns as soon as the pieces in
// cover [0, end), while the ps still holds the rest back, and not before;
// FinishPushPull then takes the rest. A ps that never sends the rest ends
// the wait at the step's deadline.
TEST(PsClient, WaitParamsReturnsOnceThePiecesInCoverTheRange) {
  for (const bool rest_comes : {true, false}) {
    SCOPED_TRACE(rest_comes ? "the rest comes" : "the rest never comes");
    auto spec = WithFreePorts(ClusterSpec::Local(1, 1, 1));
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto plan = ShardPlan::Create("t", {{"w", 16}}, 1, ShardStrategy::kBalanced);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    const auto release_the_rest = [&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        release = true;
      }
      cv.notify_all();
    };
    FakePs ps(
        *spec,
        [&](const proto::Header& request) {
          return ReplyPieces(request, {{0, 3, 24, 6}, {1, 3, 24, 6}, {2, 3, 24, 4}});
        },
        [&](int sent) {
          if (sent != 1) return;
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return release; });
        });
    // Whatever fails below, the ps's thread is not left waiting.
    const absl::Cleanup unblock = release_the_rest;
    PsClientOptions options;
    options.rpc_timeout_s = 2;
    auto client = PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, options);
    ASSERT_TRUE(client.ok()) << client.status();
    std::vector<float> params(16, -1.0f);
    const std::vector<int64_t> versions = {0};
    (*client)->StartPushPull(0, versions, 1, absl::MakeSpan(params));
    (*client)->SendShard(0, OnesPush()[0]);
    ASSERT_TRUE((*client)->WaitParams(6).ok());
    for (int i = 0; i < 6; ++i) EXPECT_EQ(params[i], 100.0f + static_cast<float>(i)) << i;
    for (int i = 6; i < 16; ++i) EXPECT_EQ(params[i], -1.0f) << i << ": not sent yet";
    std::vector<ShardReply> replies;
    if (rest_comes) {
      release_the_rest();
      ASSERT_TRUE((*client)->WaitParams(7).ok());
      EXPECT_EQ(params[6], 106.0f);
      ASSERT_TRUE((*client)->FinishPushPull(OnesPush(), &replies).ok());
      for (int i = 0; i < 16; ++i) EXPECT_EQ(params[i], 100.0f + static_cast<float>(i)) << i;
      EXPECT_EQ(replies[0].version, 1);
    } else {
      const absl::Status s = (*client)->WaitParams(7);
      EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
      release_the_rest();  // too late: the client has given up
    }
  }
}

// A wait for replies ends when the client's Cancellation fires, with no
// signal: this ps takes the PUSH_PULL, fires the flag and never answers.
// Without the Cancellation the client would wait out its peer timeout,
// longer than the test may run.
TEST(PsClient, AWaitForRepliesReturnsCancelledWhenItsCancellationFires) {
  auto spec = WithFreePorts(ClusterSpec::Local(1, 1, 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plan = ShardPlan::Create("t", {{"w", 16}}, 1, ShardStrategy::kBalanced);
  ASSERT_TRUE(plan.ok()) << plan.status();
  CancellationFlag stop;
  FakePs ps(*spec, [&](const proto::Header&) {
    stop.Cancel("the test's cancellation");
    return FakePs::Pieces();
  });
  PsClientOptions options;
  options.peer_timeout_s = 3600;
  options.cancel = &stop;
  auto client = PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, options);
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<float> params(16, -1.0f);
  std::vector<ShardReply> replies;
  const std::vector<int64_t> versions = {0};
  const absl::Status s =
      (*client)->PushPull(0, versions, 1, OnesPush(), absl::MakeSpan(params), &replies);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("interrupted by the test's cancellation"));
}

// Waiting for a ps that is not there ends too, whenever the flag fires
// (here from another thread), long before the connect timeout.
TEST(PsClient, WaitingForServersReturnsCancelledWhenItsCancellationFires) {
  auto spec = WithFreePorts(ClusterSpec::Local(1, 1, 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plan = ShardPlan::Create("t", {{"w", 16}}, 1, ShardStrategy::kBalanced);
  ASSERT_TRUE(plan.ok()) << plan.status();
  CancellationFlag stop;
  PsClientOptions options;
  options.connect_timeout_s = 3600;
  options.cancel = &stop;
  auto client = PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, options);
  ASSERT_TRUE(client.ok()) << client.status();
  std::thread canceller([&stop] { stop.Cancel("the test's cancellation"); });
  const absl::Status s = (*client)->WaitForServers();
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("while connecting"));
}

// A ps that answers HEARTBEATs only, listing the shards it is told to
// (proto::ShardPlacement: shard and term); it never answers a request.
class ListingPs {
 public:
  ListingPs(const ClusterSpec& spec, int index, std::vector<std::pair<int, int64_t>> hosted)
      : router_(context_, zmq::socket_type::router), hosted_(std::move(hosted)) {
    router_.set(zmq::sockopt::linger, 0);
    const std::string& address = spec.Address({TaskType::kPs, index});
    router_.bind("tcp://127.0.0.1:" + address.substr(address.rfind(':') + 1));
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        zmq::socket_t* sockets[] = {&router_};
        auto readable = PollReadable(sockets, 20);
        if (!readable.ok() || !(*readable)[0]) continue;
        RoutedMessage m = ReceiveRouted(router_);
        if (!m.message.ok() || m.message->header.type() != proto::HEARTBEAT) continue;
        proto::Header h = m.message->header;
        h.set_is_reply(true);
        {
          std::lock_guard<std::mutex> lock(mu_);
          for (const auto& [shard, term] : hosted_) {
            proto::ShardPlacement* p = h.add_hosted();
            p->set_shard(shard);
            p->set_term(term);
          }
        }
        (void)SendRoutedFrame(router_, m.identity, h, zmq::message_t());
      }
    });
  }
  ~ListingPs() {
    stop_ = true;
    thread_.join();
  }
  void List(std::vector<std::pair<int, int64_t>> hosted) {
    std::lock_guard<std::mutex> lock(mu_);
    hosted_ = std::move(hosted);
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t router_;
  std::mutex mu_;
  std::vector<std::pair<int, int64_t>> hosted_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Two shards of 16 floats on ps:0 and ps:1; `pin` (>= 0): the chief moved
// shard 1 there itself (SetRoute) once routed. Then ps:0 lists shard 1 at
// term 1 (it adopted it) while ps:1 still lists it at term 0, and
// neither answers the step: what the wait for it ends with.
absl::Status StepAfterAnAdoption(int pin) {
  auto spec = WithFreePorts(ClusterSpec::Local(2, 2, 1));
  if (!spec.ok()) return spec.status();
  auto plan = ShardPlan::Create("t", {{"w", 32}}, 2, ShardStrategy::kBalanced);
  if (!plan.ok()) return plan.status();
  ListingPs ps0(*spec, 0, {{0, 0}}), ps1(*spec, 1, {{1, 0}});
  PsClientOptions options;
  options.heartbeat_interval_s = 0.05;
  options.peer_timeout_s = 3600;
  options.rpc_timeout_s = 3;  // the bound of a wait nothing ends
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                   PsClient::Create(*spec, {TaskType::kWorker, 1}, *plan, options));
  RETURN_IF_ERROR(client->WaitForServers());
  if (client->route(1) != 1) return absl::InternalError("shard 1 not routed to ps:1");
  if (pin >= 0) client->SetRoute(1, pin);
  ps0.List({{0, 0}, {1, 1}});
  static const std::vector<float> grads(16, 1.0f);
  const absl::Span<const char> bytes(reinterpret_cast<const char*>(grads.data()),
                                     grads.size() * sizeof(float));
  const std::vector<EncodedShard> pushed = {{proto::F32, 0, bytes}, {proto::F32, 0, bytes}};
  std::vector<float> params(32, -1.0f);
  std::vector<ShardReply> replies;
  const std::vector<int64_t> versions = {0, 0};
  return client->PushPull(0, versions, 1, pushed, absl::MakeSpan(params), &replies);
}

TEST(PsClient, RejoinsWhenAnotherPsListsItsShardAtAHigherTerm) {
  const absl::Status s = StepAfterAnAdoption(/*pin=*/-1);
  EXPECT_TRUE(IsRejoin(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("shard 1 is served at placement term 1 by ps:0 ("));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("which lists term 0"));
}

TEST(PsClient, TheChiefsOwnMoveWaitsForTheViewsWithoutARejoin) {
  // Moved to ps:1 by the chief (a give-back): the views' term 1 on ps:0 is
  // what the chief just released, so the step waits, here out its deadline.
  const absl::Status s = StepAfterAnAdoption(/*pin=*/1);
  EXPECT_FALSE(IsRejoin(s)) << s;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
}

TEST(PsClient, RefusesAHostilePsPiecesAsDataLoss) {
  struct Case {
    const char* what;
    std::vector<std::tuple<int, int, int, int>> pieces;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"out of order", {{1, 2, 32, 8}, {0, 2, 32, 8}}, "reply piece 1 of 2 where piece 0"},
      {"the layout changes", {{0, 2, 32, 8}, {1, 3, 32, 8}}, "where piece 1 of 2 was due"},
      {"beyond the shard",
       {{0, 3, 32, 8}, {1, 3, 32, 8}, {2, 3, 32, 8}},
       "reply pieces carry 96 bytes"},
      {"short of the shard", {{0, 2, 16, 4}, {1, 2, 16, 4}}, "reply pieces carry 32 bytes"},
      {"a middle piece short", {{0, 2, 32, 4}, {1, 2, 32, 8}}, "carries 16 bytes"},
      {"piece 1 of 1", {{1, 1, 64, 16}}, "a piece of 1 parts"},
      {"piece size not whole floats", {{0, 2, 30, 8}, {1, 2, 30, 8}}, "pieces of 30 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<float> params;
    const absl::Status s = PushPullAgainst(c.pieces, &params);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(c.says));
  }
}

}  // namespace
}  // namespace pstrain

// PsClient against real ps servers in this process, over loopback TCP.

#include "worker/ps_client.h"

#include <memory>
#include <thread>
#include <vector>

#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "common/shard_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_server/ps_server.h"

namespace pstrain {
namespace {

// A ps per shard, each running on a thread of its own until Shutdown.
class LiveShards {
 public:
  LiveShards(const ClusterSpec& spec, const TransportSecurity& security) {
    for (int k = 0; k < spec.num_ps(); ++k) {
      ClusterSpec ps_spec = spec;
      ps_spec.set_task({TaskType::kPs, k});
      auto server = PsServer::Create(ps_spec, PsServerOptions(), security);
      EXPECT_TRUE(server.ok()) << server.status();
      if (!server.ok()) return;
      servers_.push_back(*std::move(server));
    }
    for (auto& s : servers_) threads_.emplace_back([&s] { (void)s->Run(); });
  }
  ~LiveShards() {
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::thread> threads_;
};

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

}  // namespace
}  // namespace pstrain

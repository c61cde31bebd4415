#include "tests/test_util/live_shards.h"

#include "gtest/gtest.h"

namespace pstrain {

LiveShards::LiveShards(const ClusterSpec& spec, const TransportSecurity& security,
                       const PsServerOptions& options)
    : spec_(spec), security_(security), options_(options) {
  for (int k = 0; k < spec.num_ps(); ++k) {
    ClusterSpec ps_spec = spec;
    ps_spec.set_task({TaskType::kPs, k});
    cancels_.push_back(std::make_unique<CancellationFlag>());
    auto server = PsServer::Create(ps_spec, options, security, cancels_.back().get());
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) {
      ok_ = false;
      return;
    }
    servers_.push_back(*std::move(server));
  }
  for (auto& s : servers_) threads_.emplace_back([&s] { (void)s->Run(); });
}

void LiveShards::Stop(int k) {
  cancels_[k]->Cancel("the test stopped it");
  if (threads_[k].joinable()) threads_[k].join();
  servers_[k].reset();  // its sockets close
}

void LiveShards::Restart(int k) {
  ClusterSpec ps_spec = spec_;
  ps_spec.set_task({TaskType::kPs, k});
  cancels_[k] = std::make_unique<CancellationFlag>();
  auto server = PsServer::Create(ps_spec, options_, security_, cancels_[k].get());
  ASSERT_TRUE(server.ok()) << server.status();
  servers_[k] = *std::move(server);
  threads_[k] = std::thread([s = servers_[k].get()] { (void)s->Run(); });
}

LiveShards::~LiveShards() {
  // A job that ended sent SHUTDOWN already; any other ps is stopped.
  for (auto& cancel : cancels_) cancel->Cancel("the test ended");
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

LiveJob StartLiveJob(int num_ps, int num_workers) {
  LiveJob job;
  auto spec = WithFreePorts(ClusterSpec::Local(num_ps, num_workers, 1));
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return job;
  job.spec = *spec;
  job.security.secret = JobSecret::Generate();
  job.shards = std::make_unique<LiveShards>(job.spec, job.security);
  return job;
}

}  // namespace pstrain

#include "tests/test_util/live_shards.h"

#include "gtest/gtest.h"

namespace pstrain {

LiveShards::LiveShards(const ClusterSpec& spec, const TransportSecurity& security,
                       const PsServerOptions& options)
    : spec_(spec), security_(security), options_(options) {
  cancels_.resize(spec.num_ps());
  servers_.resize(spec.num_ps());
  threads_.resize(spec.num_ps());
  for (int k = 0; k < spec.num_ps(); ++k) {
    if (!Create(k)) {
      ok_ = false;
      return;
    }
  }
  for (int k = 0; k < spec.num_ps(); ++k) Run(k);
}

bool LiveShards::Create(int k) {
  ClusterSpec ps_spec = spec_;
  ps_spec.set_task({TaskType::kPs, k});
  cancels_[k] = std::make_unique<CancellationFlag>();
  auto server = PsServer::Create(ps_spec, options_, security_, cancels_[k].get());
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return false;
  servers_[k] = *std::move(server);
  return true;
}

void LiveShards::Run(int k) {
  threads_[k] = std::thread([s = servers_[k].get()] { (void)s->Run(); });
}

void LiveShards::Stop(int k) {
  cancels_[k]->Cancel("the test stopped it");
  if (threads_[k].joinable()) threads_[k].join();
  servers_[k].reset();  // its sockets close
}

void LiveShards::Restart(int k) {
  if (Create(k)) Run(k);
}

LiveShards::~LiveShards() {
  // A job that ended sent SHUTDOWN already; any other ps is stopped.
  for (auto& cancel : cancels_) {
    if (cancel != nullptr) cancel->Cancel("the test ended");  // null: a ps never made
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

LiveJob StartLiveJob(int num_ps, int num_workers, const PsServerOptions& options) {
  LiveJob job;
  auto spec = WithFreePorts(ClusterSpec::Local(num_ps, num_workers, 1));
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return job;
  job.spec = *spec;
  job.security.secret = JobSecret::Generate();
  job.shards = std::make_unique<LiveShards>(job.spec, job.security, options);
  return job;
}

}  // namespace pstrain

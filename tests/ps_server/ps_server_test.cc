// A PsServer in this process, over loopback TCP: how Run ends.

#include "ps_server/ps_server.h"

#include <memory>
#include <string>
#include <thread>

#include "common/cancellation.h"
#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/protocol_client.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// The ps is told to stop by the Cancellation it was made with (no signal):
// Run returns Cancelled with its reason, and a request it held (a worker's
// REGISTER waiting for the chief's INIT) is answered with it.
TEST(PsServer, RunReturnsCancelledWhenItsCancellationFires) {
  auto spec = WithFreePorts(ClusterSpec::Local(1, 2, 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ClusterSpec ps_spec = *spec;
  ps_spec.set_task({TaskType::kPs, 0});
  CancellationFlag stop;
  auto server = PsServer::Create(ps_spec, PsServerOptions(), TransportSecurity(), &stop);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Status run = absl::UnknownError("Run did not return");
  std::thread serving([&] { run = (*server)->Run(); });

  testing::ProtocolClientOptions o;
  o.port = PortOf(spec->Address({TaskType::kPs, 0}));
  o.job_id = spec->JobId();
  o.rank = 1;
  testing::ProtocolClient worker(o);
  EXPECT_TRUE(worker.Send(worker.Header(proto::REGISTER)).ok());
  // Answered after the REGISTER was handled (one connection, in order):
  // the ps is serving, and holds the REGISTER.
  auto stats = worker.Call(worker.Header(proto::STATS));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->header.type(), proto::STATS);

  stop.Cancel("the test's cancellation");
  serving.join();
  EXPECT_EQ(run.code(), absl::StatusCode::kCancelled) << run;
  EXPECT_THAT(std::string(run.message()), HasSubstr("ps:0 stopped by the test's cancellation"));
  auto registered = worker.Receive();
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->header.type(), proto::REGISTER);
  EXPECT_EQ(registered->header.error().code(), static_cast<int>(absl::StatusCode::kCancelled));
  EXPECT_THAT(registered->header.error().message(),
              HasSubstr("stopped by the test's cancellation"));
}

}  // namespace
}  // namespace pstrain

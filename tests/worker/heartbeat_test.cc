// HeartbeatMonitor against real ps servers in this process over CURVE: the
// thread hears every ps answer (the first beat as soon as the connection
// is up, whatever the interval), sees one go away at once (its connection
// closes), and judges nothing once told the job is ending.

#include "worker/heartbeat.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "common/rejoin.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/live_shards.h"
#include "transport/security.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// Polls `done` every 10 ms for up to 10 s.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    ::usleep(10'000);
  }
  return done();
}

class HeartbeatTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(job_.shards != nullptr && job_.shards->ok()); }

  std::vector<HeartbeatTarget> Targets() const {
    std::vector<HeartbeatTarget> targets;
    for (int k = 0; k < spec_.num_ps(); ++k) {
      const TaskId ps{TaskType::kPs, k};
      HeartbeatTarget t;
      t.name = ps.ToString();
      t.endpoint = ConnectEndpoint(ParseHostPort(spec_.Address(ps)).value());
      UseCurveClient(security_, "worker:0", ps.ToString(), &t.socket);
      targets.push_back(t);
    }
    return targets;
  }

  std::unique_ptr<HeartbeatMonitor> Monitor(std::vector<HeartbeatTarget> targets,
                                            double interval_s = 0.05) {
    proto::Header base;
    base.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
    base.set_job_id(spec_.JobId());
    base.mutable_sender()->set_type(proto::WORKER);
    base.mutable_sender()->set_index(0);
    HeartbeatOptions options;
    options.interval_s = interval_s;
    return std::make_unique<HeartbeatMonitor>(context_, std::move(targets), base, options);
  }

  LiveJob job_ = StartLiveJob(2, 1);
  const ClusterSpec& spec_ = job_.spec;
  const TransportSecurity& security_ = job_.security;
  LiveShards* shards_ = job_.shards.get();
  zmq::context_t context_ = NewContext(1);
};

TEST_F(HeartbeatTest, EveryPsAnswersAndSaysWhatItServes) {
  auto monitor = Monitor(Targets());
  EXPECT_TRUE(Eventually([&] { return monitor->Unanswered().empty(); }));
  EXPECT_TRUE(monitor->status().ok()) << monitor->status();
  EXPECT_EQ(monitor->Views().size(), 2u);
  monitor->StopJudging();
  monitor.reset();
  shards_->Stop(0);
  shards_->Stop(1);
}

// The first beat goes out when each connection's handshake is done, not
// an interval later: a job's start does not wait out --heartbeat_interval_s
// (an interval longer than Eventually waits).
TEST_F(HeartbeatTest, TheFirstBeatWaitsForTheConnectionNotTheInterval) {
  auto monitor = Monitor(Targets(), /*interval_s=*/600);
  EXPECT_TRUE(Eventually([&] { return monitor->Unanswered().empty(); }));
  EXPECT_TRUE(monitor->status().ok()) << monitor->status();
  monitor->StopJudging();
  monitor.reset();
  shards_->Stop(0);
  shards_->Stop(1);
}

TEST_F(HeartbeatTest, APsThatGoesAwayIsARejoinNamingIt) {
  auto monitor = Monitor(Targets());
  ASSERT_TRUE(Eventually([&] { return monitor->Unanswered().empty(); }));
  shards_->Stop(1);
  ASSERT_TRUE(Eventually([&] { return !monitor->status().ok(); }));
  EXPECT_TRUE(IsRejoin(monitor->status())) << monitor->status();
  EXPECT_THAT(std::string(monitor->status().message()), HasSubstr("ps:1"));
  monitor.reset();
  shards_->Stop(0);
}

TEST_F(HeartbeatTest, NothingIsJudgedOnceTheJobIsEnding) {
  auto monitor = Monitor(Targets());
  ASSERT_TRUE(Eventually([&] { return monitor->Unanswered().empty(); }));
  monitor->StopJudging();
  shards_->Stop(0);
  shards_->Stop(1);
  ::usleep(300'000);  // several intervals
  EXPECT_TRUE(monitor->status().ok()) << monitor->status();
}

TEST_F(HeartbeatTest, APsNotThereYetIsUnansweredNotAFailure) {
  std::vector<HeartbeatTarget> targets = Targets();
  auto free = WithFreePorts(ClusterSpec::Local(1, 1, 1));
  ASSERT_TRUE(free.ok());
  targets[1].name = "ps:9";
  targets[1].endpoint =
      ConnectEndpoint(ParseHostPort(free->Address({TaskType::kPs, 0})).value());
  auto monitor = Monitor(targets);
  ASSERT_TRUE(Eventually([&] { return monitor->Unanswered().size() == 1; }));
  ::usleep(300'000);
  EXPECT_EQ(monitor->Unanswered(), std::vector<std::string>{"ps:9"});
  EXPECT_TRUE(monitor->status().ok()) << monitor->status();
  monitor->StopJudging();
  monitor.reset();
  shards_->Stop(0);
  shards_->Stop(1);
}

}  // namespace
}  // namespace pstrain

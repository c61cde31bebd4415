// SocketMonitor on real ZeroMQ sockets over loopback: the events a peer's
// connection and its close produce, as the heartbeat thread, the
// replicator and the handshake guard read them.

#include "transport/socket_monitor.h"

#include <unistd.h>

#include "gtest/gtest.h"
#include "transport/transport.h"

namespace pstrain {
namespace {

// Reads events (bounded: 10 s) until one is `event`.
bool WaitFor(SocketMonitor& monitor, ConnectionEvent event, ConnectionEventRecord* seen) {
  for (int i = 0; i < 1000; ++i) {
    for (ConnectionEventRecord e; monitor.Next(&e);) {
      if (e.event == event) {
        *seen = e;
        return true;
      }
    }
    ::usleep(10'000);
  }
  return false;
}

class SocketMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto router = BindRouter(context_, "tcp://127.0.0.1:*", SocketOptions{});
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  }

  zmq::context_t context_ = NewContext(1);
  zmq::socket_t router_;
  std::string endpoint_;
};

TEST_F(SocketMonitorTest, ServerSeesAcceptAndCloseOfOneConnection) {
  auto monitor = SocketMonitor::Watch(context_, router_, kConnectionAccepted | kConnectionClosed);
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  ASSERT_NE(monitor->socket(), nullptr);
  auto dealer = ConnectDealer(context_, endpoint_, SocketOptions{});
  ASSERT_TRUE(dealer.ok());
  ConnectionEventRecord accepted;
  ASSERT_TRUE(WaitFor(*monitor, kConnectionAccepted, &accepted));
  EXPECT_GT(accepted.value, 0u);  // the connection's descriptor
  dealer->close();
  ConnectionEventRecord closed;
  ASSERT_TRUE(WaitFor(*monitor, kConnectionClosed, &closed));
  EXPECT_EQ(closed.value, accepted.value);
}

TEST_F(SocketMonitorTest, ClientSeesTheServerGo) {
  auto dealer = ConnectDealer(context_, endpoint_, SocketOptions{});
  ASSERT_TRUE(dealer.ok());
  auto monitor = SocketMonitor::Watch(context_, *dealer, kConnectionClosed);
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  // Connected: a request gets through before the server goes.
  proto::Header h;
  h.set_type(proto::HEARTBEAT);
  ASSERT_TRUE(SendRequest(*dealer, h, {}, false).ok());
  zmq::socket_t* sockets[] = {&router_};
  ASSERT_TRUE(PollReadable(sockets, 10'000).value()[0]);
  EXPECT_FALSE(monitor->Saw(kConnectionClosed));
  router_.close();
  bool closed = false;
  for (int i = 0; i < 1000 && !closed; ++i) {
    closed = monitor->Saw(kConnectionClosed);
    if (!closed) ::usleep(10'000);
  }
  EXPECT_TRUE(closed);
}

TEST_F(SocketMonitorTest, WatchesOnlyWhatItWasAskedFor) {
  auto monitor = SocketMonitor::Watch(context_, router_, kConnectionClosed);
  ASSERT_TRUE(monitor.ok());
  auto dealer = ConnectDealer(context_, endpoint_, SocketOptions{});
  ASSERT_TRUE(dealer.ok());
  dealer->close();
  ConnectionEventRecord e;
  ASSERT_TRUE(WaitFor(*monitor, kConnectionClosed, &e));
  // No accept was queued before the close.
  EXPECT_FALSE(monitor->Next(&e));
}

TEST(SocketMonitor, DefaultWatchesNothing) {
  SocketMonitor monitor;
  ConnectionEventRecord e;
  EXPECT_FALSE(monitor.Next(&e));
  EXPECT_FALSE(monitor.Saw(kConnectionClosed));
  EXPECT_EQ(monitor.socket(), nullptr);
}

TEST(SocketMonitor, AClosedSocketCannotBeWatched) {
  zmq::context_t context = NewContext(1);
  zmq::socket_t closed;  // no handle at all
  auto monitor = SocketMonitor::Watch(context, closed, kConnectionClosed);
  ASSERT_FALSE(monitor.ok());
  EXPECT_EQ(monitor.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace pstrain

// HandshakeGuard in front of a real CURVE ROUTER over loopback: a task of
// the job gets in under its name, a stranger's key and bytes that are not
// ZMTP are refused at the handshake and counted, and closed connections
// are reported by descriptor.

#include "transport/handshake_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/numbers.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "transport/security.h"
#include "transport/transport.h"

namespace pstrain {
namespace {

class HandshakeGuardTest : public ::testing::Test {
 protected:
  void Start(bool secure) {
    HandshakeGuardOptions options;
    options.clock = &clock_;
    if (secure) {
      security_.secret = secret_;
      options.allowed_keys[secret_.KeyPairFor("worker:0").public_key] = "worker:0";
    }
    auto guard = HandshakeGuard::Create(context_, options);
    ASSERT_TRUE(guard.ok()) << guard.status();
    guard_ = *std::move(guard);
    SocketOptions so;
    UseCurveServer(security_, "ps:0", &so);
    auto router = BindRouter(context_, "tcp://127.0.0.1:*", so);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    ASSERT_TRUE(guard_->Watch(router_).ok());
  }

  // A DEALER without any mechanism (NULL) at `endpoint`.
  zmq::socket_t NullClient(const std::string& endpoint) {
    auto dealer = ConnectDealer(context_, endpoint, SocketOptions());
    EXPECT_TRUE(dealer.ok()) << dealer.status();
    return dealer.ok() ? *std::move(dealer) : zmq::socket_t();
  }

  // A DEALER holding the keys of task `name` of `secret`.
  zmq::socket_t Client(const JobSecret& secret, const std::string& name) {
    TransportSecurity security;
    security.secret = secret;
    SocketOptions so;
    UseCurveClient(security, name, "ps:0", &so);
    auto dealer = ConnectDealer(context_, endpoint_, so);
    EXPECT_TRUE(dealer.ok()) << dealer.status();
    return dealer.ok() ? *std::move(dealer) : zmq::socket_t();
  }

  // Serves the guard (as the ps's loop does) for up to `ms`, returning the
  // first message the router receives, if any.
  std::optional<RoutedMessage> Serve(int ms) {
    for (int waited = 0; waited < ms; waited += 10) {
      std::vector<zmq::socket_t*> sockets = {&router_};
      for (zmq::socket_t* s : guard_->sockets()) sockets.push_back(s);
      auto readable = PollReadable(sockets, 10);
      if (!readable.ok()) continue;
      guard_->Serve();
      if ((*readable)[0]) return ReceiveRouted(router_);
    }
    return std::nullopt;
  }

  // Serves until `refused` peers were refused (bounded: 10 s).
  bool ServeUntilRefused(int64_t refused) {
    for (int i = 0; i < 1000 && guard_->refused() < refused; ++i) (void)Serve(10);
    return guard_->refused() >= refused;
  }

  static proto::Header Beat() {
    proto::Header h;
    h.set_type(proto::HEARTBEAT);
    return h;
  }

  FakeClock clock_;
  JobSecret secret_ = JobSecret::Generate();
  TransportSecurity security_;
  zmq::context_t context_ = NewContext(1);
  std::unique_ptr<HandshakeGuard> guard_;
  zmq::socket_t router_;
  std::string endpoint_;
};

TEST_F(HandshakeGuardTest, ATaskOfTheJobGetsInUnderItsName) {
  Start(/*secure=*/true);
  zmq::socket_t worker = Client(secret_, "worker:0");
  ASSERT_TRUE(SendRequest(worker, Beat(), {}, false).ok());
  std::optional<RoutedMessage> in = Serve(10'000);
  ASSERT_TRUE(in.has_value());
  ASSERT_TRUE(in->message.ok()) << in->message.status();
  EXPECT_EQ(in->user_id, "worker:0");
  EXPECT_GE(in->fd, 0);
  EXPECT_EQ(guard_->refused(), 0);
}

TEST_F(HandshakeGuardTest, AStrangersKeyIsRefusedAndNothingArrives) {
  Start(/*secure=*/true);
  // The right name under another job's secret, then a name the job lacks.
  zmq::socket_t other_job = Client(JobSecret::Generate(), "worker:0");
  zmq::socket_t unknown = Client(secret_, "worker:7");
  (void)SendRequest(other_job, Beat(), {}, false);
  (void)SendRequest(unknown, Beat(), {}, false);
  // ZeroMQ keeps reconnecting both: each attempt is refused again.
  EXPECT_TRUE(ServeUntilRefused(2));
  EXPECT_FALSE(Serve(200).has_value());
}

TEST_F(HandshakeGuardTest, APeerWithoutCurveIsRefused) {
  Start(/*secure=*/true);
  zmq::socket_t null = NullClient(endpoint_);
  (void)SendRequest(null, Beat(), {}, false);
  EXPECT_TRUE(ServeUntilRefused(1));
  EXPECT_FALSE(Serve(200).has_value());
  zmq::socket_t worker = Client(secret_, "worker:0");
  ASSERT_TRUE(SendRequest(worker, Beat(), {}, false).ok());
  std::optional<RoutedMessage> in = Serve(10'000);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->user_id, "worker:0");
  EXPECT_FALSE(in->local);
}

TEST_F(HandshakeGuardTest, BytesThatAreNotZmtpAreRefused) {
  Start(/*secure=*/true);
  const size_t colon = endpoint_.rfind(':');
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(endpoint_.substr(colon + 1), &port));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string junk = "GET / HTTP/1.1\r\nHost: ps\r\n\r\n";
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  ::close(fd);
  EXPECT_TRUE(ServeUntilRefused(1));
  EXPECT_EQ(guard_->refused(), 1);
}

TEST_F(HandshakeGuardTest, ClosedConnectionsAreReportedByDescriptor) {
  Start(/*secure=*/false);
  auto dealer = ConnectDealer(context_, endpoint_, SocketOptions{});
  ASSERT_TRUE(dealer.ok());
  ASSERT_TRUE(SendRequest(*dealer, Beat(), {}, false).ok());
  std::optional<RoutedMessage> in = Serve(10'000);
  ASSERT_TRUE(in.has_value());
  ASSERT_GE(in->fd, 0);
  EXPECT_TRUE(guard_->TakeClosed().empty());
  dealer->close();
  std::vector<int> closed;
  for (int i = 0; i < 1000 && closed.empty(); ++i) {
    closed = guard_->TakeClosed();
    if (closed.empty()) ::usleep(10'000);
  }
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0], in->fd);
  // A peer that completed its handshake is no refusal.
  EXPECT_EQ(guard_->refused(), 0);
}

TEST_F(HandshakeGuardTest, InsecureHasNoZapHandlerButWatchesTheRouter) {
  Start(/*secure=*/false);
  // Only the router's events: no ZAP socket to poll.
  EXPECT_EQ(guard_->sockets().size(), 1u);
}

TEST_F(HandshakeGuardTest, ASecondZapHandlerInOneContextIsRefused) {
  Start(/*secure=*/true);
  HandshakeGuardOptions options;
  options.allowed_keys[secret_.KeyPairFor("worker:0").public_key] = "worker:0";
  auto second = HandshakeGuard::Create(context_, options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace pstrain

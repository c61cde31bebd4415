// Real ZeroMQ sockets over loopback: framing, zero-copy payloads, and what
// the receiving side makes of malformed frames.

#include "transport/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto router = BindRouter(context_, "tcp://127.0.0.1:*", SocketOptions{});
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    auto dealer = ConnectDealer(context_, endpoint_, SocketOptions{});
    ASSERT_TRUE(dealer.ok()) << dealer.status();
    dealer_ = *std::move(dealer);
  }

  // Waits (bounded) until `socket` is readable.
  static bool WaitReadable(zmq::socket_t& socket) {
    zmq::socket_t* sockets[] = {&socket};
    for (int i = 0; i < 100; ++i) {
      auto r = PollReadable(sockets, 100);
      if (r.ok() && (*r)[0]) return true;
    }
    return false;
  }

  RoutedMessage ReceiveAtRouter() {
    EXPECT_TRUE(WaitReadable(router_));
    return ReceiveRouted(router_);
  }

  zmq::context_t context_{1};
  zmq::socket_t router_;
  zmq::socket_t dealer_;
  std::string endpoint_;
};

TEST(FitsOneMessage, SaysWhatIsOverTheLimitByHowMuchAndWhatToDo) {
  int named = 0;
  const auto what = [&] {
    ++named;
    return std::string("this PUSH");
  };
  EXPECT_TRUE(FitsOneMessage(1 << 20, 1 << 20, what, "send less").ok());
  EXPECT_TRUE(FitsOneMessage(size_t{1} << 40, 0, what, "send less").ok());  // no limit
  EXPECT_EQ(named, 0);  // a message that fits is not named
  const absl::Status over = FitsOneMessage((1 << 20) + (1 << 19), 1 << 20, what, "send less");
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(over.message(),
            "this PUSH is 1.50 MB in one message, over the 1.00 MB a task takes "
            "(--max_message_mb): send less");
}

TEST_F(TransportTest, RequestAndReplyRoundTripWithPayload) {
  proto::Header h;
  h.set_type(proto::PUSH);
  h.set_request_id(42);
  const std::vector<float> grads = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(SendRequest(dealer_, h, grads, /*zero_copy=*/true).ok());
  RoutedMessage in = ReceiveAtRouter();
  ASSERT_TRUE(in.message.ok()) << in.message.status();
  EXPECT_EQ(in.message->header.request_id(), 42u);
  ASSERT_EQ(in.message->payload_floats(), 3u);
  std::vector<float> got(3);
  in.message->CopyPayloadTo(absl::MakeSpan(got));
  EXPECT_EQ(got, grads);
  EXPECT_GE(in.wire_bytes, 12u);

  proto::Header reply;
  reply.set_is_reply(true);
  reply.set_request_id(42);
  ASSERT_TRUE(SendRouted(router_, in.identity, reply, got).ok());
  ASSERT_TRUE(WaitReadable(dealer_));
  auto back = ReceiveReply(dealer_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->header.is_reply());
  EXPECT_EQ(back->payload_floats(), 3u);
}

// PollReadable's budget: it looks no longer than its timeout, and sleeps
// the rest of it, rounded so that the two never pass the timeout.
TEST(BusyPoll, LooksAndSleepsWithinTheTimeout) {
  EXPECT_EQ(LookMicros(100, 5000), 5000);
  EXPECT_EQ(LookMicros(2, 5000), 2000);  // never past the timeout
  EXPECT_EQ(LookMicros(0, 5000), 0);     // a poll that does not wait
  EXPECT_EQ(LookMicros(-1, 5000), 0);    // no limit: it sleeps
  EXPECT_EQ(LookMicros(100, 0), 0);
  EXPECT_EQ(SleepAfterLookMs(100, 5000), 95);
  EXPECT_EQ(SleepAfterLookMs(100, 5500), 94);  // 5.5 + 94 <= 100
  EXPECT_EQ(SleepAfterLookMs(2, 2300), 0);     // it looked past its budget
  EXPECT_EQ(SleepAfterLookMs(100, 0), 100);
}

// --busy_poll_us: a message that comes while the poll looks is seen then;
// one that comes after it looked is seen by its sleep; with none, it ends
// (nothing readable) instead of waiting on.
TEST_F(TransportTest, BusyPollSeesWhatComesWhileItLooksAndWhileItSleeps) {
  zmq::socket_t* routers[] = {&router_};
  proto::Header h;
  h.set_type(proto::PUSH);
  auto none = PollReadable(routers, 20, /*busy_poll_us=*/5000);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE((*none)[0]);
  for (int sleep_ms : {5, 300}) {  // inside the 20 ms look, and after it
    std::thread sender([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      EXPECT_TRUE(SendRequest(dealer_, h, {}, /*zero_copy=*/false).ok());
    });
    auto r = PollReadable(routers, 60'000, /*busy_poll_us=*/20'000);
    sender.join();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE((*r)[0]) << sleep_ms;
    RoutedMessage in = ReceiveRouted(router_);
    EXPECT_TRUE(in.message.ok()) << in.message.status();
  }
}

TEST_F(TransportTest, GarbageHeaderIsReportedNotFatal) {
  zmq::message_t junk(std::string("\xff\xff\xff\xff garbage bytes"));
  dealer_.send(junk, zmq::send_flags::none);
  RoutedMessage in = ReceiveAtRouter();
  EXPECT_GT(in.identity.size(), 0u);
  ASSERT_FALSE(in.message.ok());
  EXPECT_EQ(in.message.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(in.message.status().message()), HasSubstr("not a pstrain header"));
}

TEST_F(TransportTest, TooManyFramesAreReportedAndDrained) {
  for (int i = 0; i < 5; ++i) {
    zmq::message_t f(std::string("x"));
    dealer_.send(f, i < 4 ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  RoutedMessage in = ReceiveAtRouter();
  ASSERT_FALSE(in.message.ok());
  EXPECT_THAT(std::string(in.message.status().message()), HasSubstr("got 5"));
  // Nothing of that message is left behind.
  EXPECT_FALSE(ReceiveRouted(router_).message.ok());
  proto::Header h;
  h.set_request_id(7);
  ASSERT_TRUE(SendRequest(dealer_, h, {}, false).ok());
  RoutedMessage next = ReceiveAtRouter();
  ASSERT_TRUE(next.message.ok());
  EXPECT_EQ(next.message->header.request_id(), 7u);
}

TEST_F(TransportTest, PayloadThatIsNotWholeFloatsIsRefused) {
  proto::Header h;
  const std::string head = h.SerializeAsString();
  zmq::message_t f1(head.empty() ? std::string("\x08\x01") : head);
  zmq::message_t f2(std::string("12345"));
  dealer_.send(f1, zmq::send_flags::sndmore);
  dealer_.send(f2, zmq::send_flags::none);
  RoutedMessage in = ReceiveAtRouter();
  ASSERT_FALSE(in.message.ok());
  EXPECT_THAT(std::string(in.message.status().message()), HasSubstr("not whole f32"));
}

TEST_F(TransportTest, EmptyHeaderFrameIsRefused) {
  zmq::message_t empty;
  dealer_.send(empty, zmq::send_flags::none);
  RoutedMessage in = ReceiveAtRouter();
  ASSERT_FALSE(in.message.ok());
  EXPECT_THAT(std::string(in.message.status().message()), HasSubstr("header frame of 0 bytes"));
}

TEST(Transport, BindingAPortInUseFailsWithTheAddress) {
  zmq::context_t context(1);
  auto first = BindRouter(context, "tcp://127.0.0.1:*", SocketOptions{});
  ASSERT_TRUE(first.ok());
  const std::string endpoint = first->get(zmq::sockopt::last_endpoint);
  auto second = BindRouter(context, endpoint, SocketOptions{});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(endpoint));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use"));
}

TEST(Transport, ImmediateDealerRefusesSendsWhileNothingListens) {
  // A port bound but never listening: connections to it are refused, and
  // holding it keeps anybody else from listening there during the test.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  zmq::context_t context(1);
  SocketOptions options;
  options.immediate = true;
  auto dealer = ConnectDealer(context, "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)),
                              options);
  ASSERT_TRUE(dealer.ok());
  const absl::Status s = SendRequest(*dealer, proto::Header(), {}, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  close(fd);
}

TEST(Transport, EndpointsForLoopbackAndOtherHosts) {
  EXPECT_EQ(BindEndpoint({"localhost", 2222}), "tcp://127.0.0.1:2222");
  EXPECT_EQ(BindEndpoint({"10.0.0.5", 2222}), "tcp://10.0.0.5:2222");
  EXPECT_EQ(BindEndpoint({"ps-0.job.svc", 2222}), "tcp://*:2222");
  EXPECT_EQ(ConnectEndpoint({"localhost", 2222}), "tcp://127.0.0.1:2222");
  EXPECT_EQ(ConnectEndpoint({"ps-0.job.svc", 2222}), "tcp://ps-0.job.svc:2222");
  EXPECT_EQ(ConnectEndpoint({"::1", 2222}), "tcp://[::1]:2222");
}

}  // namespace
}  // namespace pstrain

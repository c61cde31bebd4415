// The metrics endpoint over real TCP: what a scrape gets, what a stranger's
// bytes get (never a crash, never a stuck endpoint), and how a bad address
// or a taken port is refused.

#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/free_ports.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/metric_family.h"
#include "tests/test_util/http_client.h"

namespace pstrain {
namespace {

using ::pstrain::testing::HttpExchange;
using ::pstrain::testing::HttpGet;

int FreePort() {
  auto ports = FreeLoopbackPorts(1, {});
  EXPECT_TRUE(ports.ok()) << ports.status();
  return ports.ok() ? (*ports)[0] : 0;
}

std::unique_ptr<MetricsServer> StartServer(int port) {
  auto server = MetricsServer::Start({"127.0.0.1", port},
                                     {{"job_id", "abc"}, {"task_type", "ps"}, {"task_index", "1"}});
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(ParseMetricsRequestTest, ServesGetAndHeadOfMetricsOnly) {
  EXPECT_EQ(ParseMetricsRequest("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
  EXPECT_EQ(ParseMetricsRequest("GET /metrics?x=1 HTTP/1.0\r\n\r\n").status, 200);
  const MetricsRequest head = ParseMetricsRequest("HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.head_only);
  EXPECT_EQ(ParseMetricsRequest("GET / HTTP/1.1\r\n\r\n").status, 404);
  EXPECT_EQ(ParseMetricsRequest("GET /metrics/x HTTP/1.1\r\n\r\n").status, 404);
  EXPECT_EQ(ParseMetricsRequest("POST /metrics HTTP/1.1\r\n\r\n").status, 405);
  for (const char* bad : {"", "\r\n\r\n", "GET\r\n\r\n", "GET /metrics\r\n\r\n",
                          "GET /metrics HTTP/2.0\r\n\r\n", "GET  /metrics HTTP/1.1\r\n\r\n",
                          "get /metrics HTTP/1.1\r\n\r\n", "GET metrics HTTP/1.1\r\n\r\n",
                          "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"}) {
    EXPECT_EQ(ParseMetricsRequest(bad).status, 400) << bad;
  }
}

TEST(MetricsServerTest, AScrapeSeesTheRegistryAndRegisteredCollectablesWithTheTasksLabels) {
  auto server = StartServer(FreePort());
  ASSERT_NE(server, nullptr);
  auto& counter = prometheus::BuildCounter()
                      .Name("pstrain_test_things_total")
                      .Help("Things")
                      .Labels(server->identity())
                      .Register(server->registry())
                      .Add({});
  counter.Increment(3);
  // A collectable that lives elsewhere is served while it lives.
  class Fixed : public prometheus::Collectable {
   public:
    std::vector<prometheus::MetricFamily> Collect() const override {
      prometheus::ClientMetric m;
      m.gauge.value = 42;
      return {{"pstrain_test_fixed", "A gauge", prometheus::MetricType::Gauge, {m}}};
    }
  };
  auto fixed = std::make_shared<Fixed>();
  server->Register(fixed);
  const int port = std::stoi(server->url().substr(server->url().rfind(':') + 1));
  auto r = HttpGet(port, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(absl::StrContains(r->headers, "text/plain; version=0.0.4")) << r->headers;
  EXPECT_TRUE(absl::StrContains(r->body, "# TYPE pstrain_test_things_total counter")) << r->body;
  EXPECT_TRUE(absl::StrContains(
      r->body, "pstrain_test_things_total{job_id=\"abc\",task_index=\"1\",task_type=\"ps\"} 3"))
      << r->body;
  EXPECT_TRUE(absl::StrContains(r->body, "pstrain_test_fixed 42")) << r->body;
  counter.Increment();
  fixed.reset();  // gone: no longer served, and nothing dangles
  r = HttpGet(port, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(absl::StrContains(r->body, "task_type=\"ps\"} 4")) << r->body;
  EXPECT_FALSE(absl::StrContains(r->body, "pstrain_test_fixed")) << r->body;
  // HEAD: headers only.
  auto head = HttpExchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
}

// The log says what is bound: every interface for 0.0.0.0 (with the URL
// this machine reaches it at), else the address itself.
TEST(MetricsServerTest, DescribeSaysWhatIsBound) {
  const int port = FreePort();
  auto any = MetricsServer::Start({"0.0.0.0", port}, {});
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ((*any)->Describe(), absl::StrCat("0.0.0.0:", port, " (every interface; from this machine "
                                             "http://127.0.0.1:", port, "/metrics)"));
  EXPECT_EQ((*any)->url(), absl::StrCat("http://127.0.0.1:", port, "/metrics"));
  auto r = HttpGet(port, "/metrics");  // and it is reached there
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  auto local = StartServer(FreePort());
  ASSERT_NE(local, nullptr);
  EXPECT_EQ(local->Describe(), local->url());
  EXPECT_TRUE(absl::StartsWith(local->Describe(), "http://127.0.0.1:")) << local->Describe();
}

TEST(MetricsServerTest, AStrangersBytesGetAnErrorAndTheEndpointServesOn) {
  auto server = StartServer(FreePort());
  ASSERT_NE(server, nullptr);
  const int port = std::stoi(server->url().substr(server->url().rfind(':') + 1));
  auto status_of = [&](const std::string& raw) {
    auto r = HttpExchange(port, raw);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->status : -1;
  };
  EXPECT_EQ(status_of("GET /secret HTTP/1.1\r\n\r\n"), 404);
  EXPECT_EQ(status_of("DELETE /metrics HTTP/1.1\r\n\r\n"), 405);
  EXPECT_EQ(status_of(std::string("\x00\xff\x16\x03garbage\r\n\r\n", 15)), 400);
  // A head without end, larger than any request: refused, not buffered on.
  EXPECT_EQ(status_of("GET /metrics HTTP/1.1\r\nX: " + std::string(64 * 1024, 'a')), 431);
  // A client that connects and says nothing is cut off (408), and does not
  // hold the endpoint for good: the next scrape is served.
  const int64_t start = MonotonicMicros();
  EXPECT_EQ(status_of("GET /metrics HTTP/1.1\r\n"), 408);
  EXPECT_LT(MonotonicMicros() - start, 30'000'000);
  // A client that goes away mid-request.
  {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(send(fd, "GET /met", 8, MSG_NOSIGNAL), 8);
    close(fd);
  }
  auto r = HttpGet(port, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
}

TEST(MetricsServerTest, ATakenPortOrABadAddressIsRefusedNamingIt) {
  const int port = FreePort();
  auto first = StartServer(port);
  ASSERT_NE(first, nullptr);
  auto second = MetricsServer::Start({"127.0.0.1", port}, {});
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), absl::StrCat("127.0.0.1:", port)))
      << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), "in use")) << second.status();
  for (const MetricsEndpoint& bad : std::vector<MetricsEndpoint>{
           {"localhost", 9100}, {"", 9100}, {"::1", 9100}, {"1.2.3", 9100},
           {"127.0.0.1", -1}, {"127.0.0.1", 70000}}) {
    auto s = MetricsServer::Start(bad, {});
    ASSERT_FALSE(s.ok()) << bad.host << ":" << bad.port;
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
    EXPECT_TRUE(absl::StrContains(s.status().message(), "--metrics_")) << s.status();
  }
  // IPv6 loopback, bracketed as a URL writes it.
  auto v6 = MetricsServer::Start({"[::1]", FreePort()}, {});
  if (!v6.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << v6.status();
  EXPECT_TRUE(absl::StartsWith((*v6)->url(), "http://[::1]:")) << (*v6)->url();
}

}  // namespace
}  // namespace pstrain

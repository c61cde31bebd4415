#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "glog/logging.h"
#include "prometheus/text_serializer.h"

namespace pstrain {
namespace {

constexpr size_t kMaxRequestHeadBytes = 8 * 1024;
constexpr int64_t kRequestTimeoutUs = 2'000'000;
constexpr int64_t kSendTimeoutUs = 2'000'000;  // a peer that does not read
constexpr int64_t kDrainTimeoutUs = 500'000;
constexpr size_t kMaxDrainBytes = 1 << 20;
constexpr int kAcceptPollMs = 100;  // how soon the destructor is heard

// The host without IPv6 brackets, and whether it is IPv6. False when it is
// no address literal.
bool ParseHostLiteral(const std::string& host, std::string* bare, bool* v6) {
  *v6 = host.size() > 2 && host.front() == '[' && host.back() == ']';
  *bare = *v6 ? host.substr(1, host.size() - 2) : host;
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(*v6 ? AF_INET6 : AF_INET, bare->c_str(), buf) == 1;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Bad Request";
  }
}

// Sends all of `data` or gives up at `deadline_us` (a peer that does not
// read).
void SendAll(int fd, absl::string_view data, int64_t deadline_us) {
  while (!data.empty()) {
    const int64_t left_ms = (deadline_us - MonotonicMicros()) / 1000;
    if (left_ms <= 0) return;
    pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(left_ms)) <= 0) return;
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

absl::Status ValidateMetricsEndpoint(const MetricsEndpoint& endpoint) {
  if (endpoint.port < 0 || endpoint.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port=", endpoint.port, ": a TCP port (1-65535), or 0 for none"));
  }
  std::string bare;
  bool v6 = false;
  if (!ParseHostLiteral(endpoint.host, &bare, &v6)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_host=\"", endpoint.host, "\": an IPv4 address (0.0.0.0 for every interface, "
        "127.0.0.1 for this machine only) or a bracketed IPv6 address such as [::1]"));
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> TaskIdentityLabels(const ClusterSpec& spec) {
  std::map<std::string, std::string> labels = {{"job_id", absl::StrCat(absl::Hex(spec.JobId()))}};
  if (spec.task().has_value()) {
    labels["task_type"] = std::string(TaskTypeName(spec.task()->type));
    labels["task_index"] = absl::StrCat(spec.task()->index);
  }
  return labels;
}

MetricsRequest ParseMetricsRequest(absl::string_view head) {
  MetricsRequest r;
  const size_t eol = head.find("\r\n");
  const absl::string_view line = head.substr(0, eol);
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.") || parts[2].size() != 8 ||
      parts[0].empty() || parts[1].empty() || parts[1][0] != '/') {
    return r;  // 400
  }
  for (char c : parts[0]) {
    if (c < 'A' || c > 'Z') return r;
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    r.status = 404;
    return r;
  }
  if (parts[0] != "GET" && parts[0] != "HEAD") {
    r.status = 405;
    return r;
  }
  r.status = 200;
  r.head_only = parts[0] == "HEAD";
  return r;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsEndpoint& endpoint, std::map<std::string, std::string> identity) {
  if (absl::Status s = ValidateMetricsEndpoint(endpoint); !s.ok()) return s;
  if (endpoint.port == 0) return absl::InvalidArgumentError("MetricsServer needs a port");
  std::string bare;
  bool v6 = false;
  ParseHostLiteral(endpoint.host, &bare, &v6);
  const std::string address = absl::StrCat(endpoint.host, ":", endpoint.port);
  const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("metrics endpoint: socket: ", std::strerror(errno)));
  const int one = 1;
  // A restarted task binds its port again at once (the old connections in
  // TIME_WAIT do not hold it).
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage storage = {};
  socklen_t len = 0;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&storage);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(endpoint.port));
    inet_pton(AF_INET6, bare.c_str(), &a->sin6_addr);
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(endpoint.port));
    inet_pton(AF_INET, bare.c_str(), &a->sin_addr);
    len = sizeof(sockaddr_in);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&storage), len) != 0 || listen(fd, 16) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address,
                                               " (--metrics_port, --metrics_host): ",
                                               std::strerror(err)));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->identity_ = std::move(identity);
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->listen_fd_ = fd;
  const std::string shown = endpoint.host == "0.0.0.0" ? "127.0.0.1" : endpoint.host;
  server->url_ = absl::StrCat("http://", shown, ":", endpoint.port, "/metrics");
  server->bound_ = absl::StrCat(endpoint.host, ":", endpoint.port);
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

std::string MetricsServer::Describe() const {
  if (!absl::StartsWith(bound_, "0.0.0.0:")) return url_;
  return absl::StrCat(bound_, " (every interface; from this machine ", url_, ")");
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

void MetricsServer::Register(std::weak_ptr<prometheus::Collectable> collectable) {
  absl::MutexLock lock(&mu_);
  collectables_.push_back(std::move(collectable));
}

std::string MetricsServer::Scrape() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<std::shared_ptr<prometheus::Collectable>> live;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& weak : collectables_) {
      if (auto c = weak.lock()) live.push_back(std::move(c));
    }
  }
  for (const auto& c : live) {
    for (prometheus::MetricFamily& f : c->Collect()) families.push_back(std::move(f));
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

void MetricsServer::Serve() {
  while (!stop_) {
    pollfd p = {listen_fd_, POLLIN, 0};
    if (poll(&p, 1, kAcceptPollMs) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Answer(fd);
    close(fd);
  }
}

void MetricsServer::Answer(int fd) const {
  const int64_t deadline = MonotonicMicros() + kRequestTimeoutUs;
  std::string head;
  int status = 0;
  while (status == 0) {
    if (head.find("\r\n\r\n") != std::string::npos) break;
    if (head.size() > kMaxRequestHeadBytes) {
      status = 431;
      break;
    }
    const int64_t left_ms = (deadline - MonotonicMicros()) / 1000;
    pollfd p = {fd, POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) <= 0) {
      status = 408;
      break;
    }
    char buf[2048];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;  // the peer went away
    head.append(buf, static_cast<size_t>(n));
  }
  MetricsRequest request;
  if (status == 0) {
    request = ParseMetricsRequest(head);
    status = request.status;
  }
  std::string body = status == 200 ? Scrape() : absl::StrCat(status, " ", Reason(status), "\n");
  const std::string type =
      status == 200 ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8";
  std::string reply = absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\nContent-Type: ",
                                   type, "\r\nContent-Length: ", body.size(),
                                   "\r\nConnection: close\r\n\r\n");
  if (!request.head_only) reply += body;
  SendAll(fd, reply, MonotonicMicros() + kSendTimeoutUs);
  if (status == 200) return;
  // A refused request may have left bytes unread: closing on them would
  // reset the connection before the peer reads why. Half-close, then drain
  // (bounded) until the peer closes.
  shutdown(fd, SHUT_WR);
  const int64_t drain_deadline = MonotonicMicros() + kDrainTimeoutUs;
  char buf[4096];
  for (size_t drained = 0; drained < kMaxDrainBytes;) {
    const int64_t left_ms = (drain_deadline - MonotonicMicros()) / 1000;
    pollfd p = {fd, POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) <= 0) return;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    drained += static_cast<size_t>(n);
  }
}

}  // namespace pstrain

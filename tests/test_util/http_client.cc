#include "tests/test_util/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace pstrain::testing {

absl::StatusOr<HttpResponse> HttpExchange(int port, absl::string_view raw, double timeout_s) {
  const int64_t deadline = MonotonicMicros() + static_cast<int64_t>(timeout_s * 1e6);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("127.0.0.1:", port, ": ", std::strerror(err)));
  }
  absl::string_view left = raw;
  while (!left.empty()) {
    const ssize_t n = send(fd, left.data(), left.size(), MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early (an oversized request)
    left.remove_prefix(static_cast<size_t>(n));
  }
  std::string all;
  for (;;) {
    const int64_t left_ms = (deadline - MonotonicMicros()) / 1000;
    pollfd p = {fd, POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) <= 0) {
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat("127.0.0.1:", port, ": no whole answer within ",
                                                      timeout_s, " s (", all.size(), " bytes)"));
    }
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    all.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  HttpResponse r;
  const size_t end = all.find("\r\n\r\n");
  if (all.compare(0, 9, "HTTP/1.1 ") != 0 && all.compare(0, 9, "HTTP/1.0 ") != 0) {
    return absl::DataLossError(absl::StrCat("not an HTTP answer: \"", all.substr(0, 80), "\""));
  }
  if (end == std::string::npos || !absl::SimpleAtoi(all.substr(9, 3), &r.status)) {
    return absl::DataLossError(absl::StrCat("malformed HTTP answer: \"", all.substr(0, 80), "\""));
  }
  r.headers = all.substr(0, end);
  r.body = all.substr(end + 4);
  return r;
}

absl::StatusOr<HttpResponse> HttpGet(int port, absl::string_view path_and_query, double timeout_s) {
  return HttpExchange(port,
                      absl::StrCat("GET ", path_and_query, " HTTP/1.1\r\nHost: 127.0.0.1:", port,
                                   "\r\nConnection: close\r\n\r\n"),
                      timeout_s);
}

std::string UrlEncode(absl::string_view value) {
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace pstrain::testing

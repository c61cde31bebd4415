#pragma once

// A minimal HTTP/1.x client for tests: one request over a fresh TCP
// connection to 127.0.0.1, read to the server's close. Enough for the
// metrics endpoint and Prometheus's HTTP API; not a general client.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain::testing {

struct HttpResponse {
  int status = 0;
  std::string headers;  // the status line and headers, as received
  std::string body;
};

// Sends `raw` (anything, a well-formed request or not) and reads the whole
// answer within `timeout_s`. Unavailable when nothing listens;
// DeadlineExceeded past the timeout.
absl::StatusOr<HttpResponse> HttpExchange(int port, absl::string_view raw, double timeout_s = 10);

// GET `path_and_query` ("/metrics", "/api/v1/query?query=up").
absl::StatusOr<HttpResponse> HttpGet(int port, absl::string_view path_and_query,
                                     double timeout_s = 10);

// Percent-encodes a query parameter's value.
std::string UrlEncode(absl::string_view value);

}  // namespace pstrain::testing

#pragma once

// Live metrics for Prometheus: one HTTP endpoint per task serving
// GET /metrics in Prometheus's text format (version 0.0.4), made by
// prometheus-cpp's registry and TextSerializer.
//
//   ASSIGN_OR_RETURN(auto server, MetricsServer::Start({"0.0.0.0", 9100},
//                                                      TaskIdentityLabels(spec)));
//   auto& steps = prometheus::BuildCounter().Name("pstrain_steps_total")
//                     .Help("...").Labels(server->identity()).Register(server->registry());
//
// Every family carries the task's identity as constant labels
// (TaskIdentityLabels): job_id, task_type, task_index. `job` itself is left
// to Prometheus, whose scrape config names the job (a target's own `job`
// label would be renamed `exported_job`).
//
// The HTTP side is ours, not prometheus-cpp's Exposer: civetweb starts its
// threads with a fixed small stack, and in a worker that links cuBLAS
// (about 94 KB of thread-local storage in libcublasLt alone) pthread_create
// refuses such a stack (EINVAL), so the Exposer cannot start there. One
// thread of ours, with the default stack, serves one connection at a time:
// a request head of at most 8 KiB read within 2 s, then one answer and
// close. A stranger can hold the endpoint for 2 s per connection, never
// the training: scrapes never touch the task's own threads (counters are
// atomic; collectables copy under their own lock).
//
// The endpoint is read-only and unauthenticated (as every Prometheus
// exporter): it shows counters, never parameters or the job secret. Bind it
// to 127.0.0.1 when nothing outside the machine needs it.
//
// What a task exposes, and the names: ps_server/shard_metrics.h and
// worker/metrics_recorder.h; why it is built so:
// docs/decisions/0042-prometheus-endpoint.md.
//
// Thread safety: registry() and Register() may be called from any thread.

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/cluster_spec.h"
#include "prometheus/collectable.h"
#include "prometheus/registry.h"

namespace pstrain {

struct MetricsEndpoint {
  std::string host = "0.0.0.0";  // an IPv4 address, or a bracketed IPv6 one ("[::1]")
  int port = 0;                  // 0: no endpoint
};

// InvalidArgument naming the flag (--metrics_port, --metrics_host) for a
// value that cannot be served.
absl::Status ValidateMetricsEndpoint(const MetricsEndpoint& endpoint);

// job_id (the spec's JobId in hex, as the tasks log it), task_type and
// task_index of the spec's own task.
std::map<std::string, std::string> TaskIdentityLabels(const ClusterSpec& spec);

// What the endpoint answers to a request head (request line and headers,
// up to the blank line): 200 for GET or HEAD of /metrics (a query string
// is ignored), 404 for another path, 405 for another method, 400 for
// anything that is not an HTTP/1.x request line.
struct MetricsRequest {
  int status = 400;
  bool head_only = false;  // HEAD: the headers without the body
};
MetricsRequest ParseMetricsRequest(absl::string_view head);

class MetricsServer {
 public:
  // Serves /metrics on endpoint.host:endpoint.port from a thread of its
  // own. Unavailable naming the address when it cannot be bound (in use,
  // not this host's). REQUIRES: endpoint.port > 0.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const MetricsEndpoint& endpoint, std::map<std::string, std::string> identity);
  // Stops serving (within the request timeout) and closes the socket.
  ~MetricsServer();

  // Where the families built on it are served from.
  prometheus::Registry& registry() { return *registry_; }
  // The constant labels every family of this task carries.
  const std::map<std::string, std::string>& identity() const { return identity_; }
  // Serves what `collectable` collects (on scrape, on the server's thread)
  // next to the registry's families, for as long as it lives.
  void Register(std::weak_ptr<prometheus::Collectable> collectable);
  // "http://HOST:PORT/metrics", where this machine reaches it (bound to
  // 0.0.0.0, every interface: 127.0.0.1).
  const std::string& url() const { return url_; }
  // For the task's log: what is bound, and the URL where that differs,
  // "0.0.0.0:9100 (every interface; from this machine
  // http://127.0.0.1:9100/metrics)", else the URL.
  std::string Describe() const;
  // The exposition text a scrape gets now.
  std::string Scrape() const;

 private:
  MetricsServer() = default;
  void Serve();
  void Answer(int fd) const;

  std::map<std::string, std::string> identity_;
  std::shared_ptr<prometheus::Registry> registry_;
  mutable absl::Mutex mu_;
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_ ABSL_GUARDED_BY(mu_);
  std::string url_;
  std::string bound_;  // "HOST:PORT" as bound
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pstrain

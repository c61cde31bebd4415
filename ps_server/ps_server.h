#pragma once

// A ps task: binds a ROUTER socket at its address from the cluster spec and
// serves one shard of the parameters until the chief says training is over.
//
//   ASSIGN_OR_RETURN(auto server, PsServer::Create(cluster, options, security, &stop));
//   return server->Run();
//
// Security: with a job secret the ROUTER is a CURVE server; a HandshakeGuard
// admits only the keys of its spec's tasks (and the "client" key), and
// every request is attributed to the authenticated task (transport/security.h).
//
// Liveness: every worker sends HEARTBEATs; only authenticated, valid
// traffic counts. A registered worker silent for peer_timeout_s is declared
// dead (logged, counted): the shard stops waiting for it until it is heard
// from again (RequestHandler::DeclareSilentDead), so a dead worker costs a
// sync job seconds, and a restarted one rejoins. The job fails when the
// chief has not initialised (or restored) the shard register_timeout_s
// after this ps started, when a worker has not registered
// register_timeout_s after the chief's INIT, or when no worker at all has
// been alive for register_timeout_s: every parked
// and later request is answered with an Aborted error naming the cause,
// and after a short grace (so that the workers hear why) Run returns it.
//
// Timeline: with --timeline_dir, the ps's own spans on one thread: every
// "apply" (the request whose gradient completed an update, from its
// arrival to its replies), in sync each version's "gather" (from its first
// gradient to the apply: the shard waiting for every worker), and "save"
// and "restore" (checkpoints).
//
// Metrics: with --metrics_port, the shard's counters are served to
// Prometheus (ps_server/shard_metrics.h), refreshed a few times a second.
//
// A restarted ps comes up empty and waits for the chief to RESTORE it from
// the last checkpoint (worker/trainer.h); its random instance id, in every
// reply, tells clients it restarted.
//
// Failover (--ps_replicas=1): a ps also serves the shard it is the standby
// of while that shard's ps is away, when the chief says so (ADOPT, RELEASE:
// ps_server/hosted_shards.h). Its HEARTBEAT and STATS replies list the
// shards it serves (Header.hosted), which is how workers find them. It
// exits once every shard it serves was shut down.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/cancellation.h"
#include "common/cluster_spec.h"
#include "common/metrics_server.h"
#include "common/trace_writer.h"
#include "ps_server/hosted_shards.h"
#include "ps_server/ps_server_options.h"
#include "ps_server/replicator.h"
#include "ps_server/request_handler.h"
#include "ps_server/shard_metrics.h"
#include "transport/handshake_guard.h"
#include "transport/local_links.h"
#include "transport/local_route.h"
#include "transport/pieces.h"
#include "transport/security.h"
#include "transport/transport.h"

namespace pstrain {

class PsServer {
 public:
  // Binds the socket. Unavailable when the address is in use or cannot be
  // bound. `cancel` stops Run (ps_server/main.cc passes its SIGINT/SIGTERM);
  // borrowed, it must outlive the server; null: never cancelled.
  // REQUIRES: cluster.task() is a ps task.
  static absl::StatusOr<std::unique_ptr<PsServer>> Create(const ClusterSpec& cluster,
                                                          const PsServerOptions& options,
                                                          const TransportSecurity& security,
                                                          const Cancellation* cancel = nullptr);

  // Serves until SHUTDOWN from the chief (OK), `cancel` fires (Cancelled,
  // naming its reason), or a job failure (Aborted).
  absl::Status Run();

  // Removes the Unix socket's file, if it made one.
  ~PsServer();

  const std::string& endpoint() const { return endpoint_; }
  proto::ShardStats Stats() const { return shards_.own().Stats(); }

 private:
  PsServer(const ClusterSpec& cluster, const PsServerOptions& options,
           RequestHandlerOptions handler_options, const TransportSecurity& security,
           const Cancellation* cancel);

  void ServeReadable();
  void Process(RoutedMessage routed);
  // Gives up the partial messages (transport/pieces.h) of connections that
  // closed; nobody is left to tell.
  void DropClosedConnections();
  // The same for the Unix socket's links alone.
  void DropClosedLinks();
  // Gives up, and answers, partial messages whose pieces stopped coming
  // for --peer_timeout_s.
  void ExpirePieces();
  // Listens at the Unix socket of this host's workers, in the directory
  // of `link_secret` (LinkSecret), logging why not when it cannot (they
  // then come over TCP).
  void BindLocal(int port, const JobSecret& link_secret);
  // Serves the Unix socket's links after a poll of their descriptors.
  void ServeLocal(absl::Span<const PollFd> polled);
  // Connections refused before a request: ZeroMQ's handshakes, the Unix
  // socket's hellos.
  int64_t HandshakesRefused() const;
  void Send(std::vector<Reply>* replies);
  // The payload frame of `r`: the shard's parameters without a copy, or
  // its own payload; none. A reply naming a shard not served here becomes
  // a refusal.
  zmq::message_t ReplyBody(Reply& r);
  void CheckLiveness();
  // "worker:1 at host:port" (just "worker:1" when the spec has no address).
  std::string Describe(const TaskId& task) const;
  // Sends `replies`: parameters from the shard each names, and (HEARTBEAT,
  // STATS) the shards this ps serves.
  // Starts replicating to the standby once the job asks for one.
  void MaybeStartReplicator();
  void PumpReplicator();
  // Hands the counters to the metrics endpoint: at most every
  // kMetricsPublishUs unless `now`.
  void PublishMetrics(bool now);
  // Opens the timeline file (--timeline_dir).
  absl::Status OpenTimeline();
  // The spans of one handled request that arrived at `start_unix_us`, when
  // the shard had taken `updates_before` updates.
  void TraceRequest(proto::MessageType type, int64_t start_unix_us, int64_t updates_before);
  // A reply's payload of `bytes` in `layout`'s pieces, each with `header`;
  // `frame` makes the frame of floats [begin, begin + count).
  absl::Status SendPieces(absl::string_view identity, const proto::Header& header,
                          const PieceLayout& layout, size_t bytes,
                          absl::FunctionRef<zmq::message_t(size_t begin, size_t count)> frame);
  void FailJob(const std::string& why);
  absl::Status Finish(absl::Status status);

  ClusterSpec cluster_;
  TaskId task_;
  PsServerOptions options_;
  const Cancellation* cancel_;  // never null
  zmq::context_t context_;      // options_.io_threads I/O threads
  // options_.update_threads - 1 helpers of the shards' updates; before
  // shards_, whose stores borrow it.
  std::unique_ptr<ChunkPool> update_pool_;
  std::unique_ptr<HandshakeGuard> guard_;  // before socket_: closed after it
  zmq::socket_t socket_;
  std::string endpoint_;
  // The Unix socket for the workers of this host (transport/local_route.h;
  // CURVE jobs only), "" when none, and its links (transport/local_links.h).
  std::string local_endpoint_;
  LocalFileId local_file_;  // its file, as bound
  std::unique_ptr<LocalLinks> local_;
  std::map<std::string, std::string> local_passwords_;  // task name -> its password
  HostedShards shards_;      // its own shard, and one it adopted (failover)
  RequestHandler& handler_;  // shards_.own()
  TransportSecurity security_;
  // CURVE: pushes that come in pieces (transport/pieces.h), until whole; each
  // judged at its first piece (HostedShards::AdmitPieces).
  PieceAssembler pieces_;
  std::unique_ptr<Replicator> replicator_;  // --ps_replicas=1, once initialised
  // --metrics_port: the endpoint, and what it serves of this shard.
  std::unique_ptr<MetricsServer> metrics_server_;
  std::shared_ptr<ShardMetrics> metrics_;
  int64_t metrics_published_us_ = 0;
  std::unique_ptr<TraceWriter> trace_;  // --timeline_dir
  int64_t gather_start_unix_us_ = 0;    // sync: the open version's first gradient (0: none)
  int64_t trace_flushed_us_ = 0;
  int64_t init_us_ = 0;
  int64_t all_dead_since_us_ = 0;  // 0: some worker is alive
  int64_t started_us_ = 0;
  int64_t failed_us_ = 0;
  int64_t last_wait_log_us_ = 0;
  int64_t guard_served_us_ = 0;  // when Run last served the guard
  int64_t last_request_us_ = 0;  // when Run last served its ROUTER (--busy_poll_us)
  int64_t send_failures_ = 0;
};

}  // namespace pstrain

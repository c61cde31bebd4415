#include "ps_server/ps_server.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr int kPollMs = 100;
constexpr int kMaxMessagesPerWake = 256;
constexpr int64_t kGuardIdleServeUs = 1'000'000;
constexpr int64_t kWaitLogIntervalUs = 30'000'000;
// How stale a scrape of the metrics endpoint may be.
constexpr int64_t kMetricsPublishUs = 250'000;
// The timeline: the ps's process id (workers are rank + 1), its one
// thread, and how often its file is flushed.
constexpr int kTracePsPid0 = 1000;
constexpr int kTraceShardTid = 1;
constexpr int64_t kTraceFlushUs = 1'000'000;

}  // namespace

namespace {

// The job's identities as the ps's ZAP handler, request handler (under
// CURVE) and Unix socket (under `link_secret`, LinkSecret) see them: every
// chief/worker/ps task of the spec, and the "client" tool.
void AddPrincipals(const ClusterSpec& cluster, const TransportSecurity& security,
                   const std::optional<JobSecret>& link_secret, HandshakeGuardOptions* guard,
                   RequestHandlerOptions* handler,
                   std::map<std::string, std::string>* local_passwords) {
  if (!security.secure() && !link_secret.has_value()) return;
  auto add = [&](const std::string& name, Principal who) {
    if (link_secret.has_value()) (*local_passwords)[name] = link_secret->LocalPassword(name);
    if (!security.secure()) return;
    guard->allowed_keys[security.secret->KeyPairFor(name).public_key] = name;
    handler->principals[name] = who;
  };
  std::vector<TaskId> tasks = cluster.AllTasks();
  if (cluster.sparse()) {
    // Whoever may join: every rank slot (the ps's spec lists none of them).
    tasks = {*cluster.task()};
    for (int rank = 0; rank < cluster.num_workers(); ++rank)
      tasks.push_back(cluster.TaskForRank(rank));
  }
  for (const TaskId& task : tasks) {
    if (task.type == TaskType::kPs) {
      add(task.ToString(), {Role::kPs, -1, task.index});
    } else if (task.type == TaskType::kChief || task.type == TaskType::kWorker) {
      const int rank = cluster.WorkerRank(task);
      add(task.ToString(), {rank == 0 ? Role::kChief : Role::kWorker, rank});
    }
  }
  add(std::string(kClientIdentity), {Role::kClient, -1});
}

RequestHandlerOptions WithPool(RequestHandlerOptions options, ChunkPool* pool) {
  options.update_pool = pool;
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Create(const ClusterSpec& cluster,
                                                           const PsServerOptions& options,
                                                           const TransportSecurity& security,
                                                           const Cancellation* cancel) {
  CHECK(cluster.task().has_value() && cluster.task()->type == TaskType::kPs);
  RETURN_IF_ERROR(ValidatePsServerOptions(options));
  const TaskId task = *cluster.task();
  const std::string& address = cluster.Address(task);
  ASSIGN_OR_RETURN(const HostPort hp, ParseHostPort(address));
  RequestHandlerOptions handler_options;
  handler_options.shard_index = task.index;
  handler_options.num_workers = cluster.num_workers();
  handler_options.checkpoint_dir = options.checkpoint_dir;
  handler_options.instance = RandomId();
  // A sparse spec (TFJob enableDynamicWorker) shows a ps only itself: the
  // job id and the shard count come with the chief's INIT.
  handler_options.dynamic_workers = cluster.sparse();
  handler_options.job_id = cluster.sparse() ? 0 : cluster.JobId();
  handler_options.num_shards = cluster.sparse() ? 0 : cluster.num_ps();
  HandshakeGuardOptions guard_options;
  std::map<std::string, std::string> local_passwords;
  const std::optional<JobSecret> link_secret = LinkSecret(security.secret, cluster);
  AddPrincipals(cluster, security, link_secret, &guard_options, &handler_options, &local_passwords);
  std::unique_ptr<PsServer> server(new PsServer(cluster, options, std::move(handler_options),
                                                security,
                                                cancel != nullptr ? cancel : NeverCancelled()));
  server->local_passwords_ = std::move(local_passwords);
  // The ZAP handler first: libzmq admits CURVE clients unchecked while
  // none is bound.
  ASSIGN_OR_RETURN(server->guard_, HandshakeGuard::Create(server->context_, guard_options));
  server->endpoint_ = options.bind_endpoint.empty() ? BindEndpoint(hp) : options.bind_endpoint;
  SocketOptions socket_options;
  socket_options.max_message_bytes = options.max_message_bytes;
  socket_options.linger_ms = options.linger_ms;
  UseCurveServer(security, task.ToString(), &socket_options);
  auto socket = BindRouter(server->context_, server->endpoint_, socket_options);
  if (!socket.ok()) {
    return absl::UnavailableError(
        absl::StrCat(task.ToString(), " (", address, "): ", socket.status().message()));
  }
  server->socket_ = *std::move(socket);
  if (link_secret.has_value()) server->BindLocal(hp.port, *link_secret);
  RETURN_IF_ERROR(server->guard_->Watch(server->socket_));
  RETURN_IF_ERROR(server->OpenTimeline());
  if (options.metrics_port != 0) {
    ASSIGN_OR_RETURN(server->metrics_server_,
                     MetricsServer::Start({options.metrics_host, options.metrics_port},
                                          TaskIdentityLabels(cluster)));
    server->metrics_ = std::make_shared<ShardMetrics>(server->metrics_server_->identity());
    server->metrics_->Publish(server->handler_.Stats());
    server->metrics_server_->Register(server->metrics_);
    LOG(INFO) << task.ToString() << ": metrics for Prometheus on "
              << server->metrics_server_->Describe();
  }
  LOG(INFO) << task.ToString()
            << (security.secure() ? ": CURVE on (keys derived from the job secret)"
                                  : ": --insecure: no authentication, no encryption")
            << ", " << std::max(1, options.io_threads) << " I/O thread(s)";
  return server;
}

PsServer::PsServer(const ClusterSpec& cluster, const PsServerOptions& options,
                   RequestHandlerOptions handler_options, const TransportSecurity& security,
                   const Cancellation* cancel)
    : cluster_(cluster),
      task_(*cluster.task()),
      options_(options),
      cancel_(cancel),
      // 0 (not resolved by AutoIoThreads, as in tests): one.
      context_(NewContext(options.io_threads)),
      update_pool_(std::make_unique<ChunkPool>(options.update_threads - 1)),
      shards_(WithPool(std::move(handler_options), update_pool_.get())),
      handler_(shards_.own()),
      security_(security),
      // One message in pieces per peer (a worker sends one push at a time
      // on its connection), each at most --max_message_mb; room for every
      // worker's twice over, and for two such messages' bytes.
      pieces_(static_cast<size_t>(options.max_message_bytes),
              2 * static_cast<size_t>(options.max_message_bytes),
              std::max(16, 2 * cluster.num_workers())) {}

void PsServer::MaybeStartReplicator() {
  if (replicator_ != nullptr || !handler_.initialized() || handler_.job().ps_replicas() < 1 ||
      cluster_.num_ps() < 2) {
    return;
  }
  const TaskId standby{TaskType::kPs, (task_.index + 1) % cluster_.num_ps()};
  auto hp = ParseHostPort(cluster_.Address(standby));
  if (!hp.ok()) return;  // the spec was checked when it was read
  ReplicatorOptions ro;
  ro.standby_name = absl::StrCat(standby.ToString(), " (", cluster_.Address(standby), ")");
  ro.endpoint = ConnectEndpoint(*hp);
  ro.socket.max_message_bytes = options_.max_message_bytes;
  // A standby silent as long as a dead worker is presumed dead, frozen or
  // dead: the shard goes on without it.
  ro.give_up_s = options_.peer_timeout_s;
  UseCurveClient(security_, task_.ToString(), standby.ToString(), &ro.socket);
  auto r = Replicator::Create(context_, ro, RealClock());
  if (!r.ok()) {
    LOG(ERROR) << task_.ToString() << ": no standby: " << r.status().message();
    return;
  }
  replicator_ = *std::move(r);
  LOG(INFO) << task_.ToString() << ": replicating shard " << task_.index << " to its standby "
            << ro.standby_name;
}

void PsServer::PumpReplicator() {
  if (replicator_ == nullptr) return;
  std::vector<Reply> released;
  replicator_->Pump(handler_, &released);
  Send(&released);
}

absl::Status PsServer::Run() {
  if (cluster_.sparse()) {
    LOG(INFO) << task_.ToString() << " listening on " << endpoint_
              << " (sparse TF_CONFIG: dynamic workers, up to " << cluster_.num_workers()
              << " ranks; the job and its shard count come with the chief's INIT)";
  } else {
    LOG(INFO) << task_.ToString() << " listening on " << endpoint_ << " (job "
              << absl::StrCat(absl::Hex(cluster_.JobId())) << ", " << cluster_.num_workers()
              << " workers, " << cluster_.num_ps() << " ps)";
  }
  if (!local_endpoint_.empty()) {
    LOG(INFO) << task_.ToString() << " also listening on " << local_endpoint_
              << " for the workers of this host (admitted by the job's keys"
              << (security_.secure() ? ")" : ", public without a secret)");
  }
  started_us_ = last_wait_log_us_ = MonotonicMicros();
  for (;;) {
    std::vector<zmq::socket_t*> sockets = {&socket_};
    for (zmq::socket_t* s : guard_->sockets()) sockets.push_back(s);
    const size_t guarded = sockets.size() - 1;  // the guard's, after the ROUTER
    if (replicator_ != nullptr) sockets.push_back(replicator_->socket());
    if (cancel_->cancelled()) {
      return Finish(
          absl::CancelledError(absl::StrCat(task_.ToString(), " stopped by ", cancel_->reason())));
    }
    // --busy_poll_us: looking for up to that long after the last request,
    // and sleeping at once when none came for as long (an idle job).
    const int64_t look_us =
        std::max<int64_t>(0, options_.busy_poll_us - (MonotonicMicros() - last_request_us_));
    std::vector<PollFd> fds;
    if (local_ != nullptr) local_->AddPollFds(&fds);
    auto readable = Poll(sockets, absl::MakeSpan(fds), kPollMs, static_cast<int>(look_us));
    // The guard first: a handshake waiting on ZAP holds a peer up. Served
    // when one of its sockets has something, or a second after it last was
    // (its deferred logs): an empty receive costs ZeroMQ's system calls on
    // every request.
    const int64_t now_us = MonotonicMicros();
    if (!readable.ok() || now_us - guard_served_us_ > kGuardIdleServeUs ||
        std::any_of(readable->begin() + 1, readable->begin() + 1 + guarded,
                    [](bool r) { return r; })) {
      guard_->Serve();
      guard_served_us_ = now_us;
      handler_.SetHandshakesRefused(HandshakesRefused());
    }
    if (readable.ok() && (*readable)[0]) {
      ServeReadable();
      last_request_us_ = MonotonicMicros();
    }
    if (readable.ok() && local_ != nullptr) ServeLocal(fds);
    PumpReplicator();
    ExpirePieces();
    CheckLiveness();
    PublishMetrics(/*now=*/false);
    if (shards_.shutdown_requested()) return Finish(absl::OkStatus());
    if (!handler_.failure().ok() &&
        MonotonicMicros() - failed_us_ > static_cast<int64_t>(options_.failure_grace_s * 1e6)) {
      return Finish(handler_.failure());
    }
  }
}

void PsServer::ServeReadable() {
  for (int i = 0; i < kMaxMessagesPerWake; ++i) {
    RoutedMessage routed = ReceiveRouted(socket_);
    if (!routed.message.ok() && absl::IsUnavailable(routed.message.status()) &&
        routed.identity.empty()) {
      return;  // nothing more queued
    }
    if (LocalLinks::IsLinkRoute(routed.identity)) {
      // A ZeroMQ peer that set its routing id to a link's: its replies
      // would go down that link. Counted, never answered.
      std::vector<Reply> dropped;
      handler_.HandleMalformed({routed.identity, routed.user_id},
                               absl::InvalidArgumentError("a routing id of the Unix socket's"),
                               &dropped);
      LOG_FIRST_N(WARNING, 20) << task_.ToString() << ": dropped a request from "
                               << (routed.user_id.empty() ? "a peer" : routed.user_id)
                               << " whose ZeroMQ routing id is that of a Unix socket link";
      continue;
    }
    Process(std::move(routed));
  }
}

int64_t PsServer::HandshakesRefused() const {
  return guard_->refused() + (local_ != nullptr ? local_->refused() : 0);
}

void PsServer::ServeLocal(absl::Span<const PollFd> polled) {
  std::vector<RoutedMessage> requests;
  // Each link's bytes a wake at most about a large message's pieces'
  // worth: the others, ZeroMQ's socket and the guard wait meanwhile.
  constexpr size_t kLinkBudgetBytes = size_t{16} << 20;
  local_->Serve(polled, kLinkBudgetBytes, &requests);
  handler_.SetHandshakesRefused(HandshakesRefused());
  // Links closed: their partial messages in pieces are given up now (the
  // closes are not left to pile up). Not the guard's: taking those reads
  // ZeroMQ's monitor sockets, a cost on every wake.
  DropClosedLinks();
  if (requests.empty()) return;
  for (RoutedMessage& r : requests) Process(std::move(r));
  last_request_us_ = MonotonicMicros();
}

void PsServer::Process(RoutedMessage routed) {
  const Peer peer{std::move(routed.identity), std::move(routed.user_id)};
  std::vector<Reply> replies;
  handler_.CountBytes(static_cast<int64_t>(routed.wire_bytes), 0);
  if (routed.message.ok() && IsPiece(routed.message->header)) {
    // Closed connections first: their partial messages are given up
    // before this piece's (HandshakeGuard::TakeClosed says why in order).
    DropClosedConnections();
    const PieceJudge judge = [this](const Peer& p, const proto::Header& first) {
      return shards_.AdmitPieces(p, first);
    };
    absl::StatusOr<std::optional<Message>> whole =
        AssemblePiece(pieces_, handler_, peer, *std::move(routed.message), judge,
                      {routed.fd, MonotonicMicros()}, &replies);
    handler_.SetPartialMessagesDropped(pieces_.dropped_total());
    if (!whole.ok()) {
      LOG_FIRST_N(WARNING, 20) << task_.ToString() << ": refused a piece"
                               << (peer.user_id.empty() ? "" : " from " + peer.user_id) << ": "
                               << whole.status().message();
    }
    if (!whole.ok() || !whole->has_value()) return Send(&replies);  // more pieces due
    routed.message = **std::move(whole);
  }
  if (!routed.message.ok()) {
    LOG_FIRST_N(WARNING, 20) << task_.ToString() << ": malformed message (" << routed.wire_bytes
                             << " bytes" << (peer.user_id.empty() ? "" : " from " + peer.user_id)
                             << "): " << routed.message.status().message();
    handler_.HandleMalformed(peer, routed.message.status(), &replies);
  } else {
    const int64_t start = trace_ != nullptr ? UnixMicros() : 0;
    const int64_t updates_before = handler_.initialized() ? handler_.updates() : 0;
    const RequestHandler* by = shards_.Handle(peer, *routed.message, &replies);
    if (by != &handler_) {
      // An adopted shard has no standby (its own ps is away); nothing of
      // it is held back.
      Send(&replies);
      return;
    }
    if (trace_ != nullptr) TraceRequest(routed.message->header.type(), start, updates_before);
    MaybeStartReplicator();
    if (replicator_ != nullptr) replicator_->Hold(handler_, &replies);
  }
  Send(&replies);
}

void PsServer::DropClosedConnections() {
  for (const int fd : guard_->TakeClosed()) pieces_.DropConnection(fd);
  DropClosedLinks();
  handler_.SetPartialMessagesDropped(pieces_.dropped_total());
}

void PsServer::DropClosedLinks() {
  if (local_ == nullptr) return;
  const std::vector<int> closed = local_->TakeClosed();
  for (const int fd : closed) pieces_.DropConnection(fd);
  if (!closed.empty()) handler_.SetPartialMessagesDropped(pieces_.dropped_total());
}

void PsServer::ExpirePieces() {
  if (pieces_.partials() == 0) return;
  DropClosedConnections();
  // A worker sends a message's pieces back to back: one whose pieces stop
  // for as long as a silent worker is presumed dead is given up.
  pieces_.Expire(MonotonicMicros(), static_cast<int64_t>(options_.peer_timeout_s * 1e6));
  handler_.SetPartialMessagesDropped(pieces_.dropped_total());
  std::vector<Reply> replies;
  for (PieceAssembler::Dropped& d : pieces_.TakeDropped()) {
    if (!d.peer.empty())
      replies.push_back({std::move(d.peer), ErrorReply(d.header, d.why), false, false});
  }
  Send(&replies);
}

PsServer::~PsServer() {
  local_.reset();
  if (!local_endpoint_.empty()) RemoveLocalEndpoint(local_endpoint_);
}

void PsServer::BindLocal(int port, const JobSecret& link_secret) {
  const std::string dir = LocalDir(link_secret);
  absl::Status s = PrepareLocalDir(dir);
  const std::string endpoint = LocalEndpoint(dir, task_.ToString(), port);
  absl::StatusOr<std::unique_ptr<LocalLinks>> links =
      s.ok() ? absl::UnavailableError("not listening") : s;
  if (s.ok()) {
    if (const int stale = RemoveStaleSockets(dir); stale > 0) {
      LOG(INFO) << task_.ToString() << ": removed " << stale
                << " socket file(s) of ps processes that are gone from " << dir;
    }
    if (const int stale = RemoveStaleJobDirs(dir); stale > 0) {
      LOG(INFO) << task_.ToString() << ": removed " << stale
                << " directories of other jobs whose ps processes are gone";
    }
    links = LocalLinks::Listen(LocalPath(endpoint), local_passwords_, options_.max_message_bytes);
    if (!links.ok()) {
      // A ps of this host that ended in between may have removed the
      // directory with its own socket: once more.
      s = PrepareLocalDir(dir);
      links = s.ok() ? LocalLinks::Listen(LocalPath(endpoint), local_passwords_,
                                          options_.max_message_bytes)
                     : s;
    }
  }
  absl::StatusOr<LocalFileId> file = links.ok() ? LocalFileIdOf(endpoint) : links.status();
  if (!file.ok()) {
    LOG(WARNING) << task_.ToString() << ": no Unix socket for the workers of this host ("
                 << file.status().message() << "); they reach it over TCP"
                 << (security_.secure() ? " with CURVE" : "");
    if (links.ok()) RemoveLocalEndpoint(endpoint);
    return;
  }
  local_ = *std::move(links);
  local_endpoint_ = endpoint;
  local_file_ = *file;
}

void PsServer::Send(std::vector<Reply>* replies) {
  for (Reply& r : *replies) {
    if (r.header.has_error() && r.header.error().code() != 0) {
      const std::string from = r.header.type() == proto::REPLICATE
                                   ? std::string("its primary")
                                   : absl::StrCat("rank ", r.header.rank());
      LOG_FIRST_N(WARNING, 50) << task_.ToString() << ": refused "
                               << proto::MessageType_Name(r.header.type()) << " from " << from
                               << ": " << r.header.error().message();
    }
    const proto::MessageType type = r.header.type();
    if ((type == proto::HEARTBEAT || type == proto::STATS) && r.header.error().code() == 0) {
      for (const proto::ShardPlacement& p : shards_.Placements()) *r.header.add_hosted() = p;
      if (type == proto::HEARTBEAT && !local_endpoint_.empty()) {
        r.header.set_local_endpoint(local_endpoint_);
        r.header.set_local_pid(::getpid());
        r.header.set_local_dev(local_file_.dev);
        r.header.set_local_inode(local_file_.inode);
      }
    }
    zmq::message_t body = ReplyBody(r);
    size_t body_bytes = body.size();
    // Large parameters and embedding rows in pieces (transport/pieces.h),
    // each piece without a copy as the whole would be.
    const bool params = r.with_params && r.payload == nullptr;
    const bool rows = type == proto::EMBEDDING_PULL && r.payload != nullptr;
    // A link (the Unix socket) takes its payloads whole.
    const bool link = LocalLinks::IsLinkRoute(r.peer);
    PieceLayout layout =
        (params || rows) && !link ? PiecesFor(body_bytes, security_.secure()) : PieceLayout();
    absl::Status fits = FitsOneMessage(
        body_bytes, options_.max_message_bytes,
        [&] { return absl::StrCat("the answer to this ", proto::MessageType_Name(type)); },
        "ask for less at once (fewer ids a pull), or give every task a larger "
        "--max_message_mb");
    if (!fits.ok()) {
      // The receiver would drop it (its ZeroMQ the connection, on a whole
      // frame; its client, on pieces adding up to more), and its request
      // would wait or fail without saying why: a refusal says why.
      r.header = ErrorReply(r.header, std::move(fits));
      r.with_params = false;
      r.payload = nullptr;
      body = CopyFrame({});
      body_bytes = 0;
      layout = PieceLayout();  // the refusal goes whole
      LOG_FIRST_N(WARNING, 20) << task_.ToString() << ": " << r.header.error().message();
    }
    absl::Status s;
    if (link) {
      s = local_ != nullptr ? local_->Send(r.peer, r.header, std::move(body))
                            : absl::UnavailableError("no Unix socket here");
    } else if (layout.parts <= 1) {
      s = SendRoutedFrame(socket_, r.peer, r.header, std::move(body));
    } else if (rows) {
      s = SendPieces(r.peer, r.header, layout, body_bytes, [&](size_t begin, size_t count) {
        return SharedFrame(r.payload, begin, count);
      });
    } else {
      // ReplyBody made a reply whose shard is not served here a refusal.
      const RequestHandler& shard = *shards_.Serving(r.header.shard_index());
      s = SendPieces(r.peer, r.header, layout, body_bytes, [&](size_t begin, size_t count) {
        return shard.ParamsFrame(begin, count, r.previous_params);
      });
    }
    if (!s.ok() && r.notice) continue;  // that worker is gone: nobody to tell
    if (!s.ok()) {
      ++send_failures_;
      LOG_FIRST_N(WARNING, 20) << task_.ToString() << ": cannot answer rank " << r.header.rank()
                               << ": " << s.message();
      continue;
    }
    handler_.CountBytes(0,
                        static_cast<int64_t>(layout.parts * r.header.ByteSizeLong() + body_bytes));
  }
}

absl::Status PsServer::SendPieces(
    absl::string_view identity, const proto::Header& header, const PieceLayout& layout,
    size_t bytes, absl::FunctionRef<zmq::message_t(size_t begin, size_t count)> frame) {
  proto::Header piece = header;
  piece.set_parts(layout.parts);
  piece.set_piece_bytes(layout.piece_bytes);
  for (uint32_t k = 0; k < layout.parts; ++k) {
    piece.set_part(k);
    const size_t begin = k * layout.piece_bytes / sizeof(float);
    const size_t count = layout.Bytes(k, bytes) / sizeof(float);
    RETURN_IF_ERROR(SendRoutedFrame(socket_, identity, piece, frame(begin, count)));
  }
  return absl::OkStatus();
}

zmq::message_t PsServer::ReplyBody(Reply& r) {
  if (r.payload != nullptr && !r.payload->empty()) {
    return SharedFrame(r.payload, 0, r.payload->size());
  }
  if (!r.with_params) return CopyFrame({});
  // Parameters go out from the shard's own buffer, without a copy
  // (RequestHandler::ParamsFrame).
  const RequestHandler* shard = shards_.Serving(r.header.shard_index());
  if (shard != nullptr) return shard->ParamsFrame(r.previous_params);
  // Cannot happen: a reply with parameters comes from a shard served here.
  // Sent as a refusal rather than without its parameters.
  LOG(ERROR) << task_.ToString() << ": no shard " << r.header.shard_index()
             << " here for a reply with parameters";
  r.header = ErrorReply(r.header, absl::InternalError("the shard is not served here"));
  r.with_params = false;
  return CopyFrame({});
}

void PsServer::FailJob(const std::string& why) {
  std::vector<Reply> replies;
  handler_.Fail(absl::AbortedError(why), &replies);
  failed_us_ = MonotonicMicros();
  LOG(ERROR) << task_.ToString() << ": " << handler_.failure().message();
  Send(&replies);
}

std::string PsServer::Describe(const TaskId& task) const {
  // A sparse spec does not know the other tasks' addresses.
  if (!cluster_.Contains(task)) return task.ToString();
  return absl::StrCat(task.ToString(), " at ", cluster_.Address(task));
}

void PsServer::CheckLiveness() {
  const int64_t now = MonotonicMicros();
  if (!handler_.initialized()) {
    if (!handler_.failure().ok()) return;
    const std::string chief = Describe(cluster_.ChiefTask());
    if ((now - started_us_) * 1e-6 > options_.register_timeout_s) {
      return FailJob(absl::StrCat(
          "the chief (", chief, ") did not initialise the parameters within ",
          options_.register_timeout_s,
          " s of this ps's start (--register_timeout_s): is it running?",
          cluster_.sparse() ? " In a dynamic-worker job the chief is worker 0: keep at least one "
                              "Worker replica, and worker 0 with it"
                            : ""));
    }
    if (now - last_wait_log_us_ > kWaitLogIntervalUs) {
      LOG(INFO) << task_.ToString() << ": waiting for the chief (" << chief
                << ") to initialise the parameters (up to " << options_.register_timeout_s
                << " s from this ps's start, --register_timeout_s)";
      last_wait_log_us_ = now;
    }
    return;
  }
  if (init_us_ == 0) init_us_ = now;
  if (!handler_.failure().ok()) return;
  std::vector<Reply> replies;
  if (shards_.adopted() != nullptr) {
    shards_.adopted()->DeclareSilentDead(options_.peer_timeout_s, &replies);
    Send(&replies);  // an adopted shard has no standby: nothing is held back
  }
  for (int rank : handler_.DeclareSilentDead(options_.peer_timeout_s, &replies)) {
    const TaskId task = cluster_.TaskForRank(rank);
    LOG(WARNING) << task_.ToString() << ": " << Describe(task) << " sent nothing for "
                 << options_.peer_timeout_s
                 << (cluster_.sparse()
                         ? " s: presumed gone; not waited for until it joins again"
                         : " s: presumed dead; not waited for until it is heard from again");
  }
  // The pulls a dead rank released show the shard's state, as any reply.
  if (replicator_ != nullptr) replicator_->Hold(handler_, &replies);
  Send(&replies);
  const WorkerTable& workers = handler_.workers();
  all_dead_since_us_ =
      workers.num_alive() > 0 ? 0 : (all_dead_since_us_ ? all_dead_since_us_ : now);
  if (all_dead_since_us_ != 0 && (now - all_dead_since_us_) * 1e-6 > options_.register_timeout_s) {
    return FailJob(absl::StrCat("no worker has been alive for ", options_.register_timeout_s,
                                " s; the job cannot continue"));
  }
  // Dynamic workers: nobody is missing, the absent have not joined.
  if (cluster_.sparse()) return;
  std::vector<std::string> missing;
  for (int rank = 0; rank < workers.size(); ++rank) {
    if (!workers.registered(rank) && !workers.dead(rank)) {
      missing.push_back(cluster_.TaskForRank(rank).ToString());
    }
  }
  if (missing.empty() || handler_.restored()) return;
  if ((now - init_us_) * 1e-6 > options_.register_timeout_s) {
    FailJob(absl::StrCat(absl::StrJoin(missing, ", "), " did not register within ",
                         options_.register_timeout_s,
                         " s of the chief's INIT; the job cannot continue"));
  } else if (now - last_wait_log_us_ > kWaitLogIntervalUs) {
    LOG(INFO) << task_.ToString() << ": waiting for " << absl::StrJoin(missing, ", ")
              << " to register";
    last_wait_log_us_ = now;
  }
}

absl::Status PsServer::OpenTimeline() {
  if (options_.timeline_dir.empty()) return absl::OkStatus();
  const std::string base = absl::StrCat(options_.timeline_dir, "/ps", task_.index);
  // A restarted ps keeps its earlier process's file: a name of its own.
  const std::string path =
      FileExists(base + ".json") ? absl::StrCat(base, ".", UnixMicros(), ".json") : base + ".json";
  // pids: workers are rank + 1; a ps is kTracePsPid0 + its index.
  ASSIGN_OR_RETURN(trace_, TraceWriter::Open(path, kTracePsPid0 + task_.index, task_.ToString()));
  return trace_->NameThread(kTraceShardTid, absl::StrCat("shard ", task_.index));
}

void PsServer::TraceRequest(proto::MessageType type, int64_t start_unix_us,
                            int64_t updates_before) {
  const bool push = type == proto::PUSH || type == proto::PUSH_PULL;
  if (!handler_.initialized() || !(push || type == proto::SAVE || type == proto::RESTORE)) return;
  const int64_t end = UnixMicros();
  absl::Status s;
  if (push && handler_.updates() > updates_before) {
    const bool sync = handler_.job().mode() == proto::SYNC;
    if (sync && gather_start_unix_us_ != 0) {
      s.Update(trace_->Complete("gather", "ps", kTraceShardTid, gather_start_unix_us_,
                                start_unix_us - gather_start_unix_us_,
                                absl::StrCat("\"version\": ", handler_.version())));
    }
    gather_start_unix_us_ = 0;
    s.Update(trace_->Complete("apply", "ps", kTraceShardTid, start_unix_us, end - start_unix_us,
                              absl::StrCat("\"version\": ", handler_.version())));
  } else if (push) {
    if (gather_start_unix_us_ == 0) gather_start_unix_us_ = start_unix_us;
  } else {
    s.Update(trace_->Complete(type == proto::SAVE ? "save" : "restore", "ps", kTraceShardTid,
                              start_unix_us, end - start_unix_us));
  }
  if (s.ok() && MonotonicMicros() - trace_flushed_us_ > kTraceFlushUs) {
    trace_flushed_us_ = MonotonicMicros();
    s = trace_->Flush();
  }
  if (!s.ok()) {
    // The timeline is a diagnostic: a full disk ends it, not the shard.
    LOG(ERROR) << task_.ToString() << ": timeline stopped: " << s.message();
    trace_.reset();
  }
}

void PsServer::PublishMetrics(bool now) {
  if (metrics_ == nullptr) return;
  const int64_t t = MonotonicMicros();
  if (!now && t - metrics_published_us_ < kMetricsPublishUs) return;
  metrics_published_us_ = t;
  metrics_->Publish(handler_.Stats());
}

absl::Status PsServer::Finish(absl::Status status) {
  guard_->Serve();
  guard_->FlushLogs();
  handler_.SetHandshakesRefused(HandshakesRefused());
  std::vector<Reply> replies;
  if (replicator_ != nullptr) replicator_->ReleaseAll(&replies);
  if (!status.ok()) handler_.AbortParked(status, &replies);
  if (!status.ok() && shards_.adopted() != nullptr)
    shards_.adopted()->AbortParked(status, &replies);
  Send(&replies);
  // The last replies on the Unix socket's links go out before the ps does,
  // as ZeroMQ's linger sends its socket's.
  if (local_ != nullptr) local_->Linger(options_.linger_ms);
  PublishMetrics(/*now=*/true);
  if (trace_ != nullptr) {
    if (absl::Status t = trace_->Flush(); !t.ok()) LOG(ERROR) << t.message();
  }
  const proto::ShardStats s = handler_.Stats();
  LOG(INFO) << task_.ToString() << " done: version " << s.version() << ", " << s.updates_applied()
            << " updates, " << s.gradients_received() << " gradients received, "
            << s.stale_gradients_dropped() << " stale and " << s.late_gradients_dropped()
            << " late dropped, " << s.malformed_requests() << " malformed and "
            << s.rejected_requests() << " rejected requests (" << s.unauthorized_requests()
            << " unauthorised, " << s.duplicate_requests() << " repeats), "
            << s.handshakes_refused() << " handshakes refused"
            << (s.replications() == 0
                    ? std::string()
                    : absl::StrFormat("; %d states to its standby (%.1f MB)", s.replications(),
                                      static_cast<double>(s.replication_bytes()) * 1e-6));
  return status;
}

}  // namespace pstrain

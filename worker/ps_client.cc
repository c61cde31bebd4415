#include "worker/ps_client.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/optimizer.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "transport/local_links.h"
#include "transport/local_route.h"
#include "transport/pieces.h"
#include "transport/transport.h"
#include "worker/shard_routes.h"

namespace pstrain {
namespace {

constexpr int kPollSliceMs = 100;
// How long SHUTDOWN waits for every ps (the chief's last request).
constexpr double kShutdownTimeoutS = 30.0;
// How long it waits for a ps that serves no shard and was not heard from.
constexpr double kUnheardShutdownTimeoutS = 5.0;

proto::TaskType ProtoTaskType(TaskType t) {
  switch (t) {
    case TaskType::kChief:
      return proto::CHIEF;
    case TaskType::kWorker:
      return proto::WORKER;
    case TaskType::kPs:
      return proto::PS;
    case TaskType::kEvaluator:
      return proto::EVALUATOR;
  }
  return proto::TASK_TYPE_UNSPECIFIED;
}

absl::Span<const char> AsBytes(absl::Span<const float> floats) {
  return {reinterpret_cast<const char*>(floats.data()), floats.size() * sizeof(float)};
}

// Shard k's gradient on its request.
void SetPushPayload(const EncodedShard& grad, int num_examples, proto::Header* h,
                    absl::Span<const char>* payload) {
  h->set_num_examples(num_examples);
  h->set_encoding(grad.encoding);
  h->set_topk_count(grad.topk_count);
  *payload = grad.bytes;
}

int64_t DeadlineFrom(double timeout_s) {
  return timeout_s > 0 ? MonotonicMicros() + static_cast<int64_t>(timeout_s * 1e6) : INT64_MAX;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(const ClusterSpec& cluster,
                                                           const TaskId& self,
                                                           const ShardPlan& plan,
                                                           const PsClientOptions& options) {
  if (plan.num_shards() != cluster.num_ps()) {
    return absl::InvalidArgumentError(absl::StrCat("the shard plan has ", plan.num_shards(),
                                                   " shards for ", cluster.num_ps(), " ps tasks"));
  }
  if (options.io_threads < 1 || options.io_threads > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--io_threads must be 1 to 16, not ", options.io_threads));
  }
  std::unique_ptr<PsClient> client(new PsClient(cluster, self, plan, options));
  std::vector<HeartbeatTarget> targets;
  for (int k = 0; k < cluster.num_ps(); ++k) {
    const TaskId ps{TaskType::kPs, k};
    ASSIGN_OR_RETURN(const HostPort hp, ParseHostPort(cluster.Address(ps)));
    const std::string endpoint = ConnectEndpoint(hp);
    SocketOptions socket_options;
    socket_options.max_message_bytes = options.max_message_bytes;
    UseCurveClient(options.security, self.ToString(), ps.ToString(), &socket_options);
    ASSIGN_OR_RETURN(zmq::socket_t s, ConnectDealer(client->context_, endpoint, socket_options));
    client->sockets_.push_back(std::move(s));
    client->used_.push_back(false);
    client->links_.push_back(nullptr);
    client->placing_request_.push_back(0);
    targets.push_back({client->ShardName(k), endpoint, socket_options});
  }
  HeartbeatOptions hb;
  hb.interval_s = options.heartbeat_interval_s;
  hb.peer_timeout_s = options.peer_timeout_s;
  client->heartbeat_ = std::make_unique<HeartbeatMonitor>(
      client->context_, std::move(targets), client->BaseHeader(proto::HEARTBEAT, 0), hb);
  return client;
}

PsClient::PsClient(const ClusterSpec& cluster, const TaskId& self, const ShardPlan& plan,
                   const PsClientOptions& options)
    : cluster_(cluster),
      self_(self),
      rank_(cluster.WorkerRank(self)),
      plan_(plan),
      options_(options),
      cancel_(options.cancel != nullptr ? options.cancel : NeverCancelled()),
      session_(RandomId()),
      instances_(plan.num_shards(), 0),
      route_(plan.num_shards()),
      pinned_(plan.num_shards(), -1),
      context_(NewContext(options.io_threads)) {
  for (int k = 0; k < plan.num_shards(); ++k) route_[k] = k;
}

PsClient::~PsClient() = default;

std::string PsClient::ShardName(int shard) const {
  const TaskId ps{TaskType::kPs, shard};
  return absl::StrCat(ps.ToString(), " (", cluster_.Address(ps), ")");
}

proto::Header PsClient::BaseHeader(proto::MessageType type, int shard) const {
  proto::Header h;
  h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h.set_job_id(cluster_.JobId());
  h.set_type(type);
  h.mutable_sender()->set_type(ProtoTaskType(self_.type));
  h.mutable_sender()->set_index(self_.index);
  h.set_rank(rank_);
  h.set_session(session_);
  h.set_plan_fingerprint(plan_.fingerprint());
  h.set_shard_index(shard);
  h.set_num_shards(plan_.num_shards());
  h.set_range_begin(static_cast<uint64_t>(plan_.range(shard).begin));
  h.set_range_end(static_cast<uint64_t>(plan_.range(shard).end));
  h.set_encoding(proto::F32);
  return h;
}

absl::Status PsClient::WaitForServers(double timeout_s) {
  if (timeout_s < 0) timeout_s = options_.connect_timeout_s;
  const int64_t start = MonotonicMicros();
  int64_t last_log = start;
  for (;;) {
    RETURN_IF_ERROR(heartbeat_->status());
    const std::vector<PsView> views = heartbeat_->Views();
    std::vector<int> routes = ChooseRoutes(plan_.num_shards(), views);
    KeepPinnedRoutes(views, &pinned_, &routes);
    std::vector<std::string> missing;
    unserved_.clear();
    for (int k = 0; k < plan_.num_shards(); ++k) {
      if (routes[k] >= 0) continue;
      unserved_.push_back(k);
      missing.push_back(ShardName(k));
    }
    if (missing.empty()) {
      for (int k = 0; k < plan_.num_shards(); ++k) {
        if (routes[k] != k && routes[k] != route_[k]) {
          LOG(WARNING) << "shard " << k << " is served by " << ShardName(routes[k])
                       << ", its standby, while " << ShardName(k) << " is away";
        }
      }
      route_ = routes;
      routed_ = true;
      UseLocalRoutes(heartbeat_->LocalSockets());
      return absl::OkStatus();
    }
    if (cancel_->cancelled()) {
      return absl::CancelledError(
          absl::StrCat("interrupted by ", cancel_->reason(), " while connecting"));
    }
    const double waited = SecondsSince(start);
    if (waited > timeout_s) {
      return absl::UnavailableError(absl::StrCat("cannot reach ", absl::StrJoin(missing, ", "),
                                                 " after ", static_cast<int>(timeout_s),
                                                 " s of retries (is the ps running, and is "
                                                 "the address right?)"));
    }
    if (MonotonicMicros() - last_log > 5'000'000) {
      LOG(INFO) << "waiting for " << absl::StrJoin(missing, ", ") << " ("
                << static_cast<int>(waited) << " s of " << static_cast<int>(timeout_s) << " s)";
      last_log = MonotonicMicros();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void PsClient::UseLocalRoutes(const std::vector<LocalSocket>& sockets) {
  if (!options_.colocated_ipc || !cluster_.Contains(self_)) return;
  const std::optional<JobSecret> secret = LinkSecret(options_.security.secret, cluster_);
  if (!secret.has_value()) return;
  absl::StatusOr<HostPort> self = ParseHostPort(cluster_.Address(self_));
  if (!self.ok()) return;
  const std::string dir = LocalDir(*secret);
  for (size_t p = 0; p < sockets.size() && p < sockets_.size(); ++p) {
    if (links_[p] != nullptr || used_[p] || sockets[p].endpoint.empty()) continue;
    const TaskId ps{TaskType::kPs, static_cast<int>(p)};
    absl::StatusOr<HostPort> there = ParseHostPort(cluster_.Address(ps));
    if (!there.ok() || !SameHost(*self, *there)) continue;
    const absl::Status usable = CheckLocalEndpoint(sockets[p].endpoint, dir, sockets[p].file);
    absl::StatusOr<std::unique_ptr<StreamLink>> link =
        usable.ok() ? ConnectLocal(LocalPath(sockets[p].endpoint), sockets[p].pid, self_.ToString(),
                                   secret->LocalPassword(self_.ToString()),
                                   options_.max_message_bytes, kLocalHelloTimeoutS)
                    : usable;
    if (!link.ok()) {
      LOG(INFO) << ShardName(static_cast<int>(p)) << ": over TCP"
                << (options_.security.secure() ? " with CURVE (" : " (") << link.status().message()
                << ")";
      continue;
    }
    links_[p] = *std::move(link);
    LOG(INFO) << ShardName(static_cast<int>(p)) << ": over its Unix socket " << sockets[p].endpoint
              << " (this host; not encrypted)";
  }
}

std::vector<int> PsClient::ShardsWhoseHomeIsBack() const {
  std::vector<int> back;
  bool away = false;
  for (int k = 0; k < plan_.num_shards(); ++k) away = away || route_[k] != k;
  if (!away) return back;
  const std::vector<PsView> views = heartbeat_->Views();
  for (int k = 0; k < plan_.num_shards(); ++k) {
    if (route_[k] != k && k < static_cast<int>(views.size()) && views[k].answered)
      back.push_back(k);
  }
  return back;
}

absl::Status PsClient::CheckWaiting(int64_t deadline_us, proto::MessageType type) const {
  if (cancel_->cancelled()) {
    return absl::CancelledError(absl::StrCat("interrupted by ", cancel_->reason(), " during ",
                                             proto::MessageType_Name(type)));
  }
  if (watch_heartbeat_) {
    RETURN_IF_ERROR(heartbeat_->status());
    RETURN_IF_ERROR(CheckRoutes());
  }
  if (MonotonicMicros() > deadline_us) {
    return absl::DeadlineExceededError(
        absl::StrCat(proto::MessageType_Name(type),
                     " got no answer within --rpc_timeout_s=", options_.rpc_timeout_s));
  }
  return absl::OkStatus();
}

absl::Status PsClient::CheckRoutes() const {
  if (!routed_) return absl::OkStatus();  // the routes are not the views' yet
  const std::vector<PsView> views = heartbeat_->Views();
  std::vector<int> chosen = ChooseRoutes(plan_.num_shards(), views);
  std::vector<int> pinned = pinned_;
  KeepPinnedRoutes(views, &pinned, &chosen);
  const int k = FirstOutrankedRoute(route_, chosen, views);
  if (k < 0) return absl::OkStatus();
  const int64_t held = ListedTerm(views[route_[k]], k);
  const std::string why = absl::StrCat(
      "shard ", k, " is served at placement term ", ListedTerm(views[chosen[k]], k), " by ",
      ShardName(chosen[k]), "; this worker sends it to ", ShardName(route_[k]), ", which ",
      held < 0 ? std::string("does not list it") : absl::StrCat("lists term ", held),
      ": it moved while that ps was away");
  LOG(WARNING) << why;
  return RejoinError(why);
}

absl::Status PsClient::SendCall(Call& call, int64_t deadline_us) {
  call.header.set_request_id(next_request_id_++);
  call.pieces_in = 0;
  const proto::MessageType type = call.header.type();
  if (step_settings_.has_value() && (type == proto::PUSH || type == proto::PUSH_PULL)) {
    *call.header.mutable_step_settings() = *step_settings_;
  }
  // A large gradient in pieces (transport/pieces.h): under CURVE the ps
  // decrypts one while the next is encrypted here.
  // A link takes its payloads whole.
  const PieceLayout layout =
      links_[call.ps()] == nullptr && (type == proto::PUSH || type == proto::PUSH_PULL ||
                                       type == proto::REDUCE || type == proto::EMBEDDING_PUSH)
          ? PiecesFor(call.payload.size(), options_.security.secure())
          : PieceLayout();
  // The ps would refuse it (its ZeroMQ dropping the connection on a whole
  // frame, its assembler the pieces), and the call wait or fail later.
  RETURN_IF_ERROR(FitsOneMessage(
      call.payload.size(), options_.max_message_bytes,
      [&] { return absl::StrCat(ShardName(call.shard), ": this ", proto::MessageType_Name(type)); },
      "send less at once (fewer ids a step), or give every task a larger --max_message_mb"));
  if (layout.parts <= 1) {
    return SendMessage(call, call.header, call.payload, deadline_us);
  }
  proto::Header piece = call.header;
  piece.set_parts(layout.parts);
  piece.set_piece_bytes(layout.piece_bytes);
  for (uint32_t k = 0; k < layout.parts; ++k) {
    piece.set_part(k);
    RETURN_IF_ERROR(SendMessage(
        call, piece,
        call.payload.subspan(k * layout.piece_bytes, layout.Bytes(k, call.payload.size())),
        deadline_us));
    ++pieces_sent_;
  }
  return absl::OkStatus();
}

absl::Status PsClient::SendMessage(const Call& call, const proto::Header& header,
                                   absl::Span<const char> payload, int64_t deadline_us) {
  used_[call.ps()] = true;
  if (links_[call.ps()] != nullptr) return SendOnLink(call, header, payload, deadline_us);
  for (int64_t backoff_us = 1000;; backoff_us = std::min<int64_t>(backoff_us * 2, 100'000)) {
    const absl::Status s = SendRequestBytes(sockets_[call.ps()], header, payload, true);
    if (s.ok()) {
      sent_bytes_ += static_cast<int64_t>(header.ByteSizeLong() + payload.size());
      return s;
    }
    // Named only on the way out: a string per request is a cost of every
    // round trip.
    const std::string type = proto::MessageType_Name(header.type());
    if (!absl::IsUnavailable(s)) {
      return absl::Status(s.code(),
                          absl::StrCat(ShardName(call.shard), ": ", type, ": ", s.message()));
    }
    // Queue full: the heartbeat decides when to give up.
    if (absl::Status w = CheckWaiting(deadline_us, header.type()); !w.ok()) {
      return absl::Status(w.code(), absl::StrCat(ShardName(call.shard), ": ", w.message()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
  }
}

absl::Status PsClient::SendOnLink(const Call& call, const proto::Header& header,
                                  absl::Span<const char> payload, int64_t deadline_us) {
  StreamLink& link = *links_[call.ps()];
  // Written whole before this returns, as the ps reads it (its event loop
  // reads without blocking, whatever it writes): no byte of `payload` is
  // left for later, when the caller may have let it go.
  link.writer().QueueBorrowed(header, payload);
  for (;;) {
    if (absl::Status s = link.Flush(); !s.ok()) {
      // The ps is gone. Said by the wait for its reply, as over ZeroMQ
      // (whose sends only queue): the step's requests to the other ps
      // still go out, and what they apply is the step's (a rejoin
      // finishes it: worker/trainer.h).
      link.Break();
      return absl::OkStatus();
    }
    if (link.writer().empty()) break;
    PollFd fd{link.fd(), POLLOUT, 0};
    auto polled = Poll({}, absl::MakeSpan(&fd, 1), kPollSliceMs);
    if (polled.ok() && fd.revents != 0) continue;
    if (absl::Status w = CheckWaiting(deadline_us, header.type()); !w.ok()) {
      link.Break();  // half a frame on the stream: the link cannot go on
      return absl::Status(w.code(), absl::StrCat(ShardName(call.shard), ": ", w.message()));
    }
  }
  sent_bytes_ += static_cast<int64_t>(header.ByteSizeLong() + payload.size());
  return absl::OkStatus();
}

absl::Status PsClient::TakePiece(Call& call, const Message& m) {
  const proto::Header& h = m.header;
  // Named only when something is wrong (a string per reply is a cost of
  // every round trip).
  const auto what = [&] {
    return absl::StrCat(ShardName(call.shard), " ", proto::MessageType_Name(call.header.type()));
  };
  if (absl::Status s = CheckPiece(h, m.payload_bytes()); !s.ok()) {
    return absl::DataLossError(absl::StrCat(what(), ": ", s.message()));
  }
  if (call.pieces_in == 0) {
    call.parts = h.parts();
    call.piece_bytes = h.piece_bytes();
  }
  if (h.part() != call.pieces_in || h.parts() != call.parts ||
      h.piece_bytes() != call.piece_bytes) {
    return absl::DataLossError(absl::StrCat(what(), ": reply piece ", h.part(), " of ", h.parts(),
                                            " where piece ", call.pieces_in, " of ", call.parts,
                                            " was due"));
  }
  const size_t offset = static_cast<size_t>(h.part()) * h.piece_bytes();
  const size_t bytes = m.payload_bytes();
  const bool last = h.part() + 1 == h.parts();
  if (call.raw != nullptr) {
    if (offset + bytes > static_cast<size_t>(options_.max_message_bytes)) {
      return absl::DataLossError(
          absl::StrCat(what(), ": reply pieces over ", options_.max_message_bytes, " bytes"));
    }
    call.raw->resize((offset + bytes) / sizeof(float));
    std::memcpy(reinterpret_cast<char*>(call.raw->data()) + offset, m.PayloadBytes().data(), bytes);
  } else if (!call.params.empty()) {
    const ShardRange r = plan_.range(call.shard);
    const size_t shard_bytes = static_cast<size_t>(r.size()) * sizeof(float);
    if (offset + bytes > shard_bytes || (last && offset + bytes != shard_bytes)) {
      return absl::DataLossError(absl::StrCat(what(), ": reply pieces carry ", offset + bytes,
                                              " bytes for ", r.size(), " floats"));
    }
    std::memcpy(reinterpret_cast<char*>(call.params.data() + r.begin) + offset,
                m.PayloadBytes().data(), bytes);
  }
  ++call.pieces_in;
  ++pieces_received_;
  return last ? TakeReply(call, m, /*payload_placed=*/true) : absl::OkStatus();
}

absl::Status PsClient::TakeReply(Call& call, const Message& m, bool payload_placed) {
  const proto::Header& h = m.header;
  // Named only when something is wrong (a string per reply is a cost of
  // every round trip).
  const auto what = [&] {
    return absl::StrCat(ShardName(call.shard), " ", proto::MessageType_Name(call.header.type()));
  };
  uint64_t& instance = instances_[call.ps()];
  if (h.ps_instance() != 0 && instance != 0 && h.ps_instance() != instance) {
    return RejoinError(absl::StrCat(what(), ": the ps restarted since this worker joined"));
  }
  if (h.ps_instance() != 0) instance = h.ps_instance();
  if (h.error().code() != 0) {
    call.reply = h;  // what the refusal carries (REGISTER: the chief's job)
    // The ps's code judges our request from its side; here a refusal is a
    // run-time failure (exit 1), never bad input the user gave (exit 2).
    auto code = static_cast<absl::StatusCode>(h.error().code());
    if (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound) {
      code = absl::StatusCode::kFailedPrecondition;
    }
    if (h.job_finished()) return JobFinishedError(absl::StrCat(what(), ": ", h.error().message()));
    absl::Status refused(code, absl::StrCat(what(), " refused: ", h.error().message()));
    return h.rejoin() ? MarkRejoin(std::move(refused)) : refused;
  }
  if (payload_placed) {
    // Every piece is in, in its place (TakePiece).
  } else if (call.header.type() == proto::REDUCE && h.dropped()) {
    // A stale REDUCE: no average came (PsClient::Reduce).
  } else if (call.raw != nullptr) {
    call.raw->resize(m.payload_floats());
    m.CopyPayloadTo(absl::MakeSpan(*call.raw));
  } else if (!call.params.empty()) {
    const ShardRange r = plan_.range(call.shard);
    if (m.payload_floats() != static_cast<size_t>(r.size())) {
      return absl::DataLossError(absl::StrCat(what(), ": reply carries ", m.payload_bytes(),
                                              " bytes for ", r.size(), " floats"));
    }
    m.CopyPayloadTo(
        call.params.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size())));
  }
  call.reply = h;
  call.done = true;
  return absl::OkStatus();
}

absl::Status PsClient::WaitReplies(std::vector<Call>* calls, int64_t deadline_us) {
  return WaitReplies(calls, deadline_us, [calls] {
    return std::all_of(calls->begin(), calls->end(), [](const Call& c) { return c.done; });
  });
}

absl::Status PsClient::WaitReplies(std::vector<Call>* calls, int64_t deadline_us,
                                   const std::function<bool()>& enough, bool poll_first) {
  // Once a wait, whether or not its replies are quick (a woken ps's are
  // not held back in every case), and in every slow slice (CheckWaiting).
  if (watch_heartbeat_) {
    if (absl::Status s = CheckRoutes(); !s.ok()) {
      BreakPlacingLinks();
      return s;
    }
  }
  // Each ps once: a ps serving two shards answers both on one socket.
  std::vector<int> ps;
  const auto add_ps = [&ps](const std::vector<Call>& of) {
    for (const Call& c : of) {
      if (std::find(ps.begin(), ps.end(), c.ps()) == ps.end()) ps.push_back(c.ps());
    }
  };
  add_ps(*calls);
  add_ps(rows_unanswered_);
  add_ps(staged_.calls);
  // ZeroMQ's sockets, and the links' descriptors.
  std::vector<int> zmq_ps, link_ps;
  for (int j : ps) (links_[j] != nullptr ? link_ps : zmq_ps).push_back(j);
  std::vector<zmq::socket_t*> sockets;
  for (int j : zmq_ps) sockets.push_back(&sockets_[j]);
  std::vector<PollFd> fds;
  std::vector<int> polled_links;  // [i] the ps of fds[i]
  const proto::MessageType type = calls->front().header.type();
  // EmbeddingPush's replies are this wait's too: its refusal is the step's.
  const auto over = [&] {
    if (!enough()) return false;
    for (const Call& c : rows_unanswered_) {
      if (!c.done) return false;
    }
    // And a prefetch sent behind the step's push (its rows are the wait's).
    for (const Call& c : staged_.calls) {
      if (!c.done) return false;
    }
    rows_unanswered_.clear();
    return true;
  };
  // A failed wait abandons them with the rest (their replies are skipped).
  absl::Cleanup abandon = [this] {
    rows_unanswered_.clear();
    staged_ = Prefetch();
    ready_ = Prefetch();
    BreakPlacingLinks();
  };
  const auto finish = [&] {
    std::move(abandon).Cancel();
    return staged_.calls.empty() ? absl::OkStatus() : TakePrefetch();
  };
  bool first_slice = true;
  for (;;) {
    if (!poll_first && over()) return finish();
    // What the sockets hold is read before the heartbeat's verdict: a
    // worker that wakes from a freeze finds the ps's last word there.
    // --busy_poll_us: the wait's first slice looks before it sleeps.
    // Links nothing is awaited from are not polled: one that a ps closed
    // after its answers would wake every poll. (Requests are written
    // whole when sent: SendOnLink.)
    fds.clear();
    polled_links.clear();
    for (int j : link_ps) {
      if (!WaitingOn(j, *calls)) continue;
      fds.push_back({links_[j]->fd(), POLLIN, 0});
      polled_links.push_back(j);
    }
    auto readable = Poll(sockets, absl::MakeSpan(fds), poll_first ? 0 : kPollSliceMs,
                         first_slice ? options_.busy_poll_us : 0);
    if (!poll_first) first_slice = false;
    poll_first = false;
    if (!readable.ok()) {
      if (absl::IsCancelled(readable.status())) continue;  // EINTR: re-check the signal
      return readable.status();
    }
    for (size_t i = 0; i < zmq_ps.size(); ++i) {
      if ((*readable)[i]) RETURN_IF_ERROR(DrainSocket(zmq_ps[i], calls));
    }
    for (size_t i = 0; i < polled_links.size(); ++i) {
      const int j = polled_links[i];
      if ((fds[i].revents & (POLLIN | POLLERR)) != 0) RETURN_IF_ERROR(DrainLink(j, calls));
    }
    if (over()) return finish();
    RETURN_IF_ERROR(CheckWaiting(deadline_us, type));
  }
}

absl::Status PsClient::WaitRowPushes() {
  if (rows_unanswered_.empty()) return absl::OkStatus();
  std::vector<Call> calls = std::move(rows_unanswered_);
  rows_unanswered_.clear();
  return WaitReplies(&calls, RpcDeadline());
}

int64_t PsClient::RpcDeadline() const { return DeadlineFrom(options_.rpc_timeout_s); }

bool PsClient::WaitingOn(int ps, const std::vector<Call>& calls) const {
  const auto waiting_in = [ps](const std::vector<Call>& of) {
    return std::any_of(of.begin(), of.end(),
                       [&](const Call& c) { return c.ps() == ps && !c.done; });
  };
  return waiting_in(calls) || waiting_in(rows_unanswered_) || waiting_in(staged_.calls);
}

absl::Status PsClient::DrainSocket(int ps, std::vector<Call>* calls) {
  while (WaitingOn(ps, *calls)) {
    auto m = ReceiveReply(sockets_[ps]);
    if (!m.ok()) {
      if (absl::IsUnavailable(m.status())) return absl::OkStatus();
      return absl::DataLossError(absl::StrCat(ShardName(ps), ": ", m.status().message()));
    }
    RETURN_IF_ERROR(TakeMessage(ps, calls, *m, /*placed_bytes=*/0));
  }
  return absl::OkStatus();
}

absl::Status PsClient::DrainLink(int ps, std::vector<Call>* calls) {
  StreamLink& link = *links_[ps];
  // A reply's parameters go straight into their place: the whole of a
  // shard's, for the call that waits for them.
  link.reader().set_sink([this, ps, calls](const proto::Header& h, size_t bytes) {
    Call* call =
        h.error().code() == 0 && !IsPiece(h) ? WaitingCall(ps, h.request_id(), calls) : nullptr;
    if (call == nullptr || call->raw != nullptr || call->params.empty()) {
      return absl::Span<char>();
    }
    // Not from a ps that restarted since this worker joined (TakeReply
    // refuses that reply; its parameters must not land first).
    const uint64_t instance = instances_[call->ps()];
    if (h.ps_instance() != 0 && instance != 0 && h.ps_instance() != instance) {
      return absl::Span<char>();
    }
    const ShardRange r = plan_.range(call->shard);
    if (bytes != static_cast<size_t>(r.size()) * sizeof(float)) return absl::Span<char>();
    placing_request_[ps] = h.request_id();  // FloatsIn follows it
    return absl::Span<char>(reinterpret_cast<char*>(call->params.data() + r.begin), bytes);
  });
  std::vector<StreamMessage> messages;
  const absl::Status read = link.Receive(SIZE_MAX, &messages);  // all it holds
  link.reader().set_sink(nullptr);                              // `calls` is this wait's only
  for (StreamMessage& m : messages) {
    if (!m.message.ok()) {
      return absl::DataLossError(absl::StrCat(ShardName(ps), ": ", m.message.status().message()));
    }
    RETURN_IF_ERROR(TakeMessage(ps, calls, *m.message, m.payload_placed ? m.wire_bytes : 0));
  }
  if (read.ok()) return read;
  // A ps that closed after its last answer (it exits once the chief shut
  // the job down) failed no request; the link is done.
  if (absl::IsUnavailable(read) && !WaitingOn(ps, *calls)) {
    link.Break();
    return absl::OkStatus();
  }
  return LinkLost(ps, read);
}

PsClient::Call* PsClient::WaitingCall(int ps, uint64_t request_id, std::vector<Call>* calls) {
  const auto answered = [&](const Call& c) {
    return c.ps() == ps && !c.done && c.header.request_id() == request_id;
  };
  for (std::vector<Call>* in : {calls, &rows_unanswered_, &staged_.calls}) {
    auto it = std::find_if(in->begin(), in->end(), answered);
    if (it != in->end()) return &*it;
  }
  return nullptr;
}

absl::Status PsClient::TakeMessage(int ps, std::vector<Call>* calls, const Message& m,
                                   size_t placed_bytes) {
  const bool placed = placed_bytes > 0;
  received_bytes_ +=
      static_cast<int64_t>(placed ? placed_bytes : m.header.ByteSizeLong() + m.payload_bytes());
  if (m.header.job_finished() && m.header.type() == proto::SHUTDOWN) {
    return JobFinishedError(
        absl::StrCat(ShardName(ps), ": the chief shut the job down: training is over"));
  }
  // A reply to an earlier, abandoned request is skipped.
  Call* call = WaitingCall(ps, m.header.request_id(), calls);
  if (call == nullptr) return absl::OkStatus();
  absl::Status s = IsPiece(m.header) ? TakePiece(*call, m) : TakeReply(*call, m, placed);
  if (!s.ok() && !IsRejoin(s) && !IsJobFinished(s) && !staged_.calls.empty() &&
      call >= staged_.calls.data() && call < staged_.calls.data() + staged_.calls.size()) {
    // A prefetch refused: dropped, and the step's own replies decide.
    LOG_EVERY_N(WARNING, 100) << "the next step's rows were not prefetched: " << s.message();
    staged_.refused = true;
    call->done = true;
    s = absl::OkStatus();
  }
  RETURN_IF_ERROR(s);
  if (call->done) call->received_unix_us = UnixMicros();
  return absl::OkStatus();
}

void PsClient::BreakPlacingLinks() {
  for (std::unique_ptr<StreamLink>& link : links_) {
    if (link != nullptr && link->reader().placing()) link->Break();
  }
}

absl::Status PsClient::LinkLost(int ps, const absl::Status& why) {
  links_[ps]->Break();
  const std::string what =
      absl::StrCat(ShardName(ps), ": its Unix socket closed (", why.message(), ")");
  // The ps ended or restarted: as a ZeroMQ connection's close, a rejoin
  // (a new client decides its routes again); not while the job ends.
  return watch_heartbeat_ ? RejoinError(what) : absl::UnavailableError(what);
}

absl::Status PsClient::Exchange(std::vector<Call>* calls, double timeout_s) {
  const int64_t deadline = DeadlineFrom(timeout_s >= 0 ? timeout_s : options_.rpc_timeout_s);
  for (Call& c : *calls) RETURN_IF_ERROR(SendCall(c, deadline));
  return WaitReplies(calls, deadline);
}

std::vector<PsClient::Call> PsClient::ShardCalls(proto::MessageType type, int64_t step,
                                                 absl::Span<const int64_t> versions) {
  std::vector<Call> calls(plan_.num_shards());
  for (int k = 0; k < plan_.num_shards(); ++k) {
    calls[k].shard = k;
    if (route_[k] != k) calls[k].socket = route_[k];
    calls[k].header = BaseHeader(type, k);
    calls[k].header.set_step(step);
    if (!versions.empty()) calls[k].header.set_version(versions[k]);
  }
  return calls;
}

void PsClient::CollectReplies(const std::vector<Call>& calls, std::vector<ShardReply>* replies) {
  if (replies == nullptr) return;
  replies->resize(calls.size());
  for (size_t k = 0; k < calls.size(); ++k) {
    const proto::Header& r = calls[k].reply;
    (*replies)[k] = {
        r.version(),  r.min_clock(), r.staleness(), r.dropped(), calls[k].received_unix_us,
        r.parked_us()};
  }
}

absl::Status PsClient::Init(const proto::JobConfig& job, absl::Span<const float> params) {
  CHECK_EQ(static_cast<int64_t>(params.size()), plan_.total_size());
  std::vector<Call> calls = ShardCalls(proto::INIT, 0, {});
  for (Call& c : calls) {
    *c.header.mutable_job() = job;
    const ShardRange r = plan_.range(c.shard);
    c.payload =
        AsBytes(params.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size())));
  }
  return Exchange(&calls);
}

absl::Status PsClient::InitWithState(const proto::JobConfig& job,
                                     const std::vector<std::vector<float>>& states,
                                     const std::vector<std::vector<int64_t>>& segment_updates) {
  CHECK_EQ(static_cast<int>(states.size()), plan_.num_shards());
  CHECK_EQ(static_cast<int>(segment_updates.size()), plan_.num_shards());
  std::vector<Call> calls = ShardCalls(proto::INIT, 0, {});
  for (Call& c : calls) {
    const auto k = static_cast<size_t>(c.shard);
    *c.header.mutable_job() = job;
    c.header.set_with_slots(true);
    *c.header.mutable_segment_updates() = {segment_updates[k].begin(), segment_updates[k].end()};
    c.payload = AsBytes(absl::Span<const float>(states[k]));
  }
  return Exchange(&calls);
}

absl::Status PsClient::OptimizerState(absl::Span<float> slots,
                                      std::vector<std::vector<int64_t>>* segment_updates) {
  const auto total = static_cast<size_t>(plan_.total_size());
  CHECK_EQ(slots.size() % total, 0u);
  std::vector<Call> calls = ShardCalls(proto::OPTIMIZER_STATE, 0, {});
  std::vector<std::vector<float>> states(calls.size());
  for (Call& c : calls) c.raw = &states[static_cast<size_t>(c.shard)];
  RETURN_IF_ERROR(Exchange(&calls));
  const size_t num_slots = slots.size() / total;
  segment_updates->assign(calls.size(), {});
  for (const Call& c : calls) {
    const ShardRange r = plan_.range(c.shard);
    const auto begin = static_cast<size_t>(r.begin), n = static_cast<size_t>(r.size());
    const std::vector<float>& state = states[static_cast<size_t>(c.shard)];
    if (state.size() != num_slots * n) {
      return absl::DataLossError(absl::StrCat(ShardName(c.shard), ": an optimizer state of ",
                                              state.size(), " floats for ", num_slots,
                                              " slot(s) of ", n));
    }
    for (size_t k = 0; k < num_slots; ++k) {
      std::copy(state.begin() + static_cast<std::ptrdiff_t>(k * n),
                state.begin() + static_cast<std::ptrdiff_t>((k + 1) * n),
                slots.begin() + static_cast<std::ptrdiff_t>(k * total + begin));
    }
    (*segment_updates)[static_cast<size_t>(c.shard)].assign(c.reply.segment_updates().begin(),
                                                            c.reply.segment_updates().end());
  }
  return absl::OkStatus();
}

absl::Status PsClient::Reduce(int64_t step, absl::Span<const int64_t> versions, uint32_t round,
                              int num_examples, absl::Span<const float> grads,
                              const std::vector<int32_t>& absent, absl::Span<float> average,
                              std::vector<int32_t>* absent_everywhere, bool* stale) {
  CHECK_EQ(static_cast<int64_t>(grads.size()), plan_.total_size());
  CHECK_EQ(static_cast<int64_t>(average.size()), plan_.total_size());
  std::vector<Call> calls = ShardCalls(proto::REDUCE, step, versions);
  for (Call& c : calls) {
    const ShardRange r = plan_.range(c.shard);
    c.header.set_num_examples(num_examples);
    c.header.set_reduce_round(round);
    *c.header.mutable_step_settings()->mutable_absent() = {absent.begin(), absent.end()};
    c.payload = AsBytes(grads.subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size())));
    c.params = average;
  }
  RETURN_IF_ERROR(Exchange(&calls));
  *stale = false;
  bool first = true;
  absent_everywhere->clear();
  for (const Call& c : calls) {
    if (c.reply.dropped()) {
      *stale = true;
      continue;
    }
    const auto& theirs = c.reply.step_settings().absent();
    std::vector<int32_t> both;
    if (first) {
      both.assign(theirs.begin(), theirs.end());
      first = false;
    } else {
      std::set_intersection(absent_everywhere->begin(), absent_everywhere->end(), theirs.begin(),
                            theirs.end(), std::back_inserter(both));
    }
    absent_everywhere->swap(both);
  }
  return absl::OkStatus();
}

int64_t Registration::min_clock() const {
  return clocks.empty() ? 0 : *std::min_element(clocks.begin(), clocks.end());
}

bool Registration::same_generation() const {
  return std::all_of(generations.begin(), generations.end(),
                     [&](int64_t g) { return g == generations.front(); });
}

absl::StatusOr<Registration> PsClient::Register(double timeout_s, proto::JobConfig* refused_job) {
  std::vector<Call> calls = ShardCalls(proto::REGISTER, 0, {});
  if (absl::Status s = Exchange(&calls, timeout_s > 0 ? timeout_s : -1); !s.ok()) {
    for (const Call& c : calls) {
      if (refused_job != nullptr && c.reply.has_job()) *refused_job = c.reply.job();
    }
    return s;
  }
  Registration r;
  r.job = calls.front().reply.job();
  for (const Call& c : calls) {
    r.clocks.push_back(c.reply.step());
    r.generations.push_back(c.reply.generation());
    r.versions.push_back(c.reply.version());
  }
  return r;
}

absl::Status PsClient::Pull(int64_t step, absl::Span<const int64_t> min_versions,
                            absl::Span<float> params, std::vector<ShardReply>* replies) {
  CHECK_EQ(static_cast<int64_t>(params.size()), plan_.total_size());
  std::vector<Call> calls = ShardCalls(proto::PULL, step, min_versions);
  for (Call& c : calls) c.params = params;
  RETURN_IF_ERROR(Exchange(&calls));
  CollectReplies(calls, replies);
  return absl::OkStatus();
}

absl::Status PsClient::PullVersion(int64_t step, int64_t version, absl::Span<float> params,
                                   std::vector<ShardReply>* replies) {
  CHECK_EQ(static_cast<int64_t>(params.size()), plan_.total_size());
  const std::vector<int64_t> versions(static_cast<size_t>(plan_.num_shards()), version);
  std::vector<Call> calls = ShardCalls(proto::PULL, step, versions);
  for (Call& c : calls) {
    c.params = params;
    c.header.set_exact_version(true);
  }
  RETURN_IF_ERROR(Exchange(&calls));
  CollectReplies(calls, replies);
  return absl::OkStatus();
}

absl::Status PsClient::PushPull(int64_t step, absl::Span<const int64_t> computed_on,
                                int num_examples, absl::Span<const EncodedShard> grads,
                                absl::Span<float> params, std::vector<ShardReply>* replies) {
  StartPushPull(step, computed_on, num_examples, params);
  return FinishPushPull(grads, replies);
}

void PsClient::StartPushPull(int64_t step, absl::Span<const int64_t> computed_on, int num_examples,
                             absl::Span<float> params) {
  CHECK_EQ(static_cast<int64_t>(params.size()), plan_.total_size());
  pending_.calls = ShardCalls(proto::PUSH_PULL, step, computed_on);
  for (Call& c : pending_.calls) c.params = params;
  pending_.sent.assign(pending_.calls.size(), false);
  pending_.num_examples = num_examples;
  pending_.deadline_us = DeadlineFrom(options_.rpc_timeout_s);
  pending_.error = absl::OkStatus();
}

void PsClient::SendShard(int shard, const EncodedShard& grad) {
  CHECK(shard >= 0 && shard < static_cast<int>(pending_.calls.size()));
  if (pending_.sent[shard] || !pending_.error.ok()) return;
  ready_ = Prefetch();  // a push makes what a prefetch brought stale
  Call& c = pending_.calls[shard];
  SetPushPayload(grad, pending_.num_examples, &c.header, &c.payload);
  pending_.error = SendCall(c, pending_.deadline_us);
  pending_.sent[shard] = true;
}

absl::Status PsClient::FinishPushPull(absl::Span<const EncodedShard> grads,
                                      std::vector<ShardReply>* replies) {
  CHECK_EQ(static_cast<int>(grads.size()), plan_.num_shards());
  for (int k = 0; k < plan_.num_shards(); ++k) SendShard(k, grads[k]);
  RETURN_IF_ERROR(pending_.error);
  if (absl::Status s = SendPrefetch(pending_.deadline_us); !s.ok()) {
    BreakPlacingLinks();  // a reply WaitParams left half read
    return s;
  }
  RETURN_IF_ERROR(WaitReplies(&pending_.calls, pending_.deadline_us));
  CollectReplies(pending_.calls, replies);
  return absl::OkStatus();
}

int64_t PsClient::FloatsIn(const Call& call) const {
  const int64_t size = plan_.range(call.shard).size();
  if (call.done) return size;
  if (call.raw != nullptr || call.params.empty()) return 0;
  if (const StreamLink* link = links_[call.ps()].get(); link != nullptr) {
    // A link's reply comes whole, read into place as it arrives.
    const bool this_one =
        link->reader().placing() && placing_request_[call.ps()] == call.header.request_id();
    return this_one ? std::min<int64_t>(
                          size, static_cast<int64_t>(link->reader().placed_bytes() / sizeof(float)))
                    : 0;
  }
  return std::min<int64_t>(size,
                           static_cast<int64_t>(call.pieces_in * call.piece_bytes / sizeof(float)));
}

absl::Status PsClient::WaitParams(int64_t end) {
  RETURN_IF_ERROR(pending_.error);
  std::vector<Call>& calls = pending_.calls;
  for (const Call& c : calls) {
    CHECK(pending_.sent[c.shard] || plan_.range(c.shard).begin >= end)
        << "WaitParams before shard " << c.shard << " was sent";
  }
  // Reads what came while the caller computed even where enough is in
  // already: each reply is taken (and timed) when it came, not when the
  // layer that needs it asks.
  const auto in = [&] {
    for (const Call& c : calls) {
      const ShardRange r = plan_.range(c.shard);
      if (r.begin < end && r.begin + FloatsIn(c) < std::min(end, r.end)) return false;
    }
    return true;
  };
  return WaitReplies(&calls, pending_.deadline_us, in, /*poll_first=*/true);
}

absl::Status PsClient::FinishStep(int64_t step, absl::Span<const int64_t> computed_on,
                                  int num_examples, absl::Span<const EncodedShard> grads,
                                  const std::vector<bool>& push_to, absl::Span<float> params,
                                  std::vector<ShardReply>* replies) {
  CHECK_EQ(static_cast<int>(grads.size()), plan_.num_shards());
  std::vector<Call> calls = ShardCalls(proto::PUSH_PULL, step, computed_on);
  for (Call& c : calls) {
    c.params = params;
    if (!push_to[c.shard]) {
      c.header.set_type(proto::PULL);
      c.header.set_step(step + 1);
      c.header.set_version(computed_on[c.shard] + 1);
      continue;
    }
    SetPushPayload(grads[c.shard], num_examples, &c.header, &c.payload);
  }
  RETURN_IF_ERROR(Exchange(&calls));
  CollectReplies(calls, replies);
  return absl::OkStatus();
}

absl::Status PsClient::Barrier(const std::string& name, const proto::WorkerReport* report) {
  std::vector<Call> calls = ShardCalls(proto::BARRIER, 0, {});
  for (Call& c : calls) {
    c.header.set_barrier_name(name);
    if (report != nullptr) *c.header.mutable_report() = *report;
  }
  return Exchange(&calls);
}

absl::StatusOr<std::vector<proto::ShardStats>> PsClient::Stats(double timeout_s) {
  std::vector<Call> calls = ShardCalls(proto::STATS, 0, {});
  RETURN_IF_ERROR(Exchange(&calls, timeout_s > 0 ? timeout_s : -1));
  std::vector<proto::ShardStats> out;
  for (const Call& c : calls) out.push_back(c.reply.stats());
  return out;
}

void PsClient::StopWatchingPs() {
  watch_heartbeat_ = false;
  heartbeat_->StopJudging();
}

absl::Status PsClient::Shutdown(int64_t keep_from_step) {
  // Each ps exits right after its answer: its closing connection must not
  // read as a failure.
  StopWatchingPs();
  std::vector<Call> calls = ShardCalls(proto::SHUTDOWN, 0, {});
  // A ps that serves no shard now (it came back after its shard was
  // adopted, and was not given it back yet) is told too. One this worker
  // has heard from must answer, as a serving one must; one it has not (it
  // may have come back moments ago, or be gone for good) is told on a
  // shorter wait whose end is only logged.
  const std::vector<PsView> views = heartbeat_->Views();
  std::vector<Call> unheard;
  for (int j = 0; j < plan_.num_shards(); ++j) {
    if (std::count(route_.begin(), route_.end(), j) > 0) continue;
    Call c;
    c.shard = j;
    c.header = BaseHeader(proto::SHUTDOWN, j);
    (views[j].answered ? calls : unheard).push_back(std::move(c));
  }
  for (std::vector<Call>* group : {&calls, &unheard}) {
    for (Call& c : *group) c.header.set_keep_from_step(keep_from_step);
  }
  RETURN_IF_ERROR(Exchange(&calls, kShutdownTimeoutS));
  if (!unheard.empty()) {
    if (absl::Status s = Exchange(&unheard, kUnheardShutdownTimeoutS); !s.ok()) {
      LOG(WARNING) << "a ps that serves no shard did not answer the shutdown: " << s.message();
    }
  }
  return absl::OkStatus();
}

}  // namespace pstrain

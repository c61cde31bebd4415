#include "ps_server/ps_server.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr int kPollMs = 100;
constexpr int kMaxMessagesPerWake = 256;
constexpr int64_t kWaitLogIntervalUs = 30'000'000;

}  // namespace

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Create(const ClusterSpec& cluster,
                                                           const PsServerOptions& options) {
  CHECK(cluster.task().has_value() && cluster.task()->type == TaskType::kPs);
  const TaskId task = *cluster.task();
  const std::string& address = cluster.Address(task);
  ASSIGN_OR_RETURN(const HostPort hp, ParseHostPort(address));
  std::string endpoint = options.bind_endpoint.empty() ? BindEndpoint(hp) : options.bind_endpoint;
  zmq::context_t context(1);
  SocketOptions socket_options;
  socket_options.max_message_bytes = options.max_message_bytes;
  socket_options.linger_ms = options.linger_ms;
  auto socket = BindRouter(context, endpoint, socket_options);
  if (!socket.ok()) {
    return absl::UnavailableError(
        absl::StrCat(task.ToString(), " (", address, "): ", socket.status().message()));
  }
  return std::unique_ptr<PsServer>(new PsServer(cluster, options, std::move(context),
                                                *std::move(socket), std::move(endpoint)));
}

PsServer::PsServer(const ClusterSpec& cluster, const PsServerOptions& options,
                   zmq::context_t context, zmq::socket_t socket, std::string endpoint)
    : cluster_(cluster),
      task_(*cluster.task()),
      options_(options),
      context_(std::move(context)),
      socket_(std::move(socket)),
      endpoint_(std::move(endpoint)),
      handler_({cluster.JobId(), cluster.task()->index, cluster.num_ps()}),
      last_seen_us_(cluster.num_workers(), 0) {}

absl::Status PsServer::Run() {
  LOG(INFO) << task_.ToString() << " listening on " << endpoint_ << " (job "
            << absl::StrCat(absl::Hex(cluster_.JobId())) << ", " << cluster_.num_workers() << " workers, "
            << cluster_.num_ps() << " ps)";
  started_us_ = last_wait_log_us_ = MonotonicMicros();
  zmq::socket_t* sockets[] = {&socket_};
  for (;;) {
    if (const int sig = ShutdownSignal(); sig != 0) {
      return Finish(absl::CancelledError(absl::StrCat(task_.ToString(), " stopped by signal ", sig)));
    }
    auto readable = PollReadable(sockets, kPollMs);
    if (readable.ok() && (*readable)[0]) ServeReadable();
    CheckLiveness();
    if (handler_.shutdown_requested()) return Finish(absl::OkStatus());
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
        routed.identity.size() == 0) {
      return;  // nothing more queued
    }
    Process(std::move(routed));
  }
}

void PsServer::Process(RoutedMessage routed) {
  const std::string peer = routed.identity.to_string();
  std::vector<Reply> replies;
  handler_.CountBytes(static_cast<int64_t>(routed.wire_bytes), 0);
  if (!routed.message.ok()) {
    LOG_FIRST_N(WARNING, 20) << task_.ToString() << ": malformed message ("
                             << routed.wire_bytes << " bytes): " << routed.message.status().message();
    handler_.HandleMalformed(peer, routed.message.status(), &replies);
  } else {
    NoteAlive(*routed.message);
    handler_.Handle(peer, *routed.message, &replies);
  }
  Send(&replies);
}

void PsServer::Send(std::vector<Reply>* replies) {
  for (Reply& r : *replies) {
    if (r.header.has_error() && r.header.error().code() != 0) {
      LOG_FIRST_N(WARNING, 50) << task_.ToString() << ": refused "
                               << proto::MessageType_Name(r.header.type()) << " from rank "
                               << r.header.rank() << ": " << r.header.error().message();
    }
    absl::Span<const float> payload;
    if (r.with_params) payload = handler_.params();
    const zmq::message_t identity(r.peer.data(), r.peer.size());
    const absl::Status s = SendRouted(socket_, identity, r.header, payload);
    if (!s.ok()) {
      ++send_failures_;
      LOG_FIRST_N(WARNING, 20) << task_.ToString() << ": cannot answer rank " << r.header.rank()
                               << ": " << s.message();
      continue;
    }
    handler_.CountBytes(0, static_cast<int64_t>(r.header.ByteSizeLong() + payload.size() * 4));
  }
}

void PsServer::NoteAlive(const Message& m) {
  const proto::TaskId& s = m.header.sender();
  if ((s.type() == proto::CHIEF || s.type() == proto::WORKER) && m.header.rank() >= 0 &&
      m.header.rank() < static_cast<int>(last_seen_us_.size()) &&
      m.header.job_id() == cluster_.JobId()) {
    last_seen_us_[m.header.rank()] = MonotonicMicros();
  }
}

void PsServer::CheckLiveness() {
  const int64_t now = MonotonicMicros();
  if (!handler_.initialized()) {
    if (now - last_wait_log_us_ > kWaitLogIntervalUs) {
      LOG(INFO) << task_.ToString() << ": waiting for the chief ("
                << cluster_.ChiefTask().ToString() << " at "
                << cluster_.Address(cluster_.ChiefTask()) << ") to initialise the parameters";
      last_wait_log_us_ = now;
    }
    return;
  }
  if (init_us_ == 0) init_us_ = now;
  if (!handler_.failure().ok()) return;
  std::vector<std::string> missing;
  const auto& registered = handler_.registered();
  for (int rank = 0; rank < static_cast<int>(registered.size()); ++rank) {
    const std::string name = cluster_.TaskForRank(rank).ToString();
    if (!registered[rank]) {
      missing.push_back(name);
      continue;
    }
    // A worker past its final report exits while the chief evaluates the
    // final model, which may take longer than the timeout. The chief itself
    // stays watched: the job ends with its SHUTDOWN.
    if (rank != 0 && handler_.reported_done(rank)) continue;
    const double silent_s = (now - last_seen_us_[rank]) * 1e-6;
    if (silent_s > options_.peer_timeout_s) {
      std::vector<Reply> replies;
      handler_.Fail(absl::AbortedError(absl::StrCat(
          name, " (", cluster_.Address(cluster_.TaskForRank(rank)), ") sent nothing for ",
          static_cast<int>(silent_s), " s: presumed dead; the job cannot continue")), &replies);
      failed_us_ = now;
      LOG(ERROR) << task_.ToString() << ": " << handler_.failure().message();
      Send(&replies);
      return;
    }
  }
  if (missing.empty()) return;
  if ((now - init_us_) * 1e-6 > options_.register_timeout_s) {
    std::vector<Reply> replies;
    handler_.Fail(absl::AbortedError(absl::StrCat(
        absl::StrJoin(missing, ", "), " did not register within ", options_.register_timeout_s,
        " s of the chief's INIT; the job cannot continue")), &replies);
    failed_us_ = now;
    LOG(ERROR) << task_.ToString() << ": " << handler_.failure().message();
    Send(&replies);
  } else if (now - last_wait_log_us_ > kWaitLogIntervalUs) {
    LOG(INFO) << task_.ToString() << ": waiting for " << absl::StrJoin(missing, ", ")
              << " to register";
    last_wait_log_us_ = now;
  }
}

absl::Status PsServer::Finish(absl::Status status) {
  std::vector<Reply> replies;
  if (!status.ok()) handler_.AbortParked(status, &replies);
  Send(&replies);
  const proto::ShardStats s = handler_.Stats();
  LOG(INFO) << task_.ToString() << " done: version " << s.version() << ", "
            << s.updates_applied() << " updates, " << s.gradients_received()
            << " gradients received, " << s.stale_gradients_dropped() << " stale and "
            << s.late_gradients_dropped() << " late dropped, " << s.malformed_requests()
            << " malformed and " << s.rejected_requests() << " rejected requests";
  return status;
}

}  // namespace pstrain

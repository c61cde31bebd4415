// wire_bench: PUSH_PULL between a ps process and worker processes, against
// ZeroMQ echoing the same bytes between processes, in one run, alternated.
//
//   wire_bench [--sizes=21840,65536,669706,1048576,16777216] [--workers=1,2,4,8]
//              [--security=plain,curve,curve-local,plain-local] [--rounds=2] [--seconds=2]
//              [--warmup_s=0.5]
//              [--mode=async]
//              [--ps_server=PATH] [--ps_flags="--update_threads=1;--update_threads=2"]
//              [--echo_work=none,copy,sgd] [--echo_transport=tcp|ipc|shm|unix]
//              [--echo=false] [--gap_us=0] [--timeout_s=120]
//
// For every (security, size, workers) cell, `rounds` times: the echo, then
// PUSH_PULL (A/B/A/B, so that the machine's drift shows in both), each from
// fresh processes:
//  - echo: one echo process (a ROUTER with one ZeroMQ I/O thread, as a ps
//    has) and `workers` client processes (DEALERs). A client sends a header
//    frame and n floats, as a worker's PUSH_PULL does, and the echo sends the
//    same frames back once it has all of a message, as a ps answers; the
//    client copies the payload into its parameter buffer, as PsClient does.
//    With CURVE it is pstrain's wire: keys from a job secret, the same socket
//    options (common/transport.h), and the message in the same pieces where
//    pstrain cuts one (common/pieces.h). No ZAP handler: it checks a peer at
//    its handshake only, never a message.
//  - PUSH_PULL: a real `ps_server` process (async by default; sync with
//    --mode=sync) and `workers` client processes, each a PsClient pushing n
//    floats of gradient and receiving n floats of parameters per round trip.
//    --security=curve-local: a CURVE job whose clients reach the ps over
//    its Unix socket (transport/local_links.h), not encrypted, so its echo
//    is the plaintext one (with --echo_transport=unix, a raw Unix socket's);
//    plain-local: an --insecure job's, on the same link.
// More systems in the same rounds, for A/B: echoes that work before they
// answer (--echo_work: copy, or a ps's least update, sgd; EchoWork below),
// which show what answering with other bytes than the request's costs; and
// PUSH_PULL once per --ps_flags variant (another flag, or another binary).
// Every client first makes one round trip and checks what came back (the
// echo: the bytes it sent; PUSH_PULL: parameters of 1 - 0.125 x version, every
// push being 0.5 at learning rate 0.25), then waits for the driver's start
// signal, so that all of a cell's clients warm up (--warmup_s) together,
// and for a second one once all are warm, so that they time the same
// seconds; after them it checks the last round trip's reply again.
// With --gap_us every client computes that long between round trips (a
// step's forward and backward), so that each request finds the other
// processes idle, as in a job: what waking them costs shows in the round
// trip.
//
// Output: one line per measurement,
//   RESULT bench=wire system=echo|push_pull security=plain|curve floats=N
//     bytes_each_way=B workers=W round=R aggregate_bytes_per_s=X
//     round_trips_per_s_per_worker=Y p50_round_trip_us=Z p10_round_trip_us=T
// (bytes both ways: n floats out and n back, summed over every client's
// round trips, each over its own timed seconds; the round trip times are
// the clients' medians of their own percentiles: on a busy machine the
// 10th percentile shows the path without the others' load best), then a
// table with the median of each cell and PUSH_PULL / echo.
//
// Processes: the ps is `ps_server` from --ps_server, else the one next to
// this binary; clients and the echo are this binary (--role). Every process
// is bounded: a child that misses its --timeout_s is killed, and a child
// whose driver dies is killed by the kernel (common/child_process.h). A cell
// that fails is reported (an ERROR line) and the run goes on; the exit code
// is then 1.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmarks/wire_bench_driver.h"
#include "common/clock.h"
#include "common/embedding.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/malloc_policy.h"
#include "common/shard_plan.h"
#include "common/signals.h"
#include "common/status_macros.h"
#include "transport/pieces.h"
#include "transport/pinned_floats.h"
#include "transport/security.h"
#include "transport/transport.h"
#include "worker/ps_client.h"

ABSL_FLAG(std::string, role, "driver",
          "driver (the benchmark); echo_server, echo_client, push_pull_client: its children");
ABSL_FLAG(std::string, sizes, "21840,65536,669706,1048576,16777216",
          "Floats each way per round trip (87 KB mnist_cnn, 256 KiB, 2.68 MB cnn_large, 4 MiB, "
          "64 MiB)");
ABSL_FLAG(std::string, workers, "1,2,4,8", "Concurrent worker processes");
ABSL_FLAG(std::string, security, "plain,curve",
          "plain (--insecure), curve (a job secret), curve-local (a job secret, the workers on "
          "the ps's Unix socket, against a plaintext echo), plain-local (--insecure, the workers "
          "on that socket), or several");
ABSL_FLAG(bool, colocated, false, "push_pull_client: reach the ps over its Unix socket");
ABSL_FLAG(bool, echo, true, "Measure the echo (the ratio needs it)");
ABSL_FLAG(int, rounds, 2, "Echo and PUSH_PULL measurements per cell, alternated");
ABSL_FLAG(double, seconds, 2.0, "Timed seconds per measurement");
ABSL_FLAG(double, warmup_s, 0.5,
          "Seconds of untimed round trips (two at least; 0: none) every client makes from the "
          "start signal, all at once, before its timed ones: what the first concurrent round "
          "trips of a cell allocate and fault in stays out of its figure");
ABSL_FLAG(std::string, mode, "async", "The ps's update mode: async or sync");
ABSL_FLAG(std::string, ps_server, "", "The ps_server binary (default: next to this one)");
ABSL_FLAG(std::string, ps_flags, "",
          "More flags for ps_server, space-separated; several variants separated by ';' are each "
          "measured as a PUSH_PULL of its own in every round (A/B: "
          "'--update_threads=1;--update_threads=2'); ps_server=PATH in a variant runs that binary");
ABSL_FLAG(double, timeout_s, 120.0, "Longest a measurement's processes may take, timing included");
ABSL_FLAG(std::string, echo_transport, "tcp",
          "The echo's transport: tcp (127.0.0.1), ipc (a Unix domain socket in the run's "
          "directory), shm (the header on that socket, the payload through shared memory), or "
          "unix (a Unix stream socket without ZeroMQ, plaintext: what ZeroMQ's I/O threads "
          "cost)");
ABSL_FLAG(int, gap_us, 0,
          "Microseconds each client computes between round trips, as a step's forward and "
          "backward would (0 to 1000000); round trip times leave it out, bytes/s do not");
// The children's own.
ABSL_FLAG(std::string, endpoint, "",
          "echo_client: the echo's endpoint; echo_server: where to bind (default loopback TCP)");
ABSL_FLAG(std::string, echo_work, "none",
          "What the echo does before it answers: none, copy or sgd (see EchoWork); the driver: a "
          "comma-separated list, each an echo of its own, the first the ratio's");
ABSL_FLAG(std::string, cluster_spec, "", "push_pull_client: the cluster spec file");
ABSL_FLAG(std::string, secret_file, "", "Children: the job secret (CURVE); empty: plaintext");
ABSL_FLAG(int, rank, 0, "Clients: this worker's rank");
ABSL_FLAG(int64_t, floats, 0, "Children: floats each way");
ABSL_FLAG(int, embedding_dim, 0,
          "0: dense PUSH_PULL; D > 0: rows instead, each --sizes entry floats / D rows of D floats "
          "pulled (EMBEDDING_PULL) and pushed (EMBEDDING_PUSH) per round trip (see RunRowsClient)");
ABSL_FLAG(int64_t, rows_per_worker, 1 << 20,
          "rows: the distinct ids each worker cycles through (its table's part)");
ABSL_FLAG(bool, rows_prefetch, false,
          "rows: each round trip's push also asks for the next block's rows "
          "(PsClient::StageEmbeddingPrefetch, pst.Embedding.prefetch), which the next "
          "round trip's pull then takes: one round trip a step, not two (needs --mode=async)");

namespace pstrain {
namespace {

// Every push is kGrad at kLearningRate on parameters that start at 1: SGD
// steps of 0.125, exact in f32, so version v's parameters are 1 - 0.125 v.
constexpr float kGrad = 0.5f;
constexpr double kLearningRate = 0.25;

absl::StatusOr<TransportSecurity> SecurityFromFlag() {
  TransportSecurity security;
  const std::string path = absl::GetFlag(FLAGS_secret_file);
  if (path.empty()) return security;
  ASSIGN_OR_RETURN(JobSecret secret, JobSecret::Load(path));
  security.secret = secret;
  return security;
}

// Blocks until the driver's SIGUSR1 (blocked in main, so it waits here
// rather than killing); false after `timeout_s`.
bool WaitForSignal(double timeout_s) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  timespec ts{static_cast<time_t>(timeout_s),
              static_cast<long>((timeout_s - static_cast<time_t>(timeout_s)) * 1e9)};
  return sigtimedwait(&set, nullptr, &ts) == SIGUSR1;
}

// A client's timed part: after the driver's start signal, --warmup_s of
// untimed round trips (then WARM, and the driver's second signal once
// every client is warm: the clients time the same seconds), then
// `timed_start` (may be empty) and round trips until `seconds` have
// passed; prints its RESULT line for the driver.
// Before each round trip, warm-up's too, the client computes for --gap_us
// (a step's forward and backward: the core busy, not asleep); the round
// trip's time starts after it.
template <typename RoundTrip>
absl::Status TimeRoundTrips(double seconds, double timeout_s, RoundTrip round_trip,
                            const std::function<void()>& timed_start = {}) {
  std::printf("READY\n");
  std::fflush(stdout);
  if (!WaitForSignal(timeout_s)) return absl::DeadlineExceededError("no start signal");
  const int64_t gap_us = absl::GetFlag(FLAGS_gap_us);
  volatile double work = 1.0;
  // One round trip after the gap's compute from *t; its time, and *t set
  // to its end.
  const auto trip = [&](int64_t* t) -> absl::StatusOr<int64_t> {
    if (gap_us > 0) {
      while (MonotonicMicros() - *t < gap_us) work = work * 1.0000001 + 1e-9;
      *t = MonotonicMicros();
    }
    RETURN_IF_ERROR(round_trip());
    const int64_t began = *t;
    *t = MonotonicMicros();
    return *t - began;
  };
  const double warmup_s = absl::GetFlag(FLAGS_warmup_s);
  int64_t t = MonotonicMicros();
  if (warmup_s > 0) {
    const int64_t warm_end = t + static_cast<int64_t>(warmup_s * 1e6);
    for (int n = 0; n < 2 || t < warm_end; ++n) RETURN_IF_ERROR(trip(&t).status());
    std::printf("WARM\n");
    std::fflush(stdout);
    if (!WaitForSignal(timeout_s)) return absl::DeadlineExceededError("no signal to time");
    t = MonotonicMicros();
  }
  if (timed_start) timed_start();
  std::vector<int64_t> trip_us;
  const int64_t start = t;
  const int64_t end = start + static_cast<int64_t>(seconds * 1e6);
  while (t < end) {
    ASSIGN_OR_RETURN(const int64_t us, trip(&t));
    trip_us.push_back(us);
  }
  const double elapsed = (MonotonicMicros() - start) * 1e-6;
  std::sort(trip_us.begin(), trip_us.end());
  std::printf("RESULT trips=%zu seconds=%.6f p50_us=%lld p10_us=%lld\n", trip_us.size(), elapsed,
              static_cast<long long>(trip_us[trip_us.size() / 2]),
              static_cast<long long>(trip_us[trip_us.size() / 10]));
  std::fflush(stdout);
  return absl::OkStatus();
}

// ---- the echo ---------------------------------------------------------

// What the echo does with a whole message before it answers (--echo_work):
//  - none: sends the received payload frames back;
//  - copy: copies them into a buffer of its own and sends that;
//  - sgd: a ps's least work, next = params - 0.125 x payload (one pass, no
//    checks) into the one of two buffers no reply still holds, and sends
//    the new parameters (common/pinned_floats.h, as a ps does).
// copy and sgd show what a ps's reply costs for being other bytes than the
// request's: the floor of PUSH_PULL, measured.
class EchoWork {
 public:
  static absl::StatusOr<EchoWork> Create(const std::string& kind, size_t bytes) {
    if (kind != "none" && kind != "copy" && kind != "sgd") {
      return absl::InvalidArgumentError(absl::StrCat("--echo_work=", kind, " (none, copy or sgd)"));
    }
    return EchoWork(kind, bytes / sizeof(float));
  }

  // `frames`: header, payload, header, payload ... of one message; the
  // payloads are replaced by this work's.
  void Apply(std::vector<zmq::message_t>* frames) {
    if (kind_ == "none") return;
    std::shared_ptr<PinnedFloats> next =
        !spare_->held() ? spare_ : std::make_shared<PinnedFloats>(std::vector<float>(n_));
    size_t at = 0;
    for (size_t i = 1; i < frames->size(); i += 2) {
      zmq::message_t& payload = (*frames)[i];
      const size_t count = std::min(payload.size() / sizeof(float), n_ - at);
      const float* in = static_cast<const float*>(payload.data());
      if (reinterpret_cast<uintptr_t>(in) % alignof(float) != 0) {  // libzmq's small frames
        scratch_.resize(count);
        std::memcpy(scratch_.data(), payload.data(), count * sizeof(float));
        in = scratch_.data();
      }
      float* out = next->data().data() + at;
      if (kind_ == "copy") {
        std::memcpy(out, in, count * sizeof(float));
      } else {
        const float* p = params_->data().data() + at;
        for (size_t j = 0; j < count; ++j) out[j] = p[j] - 0.125f * in[j];
      }
      payload = PinnedFloats::Frame(next, at, count);
      at += count;
    }
    if (kind_ == "sgd") {
      spare_ = params_;
      params_ = next;
    } else {
      spare_ = next;
    }
  }

 private:
  EchoWork(std::string kind, size_t n)
      : kind_(std::move(kind)),
        n_(n),
        params_(std::make_shared<PinnedFloats>(std::vector<float>(n, 1.0f))),
        spare_(std::make_shared<PinnedFloats>(std::vector<float>(n, 1.0f))) {}

  std::string kind_;
  size_t n_;
  std::shared_ptr<PinnedFloats> params_, spare_;
  std::vector<float> scratch_;
};

// --echo_transport=shm: the payload both ways through a memfd segment of
// the client's (the request in its first half, the reply in its second),
// which the echo opens by its /proc/<pid>/fd/<fd> name, sent beside each
// header on the socket. Each round trip copies the payload four times, as a
// ps reached through shared memory without reading in place would (the
// client into the segment, the echo out of it and its reply back in, the
// client out), and no socket carries it: what such a ps would cost. The
// segment is sealed against shrinking, so a mapping of it cannot fault.
class SharedSegment {
 public:
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  SharedSegment(SharedSegment&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), bytes_(o.bytes_), base_(std::exchange(o.base_, nullptr)) {}
  ~SharedSegment() {
    if (base_ != nullptr) munmap(base_, bytes_);
    if (fd_ >= 0) close(fd_);
  }

  static absl::StatusOr<SharedSegment> Create(size_t bytes) {
    const int fd = memfd_create("wire_bench_echo", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
    SharedSegment segment(fd, bytes);
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      return absl::InternalError(absl::StrCat("the segment: ", std::strerror(errno)));
    }
    RETURN_IF_ERROR(segment.Map());
    return segment;
  }

  static absl::StatusOr<SharedSegment> Open(const std::string& name, size_t bytes) {
    if (!absl::StartsWith(name, "/proc/")) return absl::InvalidArgumentError("a segment's name");
    const int fd = open(name.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return absl::InternalError(absl::StrCat(name, ": ", std::strerror(errno)));
    SharedSegment segment(fd, bytes);
    struct stat st {};
    const int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes || seals < 0 ||
        (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": not a sealed segment of ", bytes, " bytes"));
    }
    RETURN_IF_ERROR(segment.Map());
    return segment;
  }

  char* data() const { return static_cast<char*>(base_); }
  std::string name() const { return absl::StrCat("/proc/", getpid(), "/fd/", fd_); }

 private:
  SharedSegment(int fd, size_t bytes) : fd_(fd), bytes_(bytes) {}
  absl::Status Map() {
    void* base = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (base == MAP_FAILED)
      return absl::InternalError(absl::StrCat("mmap: ", std::strerror(errno)));
    base_ = base;
    return absl::OkStatus();
  }

  int fd_ = -1;
  size_t bytes_ = 0;
  void* base_ = nullptr;
};

bool EchoOverShm() { return absl::GetFlag(FLAGS_echo_transport) == "shm"; }

// --echo_transport=unix: a Unix stream socket without ZeroMQ. A message is
// [u32 header bytes][u32 payload bytes][header][payload], written at once
// (writev); the receiver reads the payload straight into where it goes
// (the echo's request buffer, the client's parameters): two copies each
// way, both the kernel's, and no I/O thread between a process and its
// socket. What a ps reached over a socket of its own would cost; plaintext
// only. Reads and writes block (bounded by --timeout_s): the echo serves one
// client's whole message at a time, which its clients send whole.
bool EchoOverUnix() { return absl::GetFlag(FLAGS_echo_transport) == "unix"; }

std::string UnixPath(const std::string& endpoint) {
  return absl::StartsWith(endpoint, "ipc://") ? endpoint.substr(6) : endpoint;
}

// The socket address of `path`: InvalidArgument when it is empty or too
// long for one.
absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError("--echo_transport=unix: --endpoint=ipc://PATH");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

void SetTimeouts(int fd, double timeout_s) {
  const auto whole = static_cast<time_t>(timeout_s);
  timeval tv{whole, static_cast<suseconds_t>((timeout_s - static_cast<double>(whole)) * 1e6)};
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

absl::Status ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t got = read(fd, p, n);
    if (got == 0) return absl::UnavailableError("the peer closed");
    if (got < 0) {
      if (errno == EINTR) continue;
      return Errno("read");
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status SendUnixMessage(int fd, absl::string_view header, const char* payload, size_t bytes) {
  const uint32_t lengths[2] = {static_cast<uint32_t>(header.size()), static_cast<uint32_t>(bytes)};
  iovec iov[3] = {{const_cast<uint32_t*>(lengths), sizeof(lengths)},
                  {const_cast<char*>(header.data()), header.size()},
                  {const_cast<char*>(payload), bytes}};
  for (int i = 0; i < 3;) {
    const ssize_t put = writev(fd, iov + i, 3 - i);
    if (put < 0) {
      if (errno == EINTR) continue;
      return Errno("writev");
    }
    size_t left = static_cast<size_t>(put);
    for (; i < 3 && left >= iov[i].iov_len; ++i) left -= iov[i].iov_len;
    if (i < 3) {
      iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
      iov[i].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

// One message: its header into `header`, its payload (exactly `bytes`)
// into `payload`.
absl::Status ReceiveUnixMessage(int fd, std::string* header, char* payload, size_t bytes) {
  uint32_t lengths[2];
  RETURN_IF_ERROR(ReadAll(fd, reinterpret_cast<char*>(lengths), sizeof(lengths)));
  if (lengths[0] > kMaxHeaderBytes || lengths[1] != bytes) {
    return absl::DataLossError(absl::StrCat("a message of ", lengths[0], " + ", lengths[1],
                                            " bytes where ", bytes, " were due"));
  }
  header->resize(lengths[0]);
  RETURN_IF_ERROR(ReadAll(fd, header->data(), header->size()));
  return ReadAll(fd, payload, bytes);
}

absl::Status RunUnixEchoServer(const Cancellation& stop, size_t bytes, EchoWork& work) {
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  const int64_t deadline = MonotonicMicros() + static_cast<int64_t>(timeout_s * 1e6);
  const std::string path = UnixPath(absl::GetFlag(FLAGS_endpoint));
  ASSIGN_OR_RETURN(const sockaddr_un address, UnixAddress(path));
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return Errno("socket");
  std::vector<pollfd> fds = {{listener, POLLIN, 0}};
  absl::Cleanup close_all = [&fds] {
    for (const pollfd& p : fds) close(p.fd);
  };
  // The run's own directory: the previous measurement's echo left its file.
  (void)unlink(path.c_str());
  if (bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(listener, 64) != 0) {
    return Errno(path);
  }
  std::printf("ENDPOINT ipc://%s\n", path.c_str());
  std::fflush(stdout);
  std::vector<float> request(bytes / sizeof(float));
  std::string header;
  while (!stop.cancelled() && MonotonicMicros() < deadline) {
    if (poll(fds.data(), fds.size(), 100) <= 0) continue;  // a signal, or nothing yet
    if (fds[0].revents & POLLIN) {
      const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return Errno("accept");
      SetTimeouts(fd, timeout_s);
      fds.push_back({fd, POLLIN, 0});
    }
    for (size_t i = fds.size(); i-- > 1;) {
      if (fds[i].revents == 0) continue;
      char* const in = reinterpret_cast<char*>(request.data());
      const absl::Status got = ReceiveUnixMessage(fds[i].fd, &header, in, bytes);
      if (!got.ok()) {  // a client that is done closes its socket
        close(fds[i].fd);
        fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      std::vector<zmq::message_t> frames;
      frames.emplace_back(header.data(), header.size());
      frames.emplace_back(in, bytes, nullptr, nullptr);  // not a copy
      work.Apply(&frames);
      RETURN_IF_ERROR(SendUnixMessage(fds[i].fd, header, frames[1].data<char>(), bytes));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ConnectUnix(const std::string& endpoint, double timeout_s) {
  const std::string path = UnixPath(endpoint);
  ASSIGN_OR_RETURN(const sockaddr_un address, UnixAddress(path));
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const absl::Status s = Errno(path);
    close(fd);
    return s;
  }
  SetTimeouts(fd, timeout_s);
  return fd;
}

absl::Status RunEchoServer(const Cancellation& stop) {
  ASSIGN_OR_RETURN(const TransportSecurity security, SecurityFromFlag());
  const size_t bytes = static_cast<size_t>(absl::GetFlag(FLAGS_floats)) * sizeof(float);
  if (EchoOverUnix()) {
    ASSIGN_OR_RETURN(EchoWork work, EchoWork::Create(absl::GetFlag(FLAGS_echo_work), bytes));
    return RunUnixEchoServer(stop, bytes, work);
  }
  const bool shm = EchoOverShm();
  // Over shared memory a message is its header and the segment's name.
  const uint32_t parts = shm ? 1 : PiecesFor(bytes, security.secure()).parts;
  std::map<std::string, SharedSegment> segments;  // by peer
  std::vector<float> request(shm ? bytes / sizeof(float) : 0);
  const int64_t deadline =
      MonotonicMicros() + static_cast<int64_t>(absl::GetFlag(FLAGS_timeout_s) * 1e6);
  SocketOptions options;
  UseCurveServer(security, "ps:0", &options);
  zmq::context_t context(1);
  // The driver's ipc:// endpoint (--echo_transport=ipc), else loopback TCP.
  std::string bind = absl::GetFlag(FLAGS_endpoint);
  if (bind.empty()) bind = "tcp://127.0.0.1:*";
  ASSIGN_OR_RETURN(zmq::socket_t router, BindRouter(context, bind, options));
  std::printf("ENDPOINT %s\n", router.get(zmq::sockopt::last_endpoint).c_str());
  std::fflush(stdout);
  // Each peer's frames (header, payload, ...) until its message's last piece.
  std::map<std::string, std::vector<zmq::message_t>> held;
  ASSIGN_OR_RETURN(EchoWork work, EchoWork::Create(absl::GetFlag(FLAGS_echo_work), bytes));
  zmq::socket_t* sockets[] = {&router};
  try {
    while (!stop.cancelled() && MonotonicMicros() < deadline) {
      const absl::StatusOr<std::vector<bool>> readable = PollReadable(sockets, 100);
      if (!readable.ok() && absl::IsCancelled(readable.status())) continue;  // a signal: see above
      RETURN_IF_ERROR(readable.status());
      if (!(*readable)[0]) continue;
      for (;;) {
        zmq::message_t id;
        if (!router.recv(id, zmq::recv_flags::dontwait)) break;
        std::vector<zmq::message_t>& frames = held[id.to_string()];
        for (bool more = id.more(); more;) {
          zmq::message_t frame;
          (void)router.recv(frame);  // a message's frames arrive together
          more = frame.more();
          frames.push_back(std::move(frame));
        }
        if (frames.size() < 2 * parts) continue;
        SharedSegment* segment = nullptr;
        if (shm) {
          auto it = segments.find(id.to_string());
          if (it == segments.end()) {
            ASSIGN_OR_RETURN(SharedSegment opened,
                             SharedSegment::Open(frames[1].to_string(), 2 * bytes));
            it = segments.emplace(id.to_string(), std::move(opened)).first;
          }
          segment = &it->second;
          // The request into a buffer kept for it, as a ps assembles one.
          std::memcpy(request.data(), segment->data(), bytes);
          frames[1] = zmq::message_t(request.data(), bytes, nullptr, nullptr);
        }
        work.Apply(&frames);
        if (shm) {  // the reply into the segment; on the socket, its header only
          std::memcpy(segment->data() + bytes, frames[1].data(), bytes);
          frames[1] = zmq::message_t();
        }
        // Back as a ps answers: [identity, header, payload] per piece.
        for (size_t i = 0; i + 1 < frames.size(); i += 2) {
          zmq::message_t to;
          to.copy(id);
          (void)router.send(to, zmq::send_flags::sndmore);
          (void)router.send(frames[i], zmq::send_flags::sndmore);
          (void)router.send(frames[i + 1], zmq::send_flags::none);
        }
        frames.clear();
      }
    }
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("echo: ", e.what()));
  }
  return absl::OkStatus();
}

// The header a worker's PUSH_PULL of `floats` carries (piece `part` of
// `layout`), serialized: the echo sends these bytes as its header frame.
std::string EchoHeader(int rank, int64_t floats, const PieceLayout& layout, uint32_t part) {
  proto::Header h;
  h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h.set_job_id(0x1234567890abcdefULL);
  h.set_type(proto::PUSH_PULL);
  h.mutable_sender()->set_type(proto::WORKER);
  h.mutable_sender()->set_index(rank);
  h.set_rank(rank);
  h.set_session(0xfedcba9876543210ULL);
  h.set_request_id(123456);
  h.set_plan_fingerprint(0x0123456789abcdefULL);
  h.set_num_shards(1);
  h.set_range_end(static_cast<uint64_t>(floats));
  h.set_step(123456);
  h.set_version(123456);
  h.set_num_examples(128);
  if (layout.parts > 1) {
    h.set_parts(layout.parts);
    h.set_part(part);
    h.set_piece_bytes(layout.piece_bytes);
  }
  return h.SerializeAsString();
}

// An echo client's checked, timed round trips: `out` is what it sends, `in`
// where the reply lands.
template <typename RoundTrip>
absl::Status TimeEchoClient(const std::vector<float>& out, std::vector<float>& in,
                            RoundTrip round_trip) {
  auto check = [&]() -> absl::Status {
    if (std::memcmp(in.data(), out.data(), out.size() * sizeof(float)) != 0) {
      return absl::DataLossError("the echo came back changed");
    }
    std::fill(in.begin(), in.end(), 0.0f);
    return absl::OkStatus();
  };
  // The sgd echo answers with parameters, not the bytes sent: nothing to
  // compare them with.
  const bool same_bytes = absl::GetFlag(FLAGS_echo_work) != "sgd";
  RETURN_IF_ERROR(round_trip());
  if (same_bytes) RETURN_IF_ERROR(check());
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  RETURN_IF_ERROR(TimeRoundTrips(absl::GetFlag(FLAGS_seconds), timeout_s, round_trip));
  return same_bytes ? check() : absl::OkStatus();
}

absl::Status RunEchoClient() {
  ASSIGN_OR_RETURN(const TransportSecurity security, SecurityFromFlag());
  const int rank = absl::GetFlag(FLAGS_rank);
  const int64_t n = absl::GetFlag(FLAGS_floats);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  const bool shm = EchoOverShm();
  const PieceLayout layout = shm ? PieceLayout() : PiecesFor(bytes, security.secure());
  std::optional<SharedSegment> segment;
  std::string segment_name;
  if (shm) {
    ASSIGN_OR_RETURN(SharedSegment created, SharedSegment::Create(2 * bytes));
    segment.emplace(std::move(created));
    segment_name = segment->name();
  }
  std::vector<std::string> headers;
  for (uint32_t k = 0; k < layout.parts; ++k) headers.push_back(EchoHeader(rank, n, layout, k));
  std::vector<float> out(static_cast<size_t>(n)), in(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<float>(i % 1000 + rank);
  char* const to = reinterpret_cast<char*>(in.data());
  char* const from = reinterpret_cast<char*>(out.data());
  if (EchoOverUnix()) {
    ASSIGN_OR_RETURN(const int fd, ConnectUnix(absl::GetFlag(FLAGS_endpoint), timeout_s));
    absl::Cleanup close_fd = [fd] { close(fd); };
    const std::string header = EchoHeader(rank, n, PieceLayout(), 0);
    std::string reply_header;
    return TimeEchoClient(out, in, [&]() -> absl::Status {
      RETURN_IF_ERROR(SendUnixMessage(fd, header, from, bytes));
      return ReceiveUnixMessage(fd, &reply_header, to, bytes);
    });
  }
  SocketOptions options;
  UseCurveClient(security, absl::StrCat("worker:", rank), "ps:0", &options);
  zmq::context_t context(1);
  ASSIGN_OR_RETURN(zmq::socket_t dealer,
                   ConnectDealer(context, absl::GetFlag(FLAGS_endpoint), options));
  dealer.set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout_s * 1000));
  auto round_trip = [&]() -> absl::Status {
    try {
      for (uint32_t k = 0; k < layout.parts; ++k) {
        // As PsClient sends: the header copied, the payload without a copy.
        zmq::message_t head(headers[k].data(), headers[k].size());
        (void)dealer.send(head, zmq::send_flags::sndmore);
        if (segment.has_value()) {
          std::memcpy(segment->data(), from, bytes);
          (void)dealer.send(zmq::buffer(segment_name), zmq::send_flags::none);
          continue;
        }
        zmq::message_t body(from + k * layout.piece_bytes, layout.Bytes(k, bytes), nullptr,
                            nullptr);
        (void)dealer.send(body, zmq::send_flags::none);
      }
      for (uint32_t k = 0; k < layout.parts; ++k) {
        zmq::message_t head, body;
        if (!dealer.recv(head) || !head.more() || !dealer.recv(body)) {
          return absl::DeadlineExceededError("the echo did not answer");
        }
        if (segment.has_value()) {
          std::memcpy(to, segment->data() + bytes, bytes);
          continue;
        }
        if (body.size() != layout.Bytes(k, bytes)) return absl::DataLossError("a short echo");
        std::memcpy(to + k * layout.piece_bytes, body.data(), body.size());
      }
    } catch (const zmq::error_t& e) {
      return absl::InternalError(absl::StrCat("echo client: ", e.what()));
    }
    return absl::OkStatus();
  };
  return TimeEchoClient(out, in, round_trip);
}

// ---- PUSH_PULL --------------------------------------------------------

// Parameters of version `version`, all of them (see kGrad).
absl::Status CheckParams(const std::vector<float>& params, int64_t version) {
  const float want = static_cast<float>(1.0 - 0.125 * static_cast<double>(version));
  if (version < 1) return absl::DataLossError(absl::StrCat("version ", version, " back"));
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i] != want) {
      return absl::DataLossError(absl::StrCat("parameter ", i, " is ", params[i], " at version ",
                                              version, "; ", want, " expected"));
    }
  }
  return absl::OkStatus();
}

// A client's connection to the ps of --cluster_spec, for a model of one
// tensor of `floats` (one shard), in a job it joined: the chief (rank 0)
// initialises it with `job` (--mode, the workers, kLearningRate set here)
// and parameters of 1, the others register.
absl::StatusOr<std::unique_ptr<PsClient>> JoinJob(int64_t floats, proto::JobConfig job) {
  ASSIGN_OR_RETURN(const ClusterSpec spec,
                   ClusterSpec::FromFile(absl::GetFlag(FLAGS_cluster_spec)));
  const int rank = absl::GetFlag(FLAGS_rank);
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  PsClientOptions options;
  ASSIGN_OR_RETURN(options.security, SecurityFromFlag());
  options.connect_timeout_s = timeout_s;
  options.rpc_timeout_s = timeout_s;
  options.peer_timeout_s = timeout_s;
  options.colocated_ipc = absl::GetFlag(FLAGS_colocated);
  ASSIGN_OR_RETURN(const ShardPlan plan,
                   ShardPlan::Create("wire_bench", {{"w", floats}}, 1, ShardStrategy::kBalanced));
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                   PsClient::Create(spec, spec.TaskForRank(rank), plan, options));
  RETURN_IF_ERROR(client->WaitForServers());
  if (rank == 0) {
    job.set_mode(absl::GetFlag(FLAGS_mode) == "sync" ? proto::SYNC : proto::ASYNC);
    job.set_num_workers(spec.num_workers());
    job.set_learning_rate(kLearningRate);
    RETURN_IF_ERROR(client->Init(job, std::vector<float>(static_cast<size_t>(floats), 1.0f)));
  } else {
    RETURN_IF_ERROR(client->Register(timeout_s).status());
  }
  return client;
}

// A client's end: the chief shuts the ps down once the driver says every
// client is done.
absl::Status LeaveJob(PsClient& client) {
  if (absl::GetFlag(FLAGS_rank) != 0) return absl::OkStatus();
  if (!WaitForSignal(absl::GetFlag(FLAGS_timeout_s))) {
    return absl::DeadlineExceededError("no end signal");
  }
  return client.Shutdown();
}

absl::Status RunPushPullClient() {
  const int64_t n = absl::GetFlag(FLAGS_floats);
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client, JoinJob(n, proto::JobConfig()));
  std::vector<float> params(static_cast<size_t>(n), 1.0f), grads(static_cast<size_t>(n), kGrad);
  const std::vector<EncodedShard> pushed = {
      {proto::F32, 0, {reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)}}};
  std::vector<int64_t> versions = {0};
  std::vector<ShardReply> replies;
  int64_t step = 0;
  auto round_trip = [&]() -> absl::Status {
    RETURN_IF_ERROR(
        client->PushPull(step++, versions, 128, pushed, absl::MakeSpan(params), &replies));
    versions[0] = replies[0].version;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(round_trip());
  RETURN_IF_ERROR(CheckParams(params, versions[0]));
  RETURN_IF_ERROR(TimeRoundTrips(absl::GetFlag(FLAGS_seconds), timeout_s, round_trip));
  RETURN_IF_ERROR(CheckParams(params, versions[0]));
  return LeaveJob(*client);
}

// ---- rows (EMBEDDING_PULL + EMBEDDING_PUSH) ----------------------------

// A rows round trip is a step's sparse traffic: pull n / D rows of D floats
// by id (the rows come back), then push a gradient row for each (acknowledged),
// as pst.Embedding does; n floats each way, as PUSH_PULL. The step's dense
// PUSH_PULL follows, of one float: a ps applies a worker's rows with its
// dense gradient of the step, as in a real job. Each worker owns
// --rows_per_worker ids (disjoint, spread over int64 by a mixer) and walks
// them in blocks of n / D, ids sorted within a block (ps-lite requires
// sorted keys; pstrain takes any order), so that a row's value is known:
// its initial row (common/embedding.h) less 0.125 per visit (SGD, gradient
// 0.5 at lr 0.25, exact in f32), checked at the first and the last round
// trip. Before timing, one pass over every id makes every row (a warm
// table: the steady state of a long job). benchmarks/pslite/pslite_rows.cc
// is the same walk through ps-lite's ZPull / ZPush.
int64_t RowId(int rank, int64_t i) {
  // splitmix64 of (rank, i): distinct for distinct inputs, 63 bits.
  uint64_t z =
      (static_cast<uint64_t>(rank) << 40) + static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<int64_t>((z ^ (z >> 31)) >> 1);
}

absl::Status RunRowsClient() {
  const int rank = absl::GetFlag(FLAGS_rank);
  const int dim = absl::GetFlag(FLAGS_embedding_dim);
  const int64_t floats = absl::GetFlag(FLAGS_floats);
  const int64_t per_worker = absl::GetFlag(FLAGS_rows_per_worker);
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (dim < 1 || floats % dim != 0 || per_worker % (floats / dim) != 0) {
    return absl::InvalidArgumentError(
        "rows: --floats a multiple of --embedding_dim, --rows_per_worker of the rows");
  }
  const int64_t rows = floats / dim;
  const int64_t blocks = per_worker / rows;
  const bool prefetch = absl::GetFlag(FLAGS_rows_prefetch);
  proto::JobConfig job;
  job.set_seed(7);
  proto::EmbeddingTableConfig* table = job.add_tables();
  table->set_name("rows");
  table->set_dim(dim);
  table->set_optimizer(proto::ROW_SGD);
  table->set_lr(kLearningRate);
  table->set_init_std(0.01);
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client, JoinJob(1, job));
  // The blocks' ids, each sorted.
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t j = 0; j < rows; ++j) ids[b].push_back(RowId(rank, b * rows + j));
    std::sort(ids[b].begin(), ids[b].end());
  }
  std::vector<float> pulled(static_cast<size_t>(floats)), grads(static_cast<size_t>(floats), kGrad);
  std::vector<int64_t> versions = {0};
  std::vector<float> param(1, 1.0f);
  const float dense_grad = kGrad;
  const std::vector<EncodedShard> dense = {
      {proto::F32, 0, {reinterpret_cast<const char*>(&dense_grad), sizeof(float)}}};
  std::vector<ShardReply> replies;
  int64_t trip = 0;
  auto round_trip = [&]() -> absl::Status {
    EmbeddingRows r;
    r.dim = dim;
    r.ids = ids[static_cast<size_t>(trip % blocks)];
    r.rows = absl::MakeSpan(pulled);
    RETURN_IF_ERROR(client->EmbeddingPullPrefetched({r}));
    r.grads = grads;
    r.has_grad = true;
    RETURN_IF_ERROR(client->EmbeddingPush(trip, versions, 128, {r}));
    if (prefetch) {
      EmbeddingRows next;
      next.dim = dim;
      next.ids = ids[static_cast<size_t>((trip + 1) % blocks)];
      RETURN_IF_ERROR(client->StageEmbeddingPrefetch({next}));
    }
    RETURN_IF_ERROR(client->PushPull(trip, versions, 128, dense, absl::MakeSpan(param), &replies));
    versions[0] = replies[0].version;
    ++trip;
    return absl::OkStatus();
  };
  // What the round trip just made pulled: the block's rows before its
  // visit number (trip - 1) / blocks.
  auto check = [&]() -> absl::Status {
    const int64_t visits = (trip - 1) / blocks;
    const std::vector<int64_t>& block = ids[static_cast<size_t>((trip - 1) % blocks)];
    std::vector<float> want(static_cast<size_t>(dim));
    for (size_t j = 0; j < block.size(); ++j) {
      InitialRow(*table, job.seed(), 0, block[j], absl::MakeSpan(want));
      for (int64_t v = 0; v < visits; ++v) {
        for (float& x : want) x -= static_cast<float>(kLearningRate) * kGrad;
      }
      if (std::memcmp(want.data(), pulled.data() + j * dim, dim * sizeof(float)) != 0) {
        return absl::DataLossError(absl::StrCat("row ", block[j], " at visit ", visits,
                                                " is not its initial row less 0.125 a visit"));
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(round_trip());
  RETURN_IF_ERROR(check());
  while (trip < blocks) RETURN_IF_ERROR(round_trip());  // every row made
  int64_t before = 0;  // the timed round trips' prefetches count, not the warm-up's
  RETURN_IF_ERROR(TimeRoundTrips(absl::GetFlag(FLAGS_seconds), timeout_s, round_trip,
                                 [&] { before = client->prefetched_tables(); }));
  RETURN_IF_ERROR(check());
  if (prefetch && client->prefetched_tables() == before) {
    return absl::InternalError("--rows_prefetch: no pull took its rows from a prefetch");
  }
  return LeaveJob(*client);
}

// ---- the driver -------------------------------------------------------

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a positive integer"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

absl::StatusOr<WireBenchOptions> OptionsFromFlags() {
  WireBenchOptions o;
  ASSIGN_OR_RETURN(o.sizes, ParseList("sizes", absl::GetFlag(FLAGS_sizes)));
  ASSIGN_OR_RETURN(std::vector<int64_t> workers,
                   ParseList("workers", absl::GetFlag(FLAGS_workers)));
  for (int64_t w : workers) {
    if (w > 256) return absl::InvalidArgumentError("--workers: at most 256");
    o.workers.push_back(static_cast<int>(w));
  }
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_security), ',', absl::SkipEmpty())) {
    if (s != "plain" && s != "curve" && s != "curve-local" && s != "plain-local") {
      return absl::InvalidArgumentError(
          absl::StrCat("--security: '", s, "' (plain, curve, curve-local or plain-local)"));
    }
    o.securities.emplace_back(s);
  }
  if (o.securities.empty()) return absl::InvalidArgumentError("--security is empty");
  o.echo_works.clear();
  if (absl::GetFlag(FLAGS_echo)) {
    o.echo_works = absl::StrSplit(absl::GetFlag(FLAGS_echo_work), ',', absl::SkipEmpty());
    if (o.echo_works.empty()) return absl::InvalidArgumentError("--echo_work is empty");
    for (const std::string& w : o.echo_works) RETURN_IF_ERROR(EchoWork::Create(w, 0).status());
  }
  const std::string ps_flags = absl::GetFlag(FLAGS_ps_flags);
  o.ps_variants.clear();
  for (absl::string_view v : absl::StrSplit(ps_flags, ';')) {
    o.ps_variants.push_back(absl::StrSplit(v, ' ', absl::SkipEmpty()));
  }
  const std::string transport = absl::GetFlag(FLAGS_echo_transport);
  if (transport != "tcp" && transport != "ipc" && transport != "shm" && transport != "unix") {
    return absl::InvalidArgumentError(
        absl::StrCat("--echo_transport: '", transport, "' (tcp, ipc, shm or unix)"));
  }
  if (transport == "unix" && o.echo_works.size() > 0 &&
      std::find(o.securities.begin(), o.securities.end(), "curve") != o.securities.end()) {
    return absl::InvalidArgumentError(
        "--echo_transport=unix is plaintext: --security=plain, curve-local or plain-local");
  }
  o.echo_transport = transport;
  o.gap_us = absl::GetFlag(FLAGS_gap_us);
  if (o.gap_us < 0 || o.gap_us > 1000000) {
    return absl::InvalidArgumentError("--gap_us: 0 to 1000000");
  }
  o.rounds = absl::GetFlag(FLAGS_rounds);
  o.seconds = absl::GetFlag(FLAGS_seconds);
  o.warmup_s = absl::GetFlag(FLAGS_warmup_s);
  if (!(o.warmup_s >= 0 && o.warmup_s <= 60)) {
    return absl::InvalidArgumentError("--warmup_s: 0 to 60");
  }
  o.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  o.mode = absl::GetFlag(FLAGS_mode);
  o.embedding_dim = absl::GetFlag(FLAGS_embedding_dim);
  o.rows_per_worker = absl::GetFlag(FLAGS_rows_per_worker);
  o.rows_prefetch = absl::GetFlag(FLAGS_rows_prefetch);
  if (o.embedding_dim < 0 || o.embedding_dim > kMaxEmbeddingDim) {
    return absl::InvalidArgumentError("--embedding_dim: 0 (dense) to kMaxEmbeddingDim");
  }
  if (o.embedding_dim > 0) {
    // A sync ps applies rows with a step's dense push, which rows round
    // trips do not make.
    if (o.mode != "async") return absl::InvalidArgumentError("--embedding_dim: --mode=async");
    for (int64_t n : o.sizes) {
      if (n % o.embedding_dim != 0 || o.rows_per_worker % (n / o.embedding_dim) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--sizes: ", n, " is not a whole number of rows of --embedding_dim=", o.embedding_dim,
            " dividing --rows_per_worker=", o.rows_per_worker));
      }
    }
  }
  if (o.rounds < 1 || o.seconds <= 0 || o.timeout_s <= o.seconds + o.warmup_s) {
    return absl::InvalidArgumentError(
        "--rounds >= 1, --seconds > 0 and --timeout_s > --seconds + --warmup_s");
  }
  if (o.mode != "async" && o.mode != "sync")
    return absl::InvalidArgumentError("--mode: async or sync");
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return absl::InternalError("cannot find this binary (/proc/self/exe)");
  o.self = std::string(self, static_cast<size_t>(len));
  o.ps_server = absl::GetFlag(FLAGS_ps_server);
  if (o.ps_server.empty()) o.ps_server = o.self.substr(0, o.self.rfind('/') + 1) + "ps_server";
  if (access(o.ps_server.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("no ps_server binary at ", o.ps_server, " (--ps_server)"));
  }
  return o;
}

absl::Status RunRole(const std::string& role, const Cancellation& stop) {
  if (role == "echo_server") return RunEchoServer(stop);
  if (role == "echo_client") return RunEchoClient();
  if (role == "push_pull_client") return RunPushPullClient();
  if (role == "rows_client") return RunRowsClient();
  if (role != "driver") return absl::InvalidArgumentError(absl::StrCat("--role=", role, "?"));
  ASSIGN_OR_RETURN(const WireBenchOptions options, OptionsFromFlags());
  return RunWireBench(options);
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  // The driver's start and end signals are waited for, never delivered:
  // blocked before any thread starts, so every thread inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  absl::ParseCommandLine(argc, argv);
  pstrain::InitLogging(argv[0]);
  // As a ps and a worker have it, the echo too (GLIBC_TUNABLES=
  // glibc.malloc.check=0 measures glibc's defaults).
  pstrain::KeepFreedMemoryForReuse();
  const pstrain::Cancellation& stop = pstrain::InstallShutdownHandlers();
  return pstrain::ExitWith("wire_bench", pstrain::RunRole(absl::GetFlag(FLAGS_role), stop), stop);
}

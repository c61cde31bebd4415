#include "transport/local_links.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "transport/local_route.h"

namespace pstrain {
namespace {

// The ps's greeting: kGreeting, then its nonce. The worker's answer:
// kGreeting, its name's length (u32), the name, its nonce, its MAC. The
// welcome: kWelcome, then the ps's MAC.
constexpr char kGreeting[16] = "PSTRAIN-LINK/2";
constexpr char kWelcome[16] = "PSTRAIN-LINK-OK";
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kGreetingBytes = 16 + kNonceBytes;
constexpr size_t kWelcomeBytes = 16 + kMacBytes;
constexpr size_t kAnswerFixedBytes = 16 + 4;
constexpr char kWorkerLabel[] = "pstrain/link/v2/worker";
constexpr char kPsLabel[] = "pstrain/link/v2/ps";
constexpr uint32_t kMaxHelloField = 256;
constexpr int kListenBacklog = 128;
// Connections one Serve accepts at most.
constexpr int kMaxAcceptsPerServe = 64;
// How long the listening socket rests after accept ran out of descriptors.
constexpr int64_t kAcceptPauseUs = 100'000;
// Routes of links: a zero byte, 'L', and 8 bytes of a counter. libzmq's
// own ids are 5 bytes long; a ZeroMQ peer that chooses one of this form
// is dropped (PsServer::ServeReadable).
constexpr char kRoutePrefix[2] = {'\0', 'L'};
constexpr size_t kRouteBytes = 10;

// The peer of connected Unix socket `fd`: its process, user.
absl::StatusOr<ucred> PeerOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::UnavailableError(absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  return cred;
}

// Room for a large step's message in the socket at once (the kernel caps
// it at net.core.wmem_max: 208 KiB on a stock Linux), so that a writer
// hands it over with fewer waits for the reader.
constexpr int kLinkBufferBytes = 4 << 20;

void WidenBuffer(int fd) {
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kLinkBufferBytes, sizeof(kLinkBufferBytes));
}

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

std::string Nonce() {
  std::string nonce(kNonceBytes, '\0');
  randombytes_buf(nonce.data(), nonce.size());
  return nonce;
}

absl::string_view AsView(const std::array<uint8_t, 32>& mac) {
  return {reinterpret_cast<const char*>(mac.data()), mac.size()};
}

// Whether `given` (kMacBytes) is `expected`, in constant time.
bool SameMac(const char* given, const std::array<uint8_t, 32>& expected) {
  return sodium_memcmp(given, expected.data(), expected.size()) == 0;
}

// Links within a quarter of the descriptors this process may open: the
// rest are ZeroMQ's, the checkpoints', the logs'.
size_t MaxLinks() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return kMaxLocalLinks;
  }
  return std::clamp<size_t>(static_cast<size_t>(limit.rlim_cur / 4), 4, kMaxLocalLinks);
}

// Reads exactly `n` bytes from blocking `fd` (its SO_RCVTIMEO bounding
// each read): Unavailable on a timeout or error, FailedPrecondition when
// the peer closed.
absl::Status ReadExactly(int fd, char* into, size_t n, const std::string& path,
                         absl::string_view what) {
  for (size_t got = 0; got < n;) {
    const ssize_t r = ::read(fd, into + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::UnavailableError(
          absl::StrCat(path, ": no ", what, " in time (", std::strerror(errno), ")"));
    }
    if (r == 0) {
      // The ps greets every connection it takes; it answers with a welcome
      // only a task whose key it holds.
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": the ps closed the connection before its ", what,
          what == "greeting" ? " (it takes no more connections now: too many links, or "
                               "admissions under way; its log says which)"
                             : " (it does not take this task's key?)"));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

std::array<uint8_t, 32> LinkMac(absl::string_view key, absl::string_view label,
                                absl::string_view first, absl::string_view second,
                                absl::string_view name) {
  std::array<uint8_t, 32> out{};
  crypto_generichash_state state;
  crypto_generichash_init(&state, reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                          out.size());
  for (absl::string_view part : {label, first, second, name}) {
    crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(part.data()),
                              part.size());
  }
  crypto_generichash_final(&state, out.data(), out.size());
  return out;
}

absl::StatusOr<std::unique_ptr<LocalLinks>> LocalLinks::Listen(
    const std::string& path, std::map<std::string, std::string> passwords,
    int64_t max_message_bytes, double hello_timeout_s) {
  absl::StatusOr<sockaddr_un> address = UnixAddress(path);
  if (!address.ok()) return address.status();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0 ||
      ::listen(fd, kListenBacklog) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen at ", path, ": ", std::strerror(e)));
  }
  return std::unique_ptr<LocalLinks>(
      new LocalLinks(fd, std::move(passwords), max_message_bytes, hello_timeout_s));
}

LocalLinks::LocalLinks(int listen_fd, std::map<std::string, std::string> passwords,
                       int64_t max_message_bytes, double hello_timeout_s)
    : listen_fd_(listen_fd),
      passwords_(std::move(passwords)),
      max_payload_bytes_(static_cast<size_t>(std::max<int64_t>(0, max_message_bytes))),
      max_queued_bytes_(max_payload_bytes_ + kMaxQueuedReplyBytes),
      hello_timeout_us_(static_cast<int64_t>(hello_timeout_s * 1e6)),
      max_links_(MaxLinks()) {}

LocalLinks::~LocalLinks() {
  links_.clear();  // each link closes its descriptor
  ::close(listen_fd_);
}

void LocalLinks::AddPollFds(std::vector<PollFd>* fds) const {
  if (MonotonicMicros() >= accept_paused_until_us_) fds->push_back({listen_fd_, POLLIN, 0});
  for (const auto& [fd, c] : links_) {
    const bool writing = c.admitted && !c.link->writer().empty();
    fds->push_back({fd, static_cast<short>(POLLIN | (writing ? POLLOUT : 0)), 0});
  }
}

bool LocalLinks::IsLinkRoute(absl::string_view route) {
  return route.size() == kRouteBytes && route[0] == kRoutePrefix[0] && route[1] == kRoutePrefix[1];
}

void LocalLinks::Serve(absl::Span<const PollFd> polled, size_t budget,
                       std::vector<RoutedMessage>* out) {
  bool accept = false;
  std::vector<StreamMessage> messages;
  for (const PollFd& p : polled) {
    if (p.fd == listen_fd_) {
      accept = (p.revents & POLLIN) != 0;
      continue;
    }
    auto it = links_.find(p.fd);
    if (it == links_.end() || p.revents == 0) continue;  // closed since the poll, or idle
    Conn& c = it->second;
    if (!c.admitted) {
      ReadHello(c);
      continue;
    }
    if ((p.revents & POLLOUT) != 0) {
      if (absl::Status s = c.link->Flush(); !s.ok()) {
        Close(p.fd, "");  // the worker is gone
        continue;
      }
    }
    if ((p.revents & (POLLIN | POLLERR)) == 0) continue;
    if (out->size() >= kMaxMessagesPerServe) continue;  // read at the next poll
    messages.clear();
    const absl::Status s = c.link->Receive(budget, &messages);
    for (StreamMessage& m : messages) {
      RoutedMessage r;
      r.identity = c.route;
      r.user_id = c.name;
      r.message = std::move(m.message);
      r.wire_bytes = m.wire_bytes;
      r.local = true;
      r.fd = p.fd;
      out->push_back(std::move(r));
    }
    if (!s.ok()) {
      // A clean close between messages is a worker's end; the rest is not.
      Close(p.fd, absl::IsUnavailable(s) ? "" : absl::StrCat(c.name, ": ", s.message()));
    }
  }
  // Hellos that are late.
  const int64_t now = MonotonicMicros();
  std::vector<int> late;
  for (const auto& [fd, c] : links_) {
    if (!c.admitted && now > c.deadline_us) late.push_back(fd);
  }
  for (int fd : late) {
    Close(fd, absl::StrCat("no admission within ", hello_timeout_us_ / 1e6, " s"),
          /*refused=*/true);
  }
  // Last: a descriptor closed above may be numbered anew.
  if (accept) Accept();
}

void LocalLinks::Accept() {
  for (int i = 0; i < kMaxAcceptsPerServe; ++i) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of descriptors (EMFILE, ENFILE, ENOBUFS): the connection
        // waits in the backlog; looked at again in a while.
        LOG_FIRST_N(WARNING, 20) << "Unix socket: accept failed: " << std::strerror(errno);
        accept_paused_until_us_ = MonotonicMicros() + kAcceptPauseUs;
      }
      return;
    }
    absl::StatusOr<ucred> peer = PeerOf(fd);
    std::string refusal;
    if (!peer.ok()) {
      refusal = std::string(peer.status().message());
    } else if (peer->uid != ::geteuid()) {
      refusal = absl::StrCat("a process of uid ", peer->uid, ", not this user's");
    } else if (links_.size() >= max_links_ || hellos_ >= kMaxLocalHellos) {
      refusal = absl::StrCat("too many connections (", links_.size(), ", ", hellos_,
                             " not admitted yet)");
    }
    Conn c;
    c.nonce = Nonce();
    const std::string greeting = std::string(kGreeting, sizeof(kGreeting)) + c.nonce;
    // The socket is new and empty: the greeting goes at once, or not at all.
    if (refusal.empty() &&
        ::send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            static_cast<ssize_t>(greeting.size())) {
      refusal = "gone before its greeting";
    }
    if (!refusal.empty()) {
      ++refused_;
      ::close(fd);
      LOG_FIRST_N(WARNING, 20) << "Unix socket: refused a connection: " << refusal;
      continue;
    }
    WidenBuffer(fd);
    c.route.assign(kRoutePrefix, 2);
    c.route.append(reinterpret_cast<const char*>(&next_route_), 8);
    ++next_route_;
    c.deadline_us = MonotonicMicros() + hello_timeout_us_;
    c.link = std::make_unique<StreamLink>(fd, max_payload_bytes_);
    routes_[c.route] = fd;
    links_.emplace(fd, std::move(c));
    ++hellos_;
  }
}

void LocalLinks::ReadHello(Conn& c) {
  const int fd = c.link->fd();
  for (;;) {
    size_t need = kAnswerFixedBytes;
    if (c.hello.size() >= kAnswerFixedBytes) {
      const uint32_t name_bytes = LoadU32(c.hello.data() + 16);
      if (std::memcmp(c.hello.data(), kGreeting, sizeof(kGreeting)) != 0 || name_bytes == 0 ||
          name_bytes > kMaxHelloField) {
        return Close(fd, "not a pstrain worker's answer", /*refused=*/true);
      }
      need += name_bytes + kNonceBytes + kMacBytes;
      if (c.hello.size() == need) {
        const absl::string_view answer = c.hello;
        const std::string name(answer.substr(kAnswerFixedBytes, name_bytes));
        const absl::string_view nonce = answer.substr(kAnswerFixedBytes + name_bytes, kNonceBytes);
        const char* mac = c.hello.data() + kAnswerFixedBytes + name_bytes + kNonceBytes;
        auto it = passwords_.find(name);
        if (it == passwords_.end() ||
            !SameMac(mac, LinkMac(it->second, kWorkerLabel, c.nonce, nonce, name))) {
          return Close(fd,
                       absl::StrCat("an answer as \"", absl::CEscape(name), "\" without its key"),
                       /*refused=*/true);
        }
        if (per_task_[name] >= kMaxLinksPerTask) {
          return Close(fd, absl::StrCat(name, " has ", kMaxLinksPerTask, " links already"),
                       /*refused=*/true);
        }
        const std::string welcome =
            std::string(kWelcome, sizeof(kWelcome)) +
            std::string(AsView(LinkMac(it->second, kPsLabel, nonce, c.nonce, name)));
        if (::send(fd, welcome.data(), welcome.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            static_cast<ssize_t>(welcome.size())) {
          return Close(fd, "", /*refused=*/true);  // gone already
        }
        c.name = name;
        c.hello.clear();
        c.hello.shrink_to_fit();
        c.admitted = true;
        ++per_task_[name];
        --hellos_;
        return;
      }
    }
    char buf[kAnswerFixedBytes + kMaxHelloField + kNonceBytes + kMacBytes];
    const ssize_t n = ::read(fd, buf, need - c.hello.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) return Close(fd, "", /*refused=*/true);  // closed before it was admitted
    c.hello.append(buf, static_cast<size_t>(n));
  }
}

void LocalLinks::Close(int fd, const std::string& why, bool refused) {
  auto it = links_.find(fd);
  if (it == links_.end()) return;
  if (!why.empty()) {
    LOG_FIRST_N(WARNING, 20) << "Unix socket: closed a connection: " << why;
  }
  if (refused) ++refused_;
  Conn& c = it->second;
  if (c.admitted) {
    if (--per_task_[c.name] == 0) per_task_.erase(c.name);
    closed_.push_back(fd);  // it may have sent part of a message in pieces
  } else {
    --hellos_;
  }
  routes_.erase(c.route);
  links_.erase(it);  // closes the descriptor
}

void LocalLinks::Linger(int timeout_ms) {
  const int64_t deadline = MonotonicMicros() + int64_t{timeout_ms} * 1000;
  std::vector<char> scratch(64 * 1024);
  for (;;) {
    std::vector<PollFd> fds;
    for (const auto& [fd, c] : links_) {
      if (c.admitted && !c.link->writer().empty()) fds.push_back({fd, POLLIN | POLLOUT, 0});
    }
    const int64_t left_ms = (deadline - MonotonicMicros()) / 1000;
    if (fds.empty() || left_ms <= 0) return;
    if (!Poll({}, absl::MakeSpan(fds), static_cast<int>(left_ms)).ok()) return;
    for (const PollFd& p : fds) {
      if (p.revents == 0) continue;
      // What a worker still writes is read and dropped (nothing more is
      // answered), so that one halfway through a large request gets to
      // read these replies.
      if ((p.revents & (POLLIN | POLLERR)) != 0 &&
          ::read(p.fd, scratch.data(), scratch.size()) == 0) {
        Close(p.fd, "");
        continue;
      }
      if (!links_.at(p.fd).link->Flush().ok()) Close(p.fd, "");
    }
  }
}

absl::Status LocalLinks::Send(absl::string_view route, const proto::Header& header,
                              zmq::message_t body) {
  auto r = routes_.find(route);
  if (r == routes_.end()) return absl::UnavailableError("its Unix socket connection closed");
  Conn& c = links_.at(r->second);
  if (!c.admitted) return absl::UnavailableError("not admitted on the Unix socket");
  // One reply of the largest size a task takes never blocks the next.
  if (c.link->writer().queued_messages() >= kMaxQueuedReplies ||
      c.link->writer().queued_bytes() >= max_queued_bytes_) {
    return absl::UnavailableError(absl::StrCat(c.link->writer().queued_messages(), " replies (",
                                               c.link->writer().queued_bytes(),
                                               " bytes) wait unread on its Unix socket"));
  }
  if (absl::Status s = c.link->Send(header, std::move(body)); !s.ok()) {
    Close(r->second, "");
    return s;
  }
  return absl::OkStatus();
}

std::vector<int> LocalLinks::TakeClosed() {
  std::vector<int> closed;
  closed.swap(closed_);
  return closed;
}

absl::StatusOr<std::unique_ptr<StreamLink>> ConnectLocal(const std::string& path, int64_t pid,
                                                         const std::string& name,
                                                         const std::string& password,
                                                         int64_t max_message_bytes,
                                                         double timeout_s) {
  if (name.empty() || name.size() > kMaxHelloField || password.size() < 16 ||
      password.size() > 64) {
    return absl::InvalidArgumentError("a task name of 1 to 256 bytes and a key of 16 to 64");
  }
  absl::StatusOr<sockaddr_un> address = UnixAddress(path);
  if (!address.ok()) return address.status();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  auto link = std::make_unique<StreamLink>(
      fd, static_cast<size_t>(std::max<int64_t>(0, max_message_bytes)));
  // Blocking, each call at most timeout_s (a connect to a full backlog
  // too): the ps greets and answers in its next loops.
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_s);
  tv.tv_usec = static_cast<suseconds_t>((timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", path, ": ", std::strerror(errno)));
  }
  absl::StatusOr<ucred> peer = PeerOf(fd);
  if (!peer.ok()) return peer.status();
  if (peer->pid != pid || peer->uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": it is process ", peer->pid, "'s (uid ", peer->uid,
        ") that listens there, not the ps's (", pid, "): another was put in its place"));
  }
  char greeting[kGreetingBytes];
  RETURN_IF_ERROR(ReadExactly(fd, greeting, sizeof(greeting), path, "greeting"));
  if (std::memcmp(greeting, kGreeting, sizeof(kGreeting)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a pstrain ps's greeting"));
  }
  const absl::string_view ps_nonce(greeting + sizeof(kGreeting), kNonceBytes);
  const std::string nonce = Nonce();
  const auto name_bytes = static_cast<uint32_t>(name.size());
  std::string answer(kGreeting, sizeof(kGreeting));
  answer.append(reinterpret_cast<const char*>(&name_bytes), 4);
  answer += name;
  answer += nonce;
  answer += std::string(AsView(LinkMac(password, kWorkerLabel, ps_nonce, nonce, name)));
  RETURN_IF_ERROR(WriteAll(fd, answer, path));
  char welcome[kWelcomeBytes];
  RETURN_IF_ERROR(ReadExactly(fd, welcome, sizeof(welcome), path, "welcome"));
  if (std::memcmp(welcome, kWelcome, sizeof(kWelcome)) != 0 ||
      !SameMac(welcome + sizeof(kWelcome), LinkMac(password, kPsLabel, nonce, ps_nonce, name))) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": the peer does not hold the job's secret"));
  }
  WidenBuffer(fd);
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    return absl::UnavailableError(absl::StrCat("O_NONBLOCK: ", std::strerror(errno)));
  }
  return link;
}

}  // namespace pstrain

// A ps's Unix socket end to end (transport/local_links.h) on real
// sockets, and the stream's framing (transport/stream_link.h):
//  - a task with its password gets in, its requests carry its name, and
//    the ps's replies come back, parameters read straight into place;
//  - wrong passwords, unknown names, bytes that are not a hello, silence
//    and a process that took the path's place are refused, the last
//    without ever seeing the password;
//  - a frame that breaks the rules closes its own link only; a worker
//    that stops reading fills its own queue only;
//  - frames parse the same whatever the reads' sizes.

#include "transport/local_links.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "transport/job_secret.h"

namespace pstrain {
namespace {

proto::Header Request(uint64_t id) {
  proto::Header h;
  h.set_type(proto::PUSH_PULL);
  h.set_request_id(id);
  h.set_shard_index(2);
  return h;
}

// Connects to `path` and writes `bytes` (a hello of its own making).
int RawConnect(const std::string& path, const std::string& bytes) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  if (!bytes.empty()) {
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  return fd;
}

// Whether the ps closed `fd` within `ms` (a read sees the end, after
// whatever the ps said first: its greeting).
bool ClosedWithin(int fd, int ms) {
  const int64_t deadline = MonotonicMicros() + int64_t{ms} * 1000;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int64_t left_ms = std::max<int64_t>(0, (deadline - MonotonicMicros()) / 1000);
    if (::poll(&p, 1, static_cast<int>(left_ms)) <= 0) return false;
    char buf[256];
    if (::read(fd, buf, sizeof(buf)) <= 0) return true;
  }
}

class LocalLinksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    dir_ = "/tmp/ll" + std::to_string(::getpid()) + "_" + std::to_string(n++);
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "/ps-0.sock";
    passwords_["worker:0"] = secret_.LocalPassword("worker:0");
    passwords_["worker:1"] = secret_.LocalPassword("worker:1");
    auto links = LocalLinks::Listen(path_, passwords_, kMaxBytes, /*hello_timeout_s=*/0.5);
    ASSERT_TRUE(links.ok()) << links.status();
    links_ = *std::move(links);
  }
  void TearDown() override {
    links_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Serves the ps's end once (as its loop does), up to `ms` of waiting.
  void ServeOnce(int ms, std::vector<RoutedMessage>* out) {
    std::vector<PollFd> fds;
    links_->AddPollFds(&fds);
    auto polled = Poll({}, absl::MakeSpan(fds), ms);
    ASSERT_TRUE(polled.ok()) << polled.status();
    links_->Serve(fds, SIZE_MAX, out);
  }

  // Serves until `done()` (bounded: 10 s).
  template <typename F>
  std::vector<RoutedMessage> ServeUntil(F done) {
    std::vector<RoutedMessage> got;
    for (int i = 0; i < 1000 && !done(got); ++i) ServeOnce(10, &got);
    return got;
  }

  // ConnectLocal as `name` with `password` while this thread serves.
  absl::StatusOr<std::unique_ptr<StreamLink>> Connect(const std::string& name,
                                                      const std::string& password,
                                                      int64_t pid = ::getpid()) {
    std::atomic<bool> done{false};
    absl::StatusOr<std::unique_ptr<StreamLink>> link = absl::UnknownError("not run");
    std::thread worker([&] {
      link = ConnectLocal(path_, pid, name, password, kMaxBytes, 5.0);
      done = true;
    });
    ServeUntil([&](const std::vector<RoutedMessage>&) { return done.load(); });
    worker.join();
    return link;
  }

  // Reads messages off `link` until `count` came (bounded: 10 s).
  std::vector<StreamMessage> ReadMessages(StreamLink& link, size_t count) {
    std::vector<StreamMessage> got;
    for (int i = 0; i < 1000 && got.size() < count; ++i) {
      std::vector<RoutedMessage> none;
      ServeOnce(0, &none);  // the ps writes what waits
      pollfd p{link.fd(), POLLIN, 0};
      ::poll(&p, 1, 10);
      const absl::Status s = link.Receive(SIZE_MAX, &got);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) break;
    }
    return got;
  }

  static constexpr int64_t kMaxBytes = 1 << 20;
  JobSecret secret_ = JobSecret::Generate();
  std::map<std::string, std::string> passwords_;
  std::string dir_;
  std::string path_;
  std::unique_ptr<LocalLinks> links_;
};

TEST_F(LocalLinksTest, ATaskWithItsPasswordGetsInAndTheRepliesComeBackInPlace) {
  auto link = Connect("worker:1", secret_.LocalPassword("worker:1"));
  ASSERT_TRUE(link.ok()) << link.status();
  std::vector<float> grad(1000);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i) * 0.5f;
  ASSERT_TRUE((*link)
                  ->SendBorrowed(Request(7), {reinterpret_cast<const char*>(grad.data()),
                                              grad.size() * sizeof(float)})
                  .ok());
  ASSERT_TRUE((*link)->SendBorrowed(Request(8), {}).ok());
  std::vector<RoutedMessage> in =
      ServeUntil([](const std::vector<RoutedMessage>& got) { return got.size() >= 2; });
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].user_id, "worker:1");
  EXPECT_TRUE(in[0].local);
  EXPECT_TRUE(LocalLinks::IsLinkRoute(in[0].identity));
  ASSERT_TRUE(in[0].message.ok()) << in[0].message.status();
  EXPECT_EQ(in[0].message->header.request_id(), 7u);
  EXPECT_EQ(in[0].wire_bytes, Request(7).ByteSizeLong() + grad.size() * sizeof(float));
  std::vector<float> got(grad.size());
  in[0].message->CopyPayloadTo(absl::MakeSpan(got));
  EXPECT_EQ(got, grad);
  ASSERT_TRUE(in[1].message.ok());
  EXPECT_FALSE(in[1].message->has_payload);

  // Replies: the first's parameters straight into the worker's buffer (its
  // sink), the second's into a buffer of the reader's own.
  std::vector<float> params(grad.size(), -1.0f);
  (*link)->reader().set_sink([&](const proto::Header& h, size_t bytes) {
    return h.request_id() == 7 && bytes == params.size() * sizeof(float)
               ? absl::Span<char>(reinterpret_cast<char*>(params.data()), bytes)
               : absl::Span<char>();
  });
  ASSERT_TRUE(links_->Send(in[0].identity, Request(7), CopyFrame(grad)).ok());
  ASSERT_TRUE(links_->Send(in[0].identity, Request(9), CopyFrame({1.0f, 2.0f})).ok());
  std::vector<StreamMessage> replies = ReadMessages(**link, 2);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_TRUE(replies[0].payload_placed);
  EXPECT_EQ(params, grad);
  ASSERT_TRUE(replies[1].message.ok());
  EXPECT_FALSE(replies[1].payload_placed);
  EXPECT_EQ(replies[1].message->payload_floats(), 2u);
  EXPECT_EQ(links_->refused(), 0);
}

TEST_F(LocalLinksTest, WrongPasswordsUnknownNamesAndStrangeBytesAreRefused) {
  // Another job's password; this job's for a name the ps does not know;
  // one name's password given for another.
  for (const auto& [name, password] : std::vector<std::pair<std::string, std::string>>{
           {"worker:0", JobSecret::Generate().LocalPassword("worker:0")},
           {"worker:7", secret_.LocalPassword("worker:7")},
           {"worker:1", secret_.LocalPassword("worker:0")}}) {
    auto link = Connect(name, password);
    EXPECT_EQ(link.status().code(), absl::StatusCode::kFailedPrecondition) << name;
    EXPECT_TRUE(
        absl::StrContains(link.status().message(), "closed the connection before its welcome"))
        << link.status();
  }
  EXPECT_EQ(links_->refused(), 3);
  // Bytes that are not an answer (a ZeroMQ greeting), an answer claiming
  // a name too long to be one, an answer whose MAC is not the key's, and
  // silence past the admission's time.
  const int zmtp =
      RawConnect(path_, std::string("\xff\0\0\0\0\0\0\0\x01\x7f", 10) + std::string(14, '\0'));
  std::string huge("PSTRAIN-LINK/2\0\0", 16);
  huge += std::string("\xff\xff\xff\x7f", 4);
  const int big = RawConnect(path_, huge);
  std::string forged("PSTRAIN-LINK/2\0\0", 16);
  forged += std::string("\x08\0\0\0", 4) + "worker:0" + std::string(64, 'x');
  const int guessed = RawConnect(path_, forged);
  const int silent = RawConnect(path_, "");
  std::vector<RoutedMessage> in =
      ServeUntil([&](const std::vector<RoutedMessage>&) { return links_->refused() >= 7; });
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(links_->refused(), 7);
  for (int fd : {zmtp, big, guessed, silent}) {
    EXPECT_TRUE(ClosedWithin(fd, 1000));
    ::close(fd);
  }
  EXPECT_EQ(links_->size(), 0u);
  EXPECT_TRUE(links_->TakeClosed().empty());  // none was admitted
  // A task gets in, up to kMaxLinksPerTask links at once.
  std::vector<std::unique_ptr<StreamLink>> held;
  for (size_t k = 0; k < kMaxLinksPerTask; ++k) {
    auto link = Connect("worker:0", secret_.LocalPassword("worker:0"));
    ASSERT_TRUE(link.ok()) << link.status();
    held.push_back(*std::move(link));
  }
  EXPECT_FALSE(Connect("worker:0", secret_.LocalPassword("worker:0")).ok());
  EXPECT_TRUE(Connect("worker:1", secret_.LocalPassword("worker:1")).ok());
}

// A child process listening at the ps's path in its place: it greets
// whoever connects as a ps would, reads what they send for a second, sends
// a welcome without the key's MAC, and reports through a pipe how many
// bytes it got and whether the key was among them.
struct Impostor {
  pid_t pid = -1;
  int report = -1;
};

Impostor StartImpostor(const std::string& path, const std::string& key) {
  int report[2], ready[2];
  if (::pipe(report) != 0 || ::pipe(ready) != 0) return {};
  const pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGPIPE, SIG_IGN);  // the worker may be gone when it writes
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    ::unlink(path.c_str());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 4) != 0) {
      ::_exit(1);
    }
    char one = 1;
    (void)!::write(ready[1], &one, 1);
    const int conn = ::accept(fd, nullptr, nullptr);
    std::string greeting("PSTRAIN-LINK/2\0\0", 16);
    greeting += std::string(32, '\x01');
    (void)!::write(conn, greeting.data(), greeting.size());
    timeval tv{1, 0};
    ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::read(conn, buf, sizeof(buf))) > 0;)
      got.append(buf, static_cast<size_t>(n));
    std::string welcome("PSTRAIN-LINK-OK\0", 16);
    welcome += std::string(32, '\0');
    (void)!::write(conn, welcome.data(), welcome.size());
    for (ssize_t n; (n = ::read(conn, buf, sizeof(buf))) > 0;)
      got.append(buf, static_cast<size_t>(n));
    const long out[2] = {static_cast<long>(got.size()),
                         got.find(key) != std::string::npos ? 1L : 0L};
    (void)!::write(report[1], out, sizeof(out));
    ::_exit(0);
  }
  ::close(report[1]);  // the child's: a child that dies ends the parent's read
  ::close(ready[1]);
  char one;
  const bool up = child > 0 && ::read(ready[0], &one, 1) == 1;
  ::close(ready[0]);
  if (!up) return {};
  return {child, report[0]};
}

TEST_F(LocalLinksTest, AProcessInThePathsPlaceLearnsNothingOfTheKey) {
  links_.reset();  // the ps is away; a process of this user took its path
  const std::string key = secret_.LocalPassword("worker:0");
  // The worker was told this process (the ps) listens there: the kernel
  // names the impostor, and the worker says nothing.
  Impostor impostor = StartImpostor(path_, key);
  ASSERT_GT(impostor.pid, 0);
  auto link = ConnectLocal(path_, ::getpid(), "worker:0", key, kMaxBytes, 5.0);
  EXPECT_EQ(link.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(link.status().message(), "not the ps's")) << link.status();
  long got[2] = {-1, -1};
  ASSERT_EQ(::read(impostor.report, got, sizeof(got)), static_cast<ssize_t>(sizeof(got)));
  EXPECT_EQ(got[0], 0);
  ::waitpid(impostor.pid, nullptr, 0);
  ::close(impostor.report);
  // Told the impostor's own process id (as a ps of another pid namespace
  // could mislead it), the worker answers its greeting, but with a MAC,
  // never the key, and takes no welcome that lacks the ps's MAC.
  impostor = StartImpostor(path_, key);
  ASSERT_GT(impostor.pid, 0);
  link = ConnectLocal(path_, impostor.pid, "worker:0", key, kMaxBytes, 5.0);
  EXPECT_EQ(link.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(link.status().message(), "does not hold the job's secret"))
      << link.status();
  link = absl::UnknownError("closed");
  ASSERT_EQ(::read(impostor.report, got, sizeof(got)), static_cast<ssize_t>(sizeof(got)));
  EXPECT_GT(got[0], 0);  // its answer
  EXPECT_EQ(got[1], 0);  // not the key
  ::waitpid(impostor.pid, nullptr, 0);
  ::close(impostor.report);
}

TEST_F(LocalLinksTest, AFrameBreakingTheRulesClosesItsOwnLinkOnly) {
  auto good = Connect("worker:0", secret_.LocalPassword("worker:0"));
  ASSERT_TRUE(good.ok()) << good.status();
  // Each on a link of its own: a wrong magic; a payload over the limit
  // (never allocated); a payload of bytes that are not whole floats.
  const auto prefix = [](uint32_t magic, uint32_t header, uint64_t payload) {
    std::string p(16, '\0');
    std::memcpy(p.data(), &magic, 4);
    std::memcpy(p.data() + 4, &header, 4);
    std::memcpy(p.data() + 8, &payload, 8);
    return p;
  };
  for (const std::string& frame :
       {prefix(0x12345678, 4, 0), prefix(kStreamMagic, 4, uint64_t{1} << 40),
        prefix(kStreamMagic, 4, 6), prefix(kStreamMagic, 0, 0)}) {
    auto bad = Connect("worker:1", secret_.LocalPassword("worker:1"));
    ASSERT_TRUE(bad.ok()) << bad.status();
    ASSERT_EQ(::write((*bad)->fd(), frame.data(), frame.size()),
              static_cast<ssize_t>(frame.size()));
    ServeUntil([&](const std::vector<RoutedMessage>&) { return ClosedWithin((*bad)->fd(), 0); });
    EXPECT_TRUE(ClosedWithin((*bad)->fd(), 0));
  }
  EXPECT_EQ(links_->TakeClosed().size(), 4u);
  // A header that is not a pstrain header is that message's error; the
  // link goes on.
  std::string junk = prefix(kStreamMagic, 3, 0) + "\xff\xff\xff";
  ASSERT_EQ(::write((*good)->fd(), junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  ASSERT_TRUE((*good)->SendBorrowed(Request(3), {}).ok());
  std::vector<RoutedMessage> in =
      ServeUntil([](const std::vector<RoutedMessage>& got) { return got.size() >= 2; });
  ASSERT_EQ(in.size(), 2u);
  EXPECT_FALSE(in[0].message.ok());
  ASSERT_TRUE(in[1].message.ok());
  EXPECT_EQ(in[1].message->header.request_id(), 3u);
  EXPECT_EQ(links_->size(), 1u);
}

TEST_F(LocalLinksTest, AWorkerThatStopsReadingFillsItsOwnQueueOnly) {
  auto idle = Connect("worker:0", secret_.LocalPassword("worker:0"));
  auto busy = Connect("worker:1", secret_.LocalPassword("worker:1"));
  ASSERT_TRUE(idle.ok() && busy.ok());
  ASSERT_TRUE((*idle)->SendBorrowed(Request(1), {}).ok());
  ASSERT_TRUE((*busy)->SendBorrowed(Request(1), {}).ok());
  std::vector<RoutedMessage> in =
      ServeUntil([](const std::vector<RoutedMessage>& got) { return got.size() >= 2; });
  ASSERT_EQ(in.size(), 2u);
  const std::string idle_route = in[0].user_id == "worker:0" ? in[0].identity : in[1].identity;
  const std::string busy_route = in[0].user_id == "worker:0" ? in[1].identity : in[0].identity;
  // 64 KiB replies to a worker that never reads: the socket fills, then
  // the queue, then sends fail, none of them blocking.
  const std::vector<float> big(16 * 1024, 1.0f);
  absl::Status s;
  int sent = 0;
  for (; sent < 5000 && s.ok(); ++sent) s = links_->Send(idle_route, Request(2), CopyFrame(big));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "wait unread")) << s;
  // The other worker is answered meanwhile.
  ASSERT_TRUE(links_->Send(busy_route, Request(5), CopyFrame({3.0f})).ok());
  std::vector<StreamMessage> replies = ReadMessages(**busy, 1);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].message->header.request_id(), 5u);
}

// The stream's frames in memory: a source handing out `chunk` bytes a
// read, then EAGAIN.
std::vector<StreamMessage> ParseInChunks(const std::string& bytes, size_t chunk,
                                         absl::Status* status) {
  StreamReader reader(1 << 20);
  std::vector<StreamMessage> out;
  size_t at = 0;
  for (size_t round = 0; round <= bytes.size(); ++round) {
    size_t handed = 0;
    *status = reader.Read(
        [&](char* buf, size_t n) -> long {
          if (at == bytes.size()) {
            errno = EAGAIN;
            return -1;
          }
          if (handed > 0) {  // one read a round: the next waits for poll
            errno = EAGAIN;
            return -1;
          }
          const size_t take = std::min({n, chunk, bytes.size() - at});
          std::memcpy(buf, bytes.data() + at, take);
          at += take;
          handed = take;
          return static_cast<long>(take);
        },
        SIZE_MAX, &out);
    if (!status->ok() || at == bytes.size()) break;
  }
  return out;
}

TEST(StreamReaderTest, FramesParseTheSameWhateverTheReadsSizes) {
  // Three messages: small, large (read straight into its buffer), none.
  StreamWriter writer;
  std::vector<float> large(50'000);
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<float>(i);
  writer.Queue(Request(1), CopyFrame({1.0f, 2.0f, 3.0f}));
  writer.QueueBorrowed(Request(2),
                       {reinterpret_cast<const char*>(large.data()), large.size() * sizeof(float)});
  writer.Queue(Request(3), zmq::message_t());
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::string bytes;
  std::thread drain([&] {
    char buf[65536];
    for (ssize_t n; (n = ::read(fds[1], buf, sizeof(buf))) > 0;)
      bytes.append(buf, static_cast<size_t>(n));
  });
  while (!writer.empty()) {
    ASSERT_TRUE(writer.Flush(fds[0]).ok());
    pollfd p{fds[0], POLLOUT, 0};
    ::poll(&p, 1, 100);
  }
  ::close(fds[0]);
  drain.join();
  ::close(fds[1]);
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{16}, size_t{4096}, size_t{1} << 20}) {
    absl::Status status;
    std::vector<StreamMessage> got = ParseInChunks(bytes, chunk, &status);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(got.size(), 3u) << chunk;
    for (int k = 0; k < 3; ++k) {
      ASSERT_TRUE(got[k].message.ok());
      EXPECT_EQ(got[k].message->header.request_id(), static_cast<uint64_t>(k + 1));
    }
    EXPECT_EQ(got[0].message->payload_floats(), 3u);
    std::vector<float> back(large.size());
    ASSERT_EQ(got[1].message->payload_floats(), large.size());
    got[1].message->CopyPayloadTo(absl::MakeSpan(back));
    EXPECT_EQ(back, large) << chunk;
    EXPECT_FALSE(got[2].message->has_payload);
  }
  // Cut short: the end inside a frame is data lost, not a message.
  StreamReader reader(1 << 20);
  std::vector<StreamMessage> out;
  size_t at = 0;
  const std::string cut = bytes.substr(0, bytes.size() - 5);
  const absl::Status end = reader.Read(
      [&](char* buf, size_t n) -> long {
        const size_t take = std::min(n, cut.size() - at);
        std::memcpy(buf, cut.data() + at, take);
        at += take;
        return static_cast<long>(take);
      },
      SIZE_MAX, &out);
  EXPECT_EQ(end.code(), absl::StatusCode::kDataLoss) << end;
  EXPECT_EQ(out.size(), 2u);  // the third's header was cut
}

}  // namespace
}  // namespace pstrain

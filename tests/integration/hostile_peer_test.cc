// Hostile and dead peers against real processes.
//
// A live ps_server (CURVE on, as by default) gets garbage at every layer
// (raw TCP bytes that are not ZeroMQ, a ZMTP frame cut off mid-way: both
// refused at the handshake; well-framed messages that are not pstrain and
// pstrain messages with a truncated payload, from the authenticated chief)
// and must answer or drop each, count it, and keep serving correct
// requests. tests/integration/attack_test.cc has the deliberate attacks. A worker or a ps
// killed mid-training must stop the job with a message naming it, within
// seconds.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/protocol_client.h"
#include "transport/job_secret.h"
#include "transport/transport.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using testing::BinaryPath;
using testing::ProtocolClient;
using testing::RunningProcess;

constexpr int kShard = 16;  // floats this test's "model" has

int ConnectTcp(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

// Writes what the ps will take: with CURVE on it hangs up as soon as the
// greeting shows the NULL mechanism, so later bytes may meet a closed socket.
void WriteAll(int fd, const std::string& bytes) {
  (void)send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

// A ZMTP 3.0 greeting and READY (NULL mechanism, DEALER), so that the next
// bytes are read as message frames.
std::string ZmtpHandshake() {
  std::string g(64, '\0');
  g[0] = '\xff';
  g[9] = '\x7f';
  g[10] = 3;
  g.replace(12, 4, "NULL");
  std::string body = "\x05READY";
  body += "\x0bSocket-Type";
  body += std::string("\0\0\0\x06", 4) + "DEALER";
  return g + "\x04" + static_cast<char>(body.size()) + body;
}

class LivePs : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::MakeTempDir("hostile");
    const std::string spec = testing::WriteLocalSpec(dir, 1, 1);
    const std::string tf_config = testing::TfConfigFor(spec, "ps", 0);
    port_ = std::stoi(tf_config.substr(tf_config.rfind("localhost:") + 10));
    auto parsed = ClusterSpec::FromJson(tf_config, "tf_config");
    ASSERT_TRUE(parsed.ok());
    job_id_ = parsed->JobId();
    ps_ = RunningProcess::Start(BinaryPath("ps_server"), {"--peer_timeout_s=60", testing::SecretFlag()},
                                tf_config);
    ASSERT_NE(ps_, nullptr);
    ASSERT_TRUE(ps_->WaitForOutput("listening on", 10)) << ps_->output();
    auto secret = JobSecret::Load(testing::TestSecretFile());
    ASSERT_TRUE(secret.ok()) << secret.status();
    client_ = std::make_unique<ProtocolClient>(
        testing::AuthenticatedAs(*secret, "worker:0", port_, job_id_));
    proto::Header init = client_->Header(proto::INIT);
    init.mutable_job()->set_mode(proto::SYNC);
    init.mutable_job()->set_num_workers(1);
    init.mutable_job()->set_learning_rate(0.1);
    auto reply = client_->Call(init, std::vector<float>(kShard, 1.0f));
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->header.error().code(), 0) << reply->header.error().message();
  }

  // The ps still answers a correct PULL with the right parameters.
  void ExpectStillServing() {
    auto pull = client_->Call(client_->Header(proto::PULL));
    ASSERT_TRUE(pull.ok()) << pull.status();
    EXPECT_EQ(pull->header.error().code(), 0) << pull->header.error().message();
    EXPECT_EQ(pull->payload_floats(), static_cast<size_t>(kShard));
  }

  proto::ShardStats Stats() {
    auto r = client_->Call(client_->Header(proto::STATS));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->header.stats() : proto::ShardStats();
  }

  void TearDown() override {
    if (client_ == nullptr) return;
    auto r = client_->Call(client_->Header(proto::SHUTDOWN));
    EXPECT_TRUE(r.ok());
    auto code = ps_->Wait(10);
    ASSERT_TRUE(code.ok()) << ps_->output();
    EXPECT_EQ(*code, 0) << "the ps must survive everything above and exit cleanly\n" << ps_->output();
  }

  int port_ = 0;
  uint64_t job_id_ = 0;
  std::unique_ptr<RunningProcess> ps_;
  std::unique_ptr<ProtocolClient> client_;
};

TEST_F(LivePs, SurvivesRawTcpGarbage) {
  for (int i = 0; i < 20; ++i) {
    const int fd = ConnectTcp(port_);
    std::string junk(4096, '\0');
    for (size_t j = 0; j < junk.size(); ++j) junk[j] = static_cast<char>((j * 2654435761u + i) >> 7);
    (void)write(fd, junk.data(), junk.size());
    close(fd);
  }
  ExpectStillServing();
  // The ps counts a refusal when it handles the socket monitor's events,
  // which may come after the STATS above: ask again, for a bounded time.
  const int64_t start = MonotonicMicros();
  int64_t refused = Stats().handshakes_refused();
  while (refused < 1 && SecondsSince(start) < 10) refused = Stats().handshakes_refused();
  EXPECT_GE(refused, 1);
}

TEST_F(LivePs, SurvivesAZmtpFrameCutOffMidway) {
  const int fd = ConnectTcp(port_);
  WriteAll(fd, ZmtpHandshake());
  // A long frame announcing 1 MiB, of which 100 bytes arrive before the
  // connection drops.
  std::string frame = "\x02";
  frame += std::string("\0\0\0\0\0\x10\0\0", 8);
  frame += std::string(100, 'x');
  WriteAll(fd, frame);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  close(fd);
  ExpectStillServing();
}

TEST_F(LivePs, AnswersGarbageMessagesAndCountsThem) {
  client_->SendRaw({"\x08\xff\xff\xff\xff\xff garbage that is not a header"});
  auto r = client_->Receive();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->header.error().message(), HasSubstr("malformed"));

  client_->SendRaw({"a", "b", "c", "d"});
  r = client_->Receive();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->header.error().message(), HasSubstr("got 4"));

  const proto::ShardStats s = Stats();
  EXPECT_EQ(s.malformed_requests(), 2);
  ExpectStillServing();
}

// Protobuf logs a line for every string field with invalid UTF-8; a peer
// must not be able to flood the ps's log with them.
TEST_F(LivePs, InvalidUtf8DoesNotFloodTheLog) {
  proto::Header h = client_->Header(proto::BARRIER);
  h.set_barrier_name("x");
  std::string bytes = h.SerializeAsString();
  bytes[bytes.rfind('x')] = '\xff';  // the name's one byte: not UTF-8
  for (int i = 0; i < 300; ++i) {
    client_->SendRaw({bytes});
    auto r = client_->Receive();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->header.error().message(), HasSubstr("malformed"));
  }
  ExpectStillServing();
  TearDown();
  client_.reset();
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(ps_->output(), '\n')) {
    lines += absl::StrContains(line, "UTF-8");
  }
  EXPECT_GE(lines, 1) << ps_->output();  // the first is shown
  EXPECT_LE(lines, 2) << ps_->output();
}

// A push in pieces (transport/pieces.h) is put back together and applied;
// pieces that do not follow, and pieces of a request that never comes in
// pieces, are answered as malformed, and the ps goes on serving.
TEST_F(LivePs, AssemblesAPushInPiecesAndRefusesPiecesOutOfPlace) {
  proto::Header push = client_->Header(proto::PUSH_PULL);
  push.set_num_examples(1);
  push.set_parts(2);
  push.set_piece_bytes(kShard / 2 * sizeof(float));
  push.set_part(0);
  ASSERT_TRUE(client_->Send(push, std::vector<float>(kShard / 2, 1.0f)).ok());
  push.set_part(1);
  auto r = client_->Call(push, std::vector<float>(kShard / 2, 2.0f));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->header.error().code(), 0) << r->header.error().message();
  EXPECT_EQ(r->header.version(), 1);
  ASSERT_EQ(r->payload_floats(), static_cast<size_t>(kShard));
  std::vector<float> params(kShard);
  r->CopyPayloadTo(absl::MakeSpan(params));
  EXPECT_FLOAT_EQ(params[0], 1.0f - 0.1f * 1.0f);           // lr 0.1, the first piece's 1
  EXPECT_FLOAT_EQ(params[kShard - 1], 1.0f - 0.1f * 2.0f);  // the second piece's 2

  proto::Header orphan = client_->Header(proto::PUSH);
  orphan.set_parts(2);
  orphan.set_piece_bytes(kShard / 2 * sizeof(float));
  orphan.set_part(1);
  r = client_->Call(orphan, std::vector<float>(kShard / 2, 1.0f));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->header.error().message(), HasSubstr("without the pieces before it"));
  // The refusal names the request, so that its sender is not left waiting.
  EXPECT_EQ(r->header.request_id(), orphan.request_id());
  EXPECT_EQ(r->header.type(), proto::PUSH);

  proto::Header pull = client_->Header(proto::PULL);
  pull.set_parts(2);
  pull.set_piece_bytes(4);
  r = client_->Call(pull, std::vector<float>(1, 1.0f));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->header.error().message(), HasSubstr("PULL in pieces"));
  EXPECT_EQ(r->header.request_id(), pull.request_id());

  EXPECT_EQ(Stats().malformed_requests(), 2);
  ExpectStillServing();
}

TEST_F(LivePs, RefusesTruncatedPayloadsAndCountsThem) {
  // PUSH whose payload frame is missing.
  auto r = client_->Call(client_->Header(proto::PUSH));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->header.error().message(), HasSubstr("payload of 0 bytes"));
  // PUSH whose payload stops short of the range.
  r = client_->Call(client_->Header(proto::PUSH), std::vector<float>(kShard / 2, 0.5f));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->header.error().message(), HasSubstr("payload of 32 bytes"));
  // Payload bytes that are not whole floats.
  std::string header_bytes = client_->Header(proto::PUSH).SerializeAsString();
  client_->SendRaw({header_bytes, std::string(63, '\x01')});
  r = client_->Receive();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->header.error().message(), HasSubstr("not whole f32"));

  const proto::ShardStats s = Stats();
  EXPECT_EQ(s.rejected_requests(), 2);
  EXPECT_EQ(s.malformed_requests(), 1);
  EXPECT_EQ(s.updates_applied(), 0);  // nothing reached the parameters
  ExpectStillServing();
}

// Two workers and one ps training (sync); one process is killed and not
// restarted.
class DeadPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("deadpeer");
    spec_ = testing::WriteLocalSpec(dir_, 1, 2);
    ps_ = RunningProcess::Start(BinaryPath("ps_server"), {"--peer_timeout_s=3", testing::SecretFlag()},
                                testing::TfConfigFor(spec_, "ps", 0));
    for (int w = 0; w < 2; ++w) {
      workers_.push_back(RunningProcess::Start(
          BinaryPath("worker"),
          {"--data_dir=" + testing::SourcePath("data/mnist"), "--epochs=5", "--max_steps=120",
           "--peer_timeout_s=3", "--recovery_timeout_s=3", "--heartbeat_interval_s=0.5",
           "--log_every_steps=10", testing::SecretFlag()},
          testing::TfConfigFor(spec_, "worker", w)));
    }
    ASSERT_NE(ps_, nullptr);
    for (auto& w : workers_) ASSERT_NE(w, nullptr);
    // Training is under way once a worker reports progress.
    ASSERT_TRUE(workers_[1]->WaitForOutput("step 10/", 60)) << workers_[1]->output();
  }

  std::string dir_, spec_;
  std::unique_ptr<RunningProcess> ps_;
  std::vector<std::unique_ptr<RunningProcess>> workers_;
};

TEST_F(DeadPeer, AKilledWorkerIsDeclaredDeadAndTheOthersFinishWithoutIt) {
  workers_[1]->Signal(SIGKILL);
  auto chief = workers_[0]->Wait(300);  // the chief trains on alone (slow under ASan)
  ASSERT_TRUE(chief.ok()) << workers_[0]->output();
  EXPECT_EQ(*chief, 0) << workers_[0]->output();
  auto ps = ps_->Wait(30);
  ASSERT_TRUE(ps.ok()) << ps_->output();
  EXPECT_EQ(*ps, 0) << ps_->output();
  // The ps named it and stopped waiting for it.
  EXPECT_THAT(ps_->output(), HasSubstr("worker:1"));
  EXPECT_THAT(ps_->output(), HasSubstr("presumed dead; not waited for"));
}

TEST_F(DeadPeer, AKilledPsThatNeverComesBackFailsTheWorkersAfterTheRecoveryTimeout) {
  ps_->Signal(SIGKILL);
  const int64_t start = MonotonicMicros();
  for (auto& w : workers_) {
    auto code = w->Wait(60);
    ASSERT_TRUE(code.ok()) << w->output();
    EXPECT_EQ(*code, 1);
    // Each saw the connection close (its heartbeat or its request,
    // whichever read first), waited for the ps to come back, and named it
    // when it did not.
    EXPECT_THAT(w->output(),
                ::testing::ContainsRegex("closed its connection|its Unix socket closed"));
    EXPECT_THAT(w->output(), HasSubstr("cannot reach ps:0 (localhost:"));
  }
  EXPECT_LT(SecondsSince(start), 40);
}

}  // namespace
}  // namespace pstrain

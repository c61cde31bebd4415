// Attacks, each against a live ps_server process (and two against a whole
// training job): what a stranger on the network, an authenticated but
// misbehaving task (an insider holding the job secret), and a flood can do.
// After each the ps must still be up and serving, the parameters untouched
// by anything refused, and the counters must say what was refused.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/cluster_spec.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/protocol_client.h"
#include "tests/test_util/run_outputs.h"
#include "transport/job_secret.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using testing::BinaryPath;
using testing::ProtocolClient;
using testing::ProtocolClientOptions;
using testing::RunningProcess;

constexpr int kShard = 16;

int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) n += absl::StrContains(line, needle);
  return n;
}

// Peak resident memory of a process, in MiB (VmHWM), or -1.
double PeakRssMib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmHWM:")) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

// Resident memory of a process now, in MiB (VmRSS), or -1.
double RssMib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmRSS:")) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

// `h` as piece `part` of `parts` pieces of `piece_bytes` (transport/pieces.h).
proto::Header AsPiece(proto::Header h, uint32_t part, uint32_t parts, uint64_t piece_bytes) {
  h.set_part(part);
  h.set_parts(parts);
  h.set_piece_bytes(piece_bytes);
  return h;
}

class AttackedPs : public ::testing::Test {
 protected:
  // A ps for a spec of one ps and two workers; `flags` add to its own.
  void StartPs(std::vector<std::string> flags, bool init = true) {
    const std::string dir = testing::MakeTempDir("attack");
    spec_ = testing::WriteLocalSpec(dir, 1, 2);
    const std::string tf_config = testing::TfConfigFor(spec_, "ps", 0);
    port_ = std::stoi(tf_config.substr(tf_config.rfind("localhost:") + 10));
    auto parsed = ClusterSpec::FromJson(tf_config, "tf_config");
    ASSERT_TRUE(parsed.ok());
    job_id_ = parsed->JobId();
    if (std::none_of(flags.begin(), flags.end(), [](const std::string& f) {
          return absl::StartsWith(f, "--peer_timeout_s=");
        })) {
      flags.push_back("--peer_timeout_s=120");
    }
    insecure_ = std::find(flags.begin(), flags.end(), "--insecure") != flags.end();
    if (!insecure_) flags.push_back(testing::SecretFlag());
    ps_ = RunningProcess::Start(BinaryPath("ps_server"), flags, tf_config);
    ASSERT_NE(ps_, nullptr);
    ASSERT_TRUE(ps_->WaitForOutput("listening on", 10)) << ps_->output();
    auto secret = JobSecret::Load(testing::TestSecretFile());
    ASSERT_TRUE(secret.ok());
    secret_ = *secret;
    chief_ = std::make_unique<ProtocolClient>(As("worker:0", 0));
    if (init) {
      ASSERT_EQ(Init(*chief_, 2), "");
    }
  }

  // Options to speak as task `name` (rank `rank`): authenticated unless
  // the ps runs --insecure.
  ProtocolClientOptions As(const std::string& name, int rank) {
    ProtocolClientOptions o;
    if (!insecure_) o = testing::AuthenticatedAs(*secret_, name, port_, job_id_);
    o.port = port_;
    o.job_id = job_id_;
    o.rank = rank;
    o.shard_floats = kShard;
    return o;
  }

  // A stranger: no keys at all, but the right job id (it is a hash of the
  // spec's addresses, so anyone can compute it).
  ProtocolClientOptions Stranger() {
    ProtocolClientOptions o;
    o.port = port_;
    o.job_id = job_id_;
    o.shard_floats = kShard;
    return o;
  }

  // INIT for an async job; "" or the error message.
  std::string Init(ProtocolClient& client, int workers) {
    proto::Header init = client.Header(proto::INIT);
    init.mutable_job()->set_mode(proto::ASYNC);
    init.mutable_job()->set_num_workers(workers);
    init.mutable_job()->set_learning_rate(0.1);
    auto r = client.Call(init, std::vector<float>(kShard, 1.0f));
    if (!r.ok()) return std::string(r.status().message());
    return r->header.error().message();
  }

  // The chief's PULL: the shard's parameters, which must be intact.
  std::vector<float> Params() {
    auto r = chief_->Call(chief_->Header(proto::PULL));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->header.error().code() != 0) {
      ADD_FAILURE() << (r.ok() ? r->header.error().message() : "");
      return {};
    }
    std::vector<float> p(r->payload_floats());
    r->CopyPayloadTo(absl::MakeSpan(p));
    return p;
  }

  proto::ShardStats Stats() {
    auto r = chief_->Call(chief_->Header(proto::STATS));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->header.stats() : proto::ShardStats();
  }

  // Expects that `client`'s request gets no answer at all.
  static void ExpectNoAnswer(ProtocolClient& client, const proto::Header& h,
                             const std::vector<float>& payload = {}) {
    auto r = client.Call(h, payload, /*timeout_s=*/1.0);
    EXPECT_FALSE(r.ok()) << "answered " << proto::MessageType_Name(h.type()) << ": "
                         << r->header.DebugString();
  }

  // The chief shuts the ps down; it must exit 0, having survived.
  void ShutDownAndExpectCleanExit() {
    auto r = chief_->Call(chief_->Header(proto::SHUTDOWN));
    ASSERT_TRUE(r.ok()) << r.status();
    auto code = ps_->Wait(20);
    ASSERT_TRUE(code.ok()) << ps_->output();
    EXPECT_EQ(*code, 0) << ps_->output();
  }

  std::string spec_;
  int port_ = 0;
  uint64_t job_id_ = 0;
  bool insecure_ = false;
  std::optional<JobSecret> secret_;
  std::unique_ptr<RunningProcess> ps_;
  std::unique_ptr<ProtocolClient> chief_;
};

TEST_F(AttackedPs, StrangersAreRefusedAtTheHandshakeAndNeverAnswered) {
  StartPs({});
  ProtocolClient plain(Stranger());
  ProtocolClientOptions other_id = Stranger();
  other_id.job_id = job_id_ + 1;
  ProtocolClient wrong_job_id(other_id);
  ProtocolClientOptions wrong_secret = testing::AuthenticatedAs(JobSecret::Generate(), "worker:0",
                                                                port_, job_id_);
  ProtocolClient other_job(wrong_secret);
  // Knows the ps's public key (it is not secret), but its own key is no
  // task's: the ZAP handler refuses it.
  ProtocolClientOptions leaked = Stranger();
  leaked.keys = JobSecret::Generate().KeyPairFor("worker:0");
  leaked.server_key = secret_->KeyPairFor("ps:0").public_key;
  ProtocolClient with_server_key(leaked);
  for (ProtocolClient* stranger : {&plain, &wrong_job_id, &other_job, &with_server_key}) {
    ExpectNoAnswer(*stranger, stranger->Header(proto::SHUTDOWN));
    ExpectNoAnswer(*stranger, stranger->Header(proto::PULL));
    proto::Header push = stranger->Header(proto::PUSH);
    push.set_num_examples(1);
    ExpectNoAnswer(*stranger, push, std::vector<float>(kShard, 3e38f));
  }
  EXPECT_EQ(Params(), std::vector<float>(kShard, 1.0f));
  const proto::ShardStats s = Stats();
  EXPECT_GE(s.handshakes_refused(), 4);
  EXPECT_EQ(s.updates_applied(), 0);
  EXPECT_EQ(s.malformed_requests() + s.rejected_requests(), 0);  // none reached the handler
  ShutDownAndExpectCleanExit();
  // Logged once for the address, not once per attempt (ZeroMQ retried
  // each stranger's connection several times).
  EXPECT_EQ(CountLines(ps_->output(), "refused a connection from 127.0.0.1"), 1) << ps_->output();
}

TEST_F(AttackedPs, ARepeatedRequestIsAnsweredAgainButAppliedOnce) {
  StartPs({});
  proto::Header push = chief_->Header(proto::PUSH);
  push.set_num_examples(1);
  for (int i = 0; i < 3; ++i) {
    auto r = chief_->Call(push, std::vector<float>(kShard, 1.0f));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->header.error().code(), 0) << r->header.error().message();
    EXPECT_EQ(r->header.request_id(), push.request_id());
  }
  EXPECT_EQ(Params(), std::vector<float>(kShard, 0.9f));  // 1 - 0.1 * 1, once
  const proto::ShardStats s = Stats();
  EXPECT_EQ(s.updates_applied(), 1);
  EXPECT_EQ(s.duplicate_requests(), 2);
  ShutDownAndExpectCleanExit();
}

TEST_F(AttackedPs, AnAuthenticatedWorkerCannotActAsAnotherRankOrTheChief) {
  StartPs({});
  ProtocolClientOptions as_rank0 = As("worker:1", 0);  // worker:1's keys, rank 0 in the header
  ProtocolClient impostor(as_rank0);
  proto::Header push = impostor.Header(proto::PUSH);
  push.set_num_examples(1);
  auto r = impostor.Call(push, std::vector<float>(kShard, 5.0f));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->header.error().message(), HasSubstr("comes from worker:1"));
  r = impostor.Call(impostor.Header(proto::SHUTDOWN));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->header.error().code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  ProtocolClient worker1(As("worker:1", 1));
  r = worker1.Call(worker1.Header(proto::SHUTDOWN));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->header.error().message(), HasSubstr("only the chief may SHUTDOWN"));
  EXPECT_NE(Init(worker1, 2), "");
  // A client tool reads counters, and nothing else.
  ProtocolClientOptions client_options = As("client", 0);
  client_options.sender = proto::CLIENT;
  ProtocolClient client(client_options);
  r = client.Call(client.Header(proto::STATS));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->header.error().code(), 0);
  r = client.Call(client.Header(proto::PULL));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->header.error().code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(r->payload_floats(), 0u);
  EXPECT_EQ(Params(), std::vector<float>(kShard, 1.0f));
  EXPECT_EQ(Stats().unauthorized_requests(), 5);
  ShutDownAndExpectCleanExit();
}

TEST_F(AttackedPs, ACraftedInitCannotReshapeOrCrashThePs) {
  for (const bool insecure : {false, true}) {
    SCOPED_TRACE(insecure ? "insecure" : "CURVE");
    StartPs(insecure ? std::vector<std::string>{"--insecure"} : std::vector<std::string>{},
            /*init=*/false);
    // More workers than the spec: the old ps indexed its liveness table
    // past its end and aborted in CheckLiveness.
    EXPECT_THAT(Init(*chief_, 9), HasSubstr("cluster spec has 2"));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a few liveness checks
    EXPECT_EQ(Init(*chief_, 2), "");
    EXPECT_THAT(Init(*chief_, 2), HasSubstr("already initialised"));
    EXPECT_EQ(Params(), std::vector<float>(kShard, 1.0f));
    ShutDownAndExpectCleanExit();
  }
}

TEST_F(AttackedPs, AHugeFiniteGradientCannotPoisonTheModel) {
  for (const bool insecure : {false, true}) {
    SCOPED_TRACE(insecure ? "insecure" : "CURVE");
    StartPs(insecure ? std::vector<std::string>{"--insecure"} : std::vector<std::string>{});
    ProtocolClient worker1(As("worker:1", 1));
    proto::Header push = worker1.Header(proto::PUSH);
    push.set_num_examples(1);
    auto r = worker1.Call(push, std::vector<float>(kShard, 3e38f));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->header.error().message(), HasSubstr("not finite in f32"));
    EXPECT_EQ(r->header.job_id(), 0u);  // a refusal says nothing about the job
    EXPECT_EQ(Params(), std::vector<float>(kShard, 1.0f));
    EXPECT_EQ(Stats().nonfinite_gradients_dropped(), 1);
    ShutDownAndExpectCleanExit();
  }
}

TEST_F(AttackedPs, WithoutASecretAClientStillCannotStopThePs) {
  StartPs({"--insecure"});
  ProtocolClientOptions o = Stranger();
  o.sender = proto::CLIENT;
  ProtocolClient client(o);
  auto r = client.Call(client.Header(proto::SHUTDOWN));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->header.error().code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  client.SendRaw({"garbage"});
  r = client.Receive();
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->header.error().message(), HasSubstr("malformed"));
  EXPECT_EQ(r->header.job_id(), 0u);
  EXPECT_EQ(r->header.range_end(), 0u);
  EXPECT_EQ(r->header.version(), 0);
  EXPECT_EQ(Params(), std::vector<float>(kShard, 1.0f));
  ShutDownAndExpectCleanExit();
  EXPECT_THAT(ps_->output(), HasSubstr("--insecure"));
}

TEST_F(AttackedPs, AFloodOfAThousandIdentitiesLeavesThePsServing) {
  StartPs({});
  const int64_t start = MonotonicMicros();
  for (int batch = 0; batch < 10; ++batch) {
    std::vector<std::unique_ptr<ProtocolClient>> flood;
    for (int i = 0; i < 100; ++i) {
      ProtocolClientOptions o = Stranger();
      o.routing_id = absl::StrCat("flood-", batch, "-", i);
      if (i % 2 == 1) {  // half try CURVE with keys of their own
        o.keys = JobSecret::Generate().KeyPairFor("worker:0");
        o.server_key = secret_->KeyPairFor("ps:0").public_key;
      }
      flood.push_back(std::make_unique<ProtocolClient>(o));
      (void)flood.back()->Send(flood.back()->Header(proto::SHUTDOWN));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(Params(), std::vector<float>(kShard, 1.0f));
  // Every one of them was refused (events arrive a little after the fact).
  int64_t refused = 0;
  for (int i = 0; i < 100 && refused < 1000; ++i) {
    refused = Stats().handshakes_refused();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(refused, 1000);
  EXPECT_LT(SecondsSince(start), 60);
  ShutDownAndExpectCleanExit();
  EXPECT_LE(CountLines(ps_->output(), "refused a connection from"), 2) << ps_->output();
}

TEST_F(AttackedPs, A200MegabyteFrameIsDroppedWithoutBeingHeld) {
  StartPs({"--max_message_mb=64"});
  const std::string big(200u << 20, 'x');
  ProtocolClient stranger(Stranger());
  stranger.SendRaw({big});
  // The chief itself (authenticated) cannot make the ps buffer it either:
  // ZeroMQ drops the connection once the frame passes --max_message_mb.
  chief_->SendRaw({chief_->Header(proto::PUSH).SerializeAsString(), big});
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(Params(), std::vector<float>(kShard, 1.0f));  // the chief reconnected
  const double peak = PeakRssMib(ps_->pid());
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, 150) << "the ps held the frame";
  ShutDownAndExpectCleanExit();
}

// Two clients of one rank (a worker restarted while its old process still
// talks, or an insider with the rank's key): a request is applied at most
// once per (rank, session, request id), whatever sessions speak in
// between, and the client its rank left behind is refused.
TEST_F(AttackedPs, ARepeatIsNotAppliedAgainAfterAnotherClientOfItsRankSpoke) {
  StartPs({});
  ProtocolClient first(As("worker:1", 1));
  ProtocolClient second(As("worker:1", 1));
  // Each push a step of the rank's (async: a step below the rank's clock
  // is a duplicate, whoever sends it).
  int64_t step = 0;
  auto push_from = [&step](ProtocolClient& c, uint64_t session) {
    proto::Header h = c.Header(proto::PUSH);
    h.set_session(session);
    h.set_num_examples(1);
    h.set_step(step++);
    return h;
  };
  const std::vector<float> ones(kShard, 1.0f);
  const proto::Header seven = push_from(first, 0x5);
  auto r = first.Call(seven, ones);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->header.error().code(), 0) << r->header.error().message();
  r = second.Call(push_from(second, 0x52), ones);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->header.error().code(), 0) << r->header.error().message();
  // The first client's request again: answered as before, not applied.
  r = first.Call(seven, ones);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->header.error().code(), 0) << r->header.error().message();
  EXPECT_EQ(r->header.request_id(), seven.request_id());
  // A new request of the first client: refused, its rank has moved on.
  r = first.Call(push_from(first, 0x5), ones);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->header.error().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(r->header.error().message(), HasSubstr("newer client"));
  EXPECT_FALSE(r->header.rejoin());
  // The second goes on.
  r = second.Call(push_from(second, 0x52), ones);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->header.error().code(), 0) << r->header.error().message();
  float expected = 1.0f;
  for (int i = 0; i < 3; ++i) expected -= 0.1f * 1.0f;
  EXPECT_EQ(Params(), std::vector<float>(kShard, expected));
  const proto::ShardStats s = Stats();
  EXPECT_EQ(s.updates_applied(), 3);
  EXPECT_EQ(s.duplicate_requests(), 1);
  EXPECT_EQ(s.retired_session_requests(), 1);
  ShutDownAndExpectCleanExit();
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PSTRAIN_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PSTRAIN_UNDER_ASAN 1
#endif

// Under AddressSanitizer a process keeps the memory it frees in a
// quarantine (to catch uses after free), which reads as memory held: the
// processes started while this lives keep none, so that their resident
// memory is what they hold.
class NoAsanQuarantine {
 public:
  NoAsanQuarantine() {
#ifdef PSTRAIN_UNDER_ASAN
    const char* given = std::getenv("ASAN_OPTIONS");
    if (given != nullptr) given_ = given;
    setenv("ASAN_OPTIONS", absl::StrCat(given_, given_.empty() ? "" : ":", "quarantine_size_mb=0").c_str(),
           /*overwrite=*/1);
#endif
  }
  ~NoAsanQuarantine() {
#ifdef PSTRAIN_UNDER_ASAN
    if (given_.empty()) {
      unsetenv("ASAN_OPTIONS");
    } else {
      setenv("ASAN_OPTIONS", given_.c_str(), /*overwrite=*/1);
    }
#endif
  }
  NoAsanQuarantine(const NoAsanQuarantine&) = delete;
  NoAsanQuarantine& operator=(const NoAsanQuarantine&) = delete;

 private:
  [[maybe_unused]] std::string given_;
};

// A push in pieces (CURVE) is judged at its first piece as the whole
// message would be: who sent it, whether its role may, the size its layout
// claims. Nothing of a refused one is kept, so 64 MiB sent in 1 MiB pieces
// against a 64-byte shard leaves the ps's memory where it was.
TEST_F(AttackedPs, APushInPiecesIsJudgedAtItsFirstPieceAndNeverHeld) {
  {
    const NoAsanQuarantine no_quarantine;  // for the ps only
    StartPs({});
  }
  constexpr uint32_t kParts = 64;
  constexpr uint64_t kPieceBytes = 1 << 20;
  const std::vector<float> piece(kPieceBytes / sizeof(float), 1.0f);
  ProtocolClientOptions client_options = As("client", 0);
  client_options.sender = proto::CLIENT;
  ProtocolClient client(client_options);
  ProtocolClient worker1(As("worker:1", 1));
  const double rss_before = RssMib(ps_->pid());
  ASSERT_GT(rss_before, 0);
  struct Sender {
    ProtocolClient* client;
    absl::StatusCode refusal;
    const char* says;
  };
  for (const Sender& from :
       {Sender{&client, absl::StatusCode::kPermissionDenied, "may not send PUSH"},
        Sender{&worker1, absl::StatusCode::kResourceExhausted, "larger than the shard"}}) {
    proto::Header push = from.client->Header(proto::PUSH);
    push.set_num_examples(1);
    ASSERT_TRUE(from.client->Send(AsPiece(push, 0, kParts, kPieceBytes), piece).ok());
    // Answered at once: the other 63 pieces have not been sent.
    auto refused = from.client->Receive();
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_EQ(refused->header.request_id(), push.request_id());
    EXPECT_EQ(refused->header.error().code(), static_cast<int>(from.refusal))
        << refused->header.error().message();
    EXPECT_THAT(refused->header.error().message(), HasSubstr(from.says));
    // The rest, each refused on its own (it has no first piece) and dropped.
    for (uint32_t k = 1; k < kParts; ++k) {
      ASSERT_TRUE(from.client->Send(AsPiece(push, k, kParts, kPieceBytes), piece).ok());
      auto r = from.client->Receive();
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_THAT(r->header.error().message(), HasSubstr("without the pieces before it"));
    }
  }
  const double rss_after = RssMib(ps_->pid());
  std::cout << "ps resident memory: " << rss_before << " MiB before 2 x 64 MiB in pieces, "
            << rss_after << " MiB after\n";
  EXPECT_LT(rss_after - rss_before, 24)
      << "the ps held the pieces: " << rss_before << " MiB -> " << rss_after << " MiB";
  EXPECT_EQ(Params(), std::vector<float>(kShard, 1.0f));
  const proto::ShardStats s = Stats();
  EXPECT_EQ(s.updates_applied(), 0);
  EXPECT_EQ(s.unauthorized_requests(), 1);
  EXPECT_EQ(s.oversized_requests(), 1);
  ShutDownAndExpectCleanExit();
}

// Before the chief's INIT nothing but INIT may carry over 64 KiB, in
// pieces or not.
TEST_F(AttackedPs, APushInPiecesBeforeInitIsRefusedAtItsFirstPiece) {
  StartPs({}, /*init=*/false);
  ProtocolClient worker1(As("worker:1", 1));
  proto::Header push = worker1.Header(proto::PUSH);
  push.set_num_examples(1);
  const std::vector<float> piece((64 << 10) / sizeof(float), 1.0f);
  ASSERT_TRUE(worker1.Send(AsPiece(push, 0, 4, 64 << 10), piece).ok());
  auto r = worker1.Receive();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->header.error().code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(r->header.error().message(), HasSubstr("before INIT"));
  ASSERT_EQ(Init(*chief_, 2), "");
  EXPECT_EQ(Stats().oversized_requests(), 1);
  ShutDownAndExpectCleanExit();
}

// A peer that starts a message in pieces and goes away, or stops sending
// its pieces, leaves nothing behind: the partial message is dropped when
// its connection closes, or answered and dropped after --peer_timeout_s.
TEST_F(AttackedPs, APartialMessageGoesWithItsConnectionOrItsDeadline) {
  StartPs({"--peer_timeout_s=2"});
  // The shard is 16 floats: 4 pieces of 16 bytes.
  const std::vector<float> piece(4, 1.0f);
  auto stats_until = [&](auto done) {
    proto::ShardStats s;
    for (int i = 0; i < 300 && !done(s = Stats()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return s;
  };
  {
    ProtocolClient leaver(As("worker:1", 1));
    proto::Header push = leaver.Header(proto::PUSH);
    push.set_num_examples(1);
    ASSERT_TRUE(leaver.Send(AsPiece(push, 0, 4, 16), piece).ok());
    ASSERT_TRUE(leaver.Send(AsPiece(push, 1, 4, 16), piece).ok());
    // Both pieces are in once a request sent after them is answered.
    auto r = leaver.Call(leaver.Header(proto::STATS));
    ASSERT_TRUE(r.ok()) << r.status();
  }  // the connection closes
  proto::ShardStats s =
      stats_until([](const proto::ShardStats& now) { return now.partial_messages_dropped() >= 1; });
  EXPECT_EQ(s.partial_messages_dropped(), 1);
  ProtocolClient staller(As("worker:1", 1));
  proto::Header push = staller.Header(proto::PUSH);
  push.set_num_examples(1);
  ASSERT_TRUE(staller.Send(AsPiece(push, 0, 4, 16), piece).ok());
  auto given_up = staller.Receive(/*timeout_s=*/60);
  ASSERT_TRUE(given_up.ok()) << given_up.status();
  EXPECT_EQ(given_up->header.request_id(), push.request_id());
  EXPECT_EQ(given_up->header.error().code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded))
      << given_up->header.error().message();
  s = Stats();
  EXPECT_EQ(s.partial_messages_dropped(), 2);
  EXPECT_EQ(s.updates_applied(), 0);
  EXPECT_EQ(Params(), std::vector<float>(kShard, 1.0f));
  ShutDownAndExpectCleanExit();
}

// A worker frozen mid-run and started again by hand while the frozen
// process still lives (as a stalled pod and its replacement): when the old
// process wakes, the ps refuses it (its rank has a newer client) and it
// exits saying why; nothing it sends is applied, so the async job applies
// exactly both ranks' steps.
TEST(ReplacedWorker, ItsOldProcessIsRefusedAndNothingIsAppliedTwice) {
  constexpr int kSteps = 100;
  const std::string dir = testing::MakeTempDir("replaced");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 2);
  auto ps = RunningProcess::Start(BinaryPath("ps_server"), {testing::SecretFlag()},
                                  testing::TfConfigFor(spec, "ps", 0));
  ASSERT_NE(ps, nullptr);
  auto worker_args = [&](int w) {
    return std::vector<std::string>{"--data_dir=" + testing::SourcePath("data/mnist"),
                                    absl::StrCat("--max_steps=", kSteps),
                                    "--run_dir=" + dir,
                                    "--mode=async",
                                    "--log_every_steps=10",
                                    "--device=cpu",
                                    w == 1 ? "--straggler_delay_ms=40" : "--straggler_delay_ms=0",
                                    testing::SecretFlag()};
  };
  auto chief = RunningProcess::Start(BinaryPath("worker"), worker_args(0),
                                     testing::TfConfigFor(spec, "worker", 0));
  auto old_worker = RunningProcess::Start(BinaryPath("worker"), worker_args(1),
                                          testing::TfConfigFor(spec, "worker", 1));
  ASSERT_NE(chief, nullptr);
  ASSERT_NE(old_worker, nullptr);
  ASSERT_TRUE(old_worker->WaitForOutput(" step 20/", 120)) << old_worker->output();
  old_worker->Signal(SIGSTOP);
  auto new_worker = RunningProcess::Start(BinaryPath("worker"), worker_args(1),
                                          testing::TfConfigFor(spec, "worker", 1));
  ASSERT_NE(new_worker, nullptr);
  // Once the new process has trained a step, the old one wakes.
  ASSERT_TRUE(new_worker->WaitForOutput("img/s (this worker)", 120)) << new_worker->output();
  old_worker->Signal(SIGCONT);
  auto old_code = old_worker->Wait(120);
  ASSERT_TRUE(old_code.ok()) << old_worker->output();
  EXPECT_NE(*old_code, 0) << old_worker->output();
  EXPECT_THAT(old_worker->output(), HasSubstr("newer client"));
  for (RunningProcess* p : {chief.get(), new_worker.get(), ps.get()}) {
    auto code = p->Wait(300);
    ASSERT_TRUE(code.ok()) << p->output();
    EXPECT_EQ(*code, 0) << p->output();
  }
  const proto::RunSummary summary = testing::ReadRunSummary(dir);
  EXPECT_EQ(summary.updates_applied(), 2 * kSteps);
  EXPECT_GE(summary.retired_session_requests(), 1);
}

// A real job (1 ps, 2 workers, sync) trains while strangers attack it.
TEST(AttackedJob, FinishesWithItsUsualAccuracy) {
  const std::string dir = testing::MakeTempDir("attackedjob");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 2);
  const std::string ps_config = testing::TfConfigFor(spec, "ps", 0);
  const int port = std::stoi(ps_config.substr(ps_config.rfind("localhost:") + 10));
  const uint64_t job_id = ClusterSpec::FromJson(ps_config, "tf_config")->JobId();
  auto ps = RunningProcess::Start(BinaryPath("ps_server"), {testing::SecretFlag()}, ps_config);
  ASSERT_NE(ps, nullptr);
  std::vector<std::unique_ptr<RunningProcess>> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(RunningProcess::Start(
        BinaryPath("worker"),
        {"--data_dir=" + testing::SourcePath("data/mnist"), "--max_steps=150", "--run_dir=" + dir,
         "--log_every_steps=0", "--device=cpu", testing::SecretFlag()},
        testing::TfConfigFor(spec, "worker", w)));
    ASSERT_NE(workers.back(), nullptr);
  }
  std::atomic<bool> done{false};
  std::thread attacker([&] {
    for (int round = 0; round < 200 && !done; ++round) {
      ProtocolClientOptions o;
      o.port = port;
      o.job_id = job_id;
      o.rank = round % 2;
      ProtocolClient stranger(o);
      (void)stranger.Send(stranger.Header(proto::SHUTDOWN));
      proto::Header push = stranger.Header(proto::PUSH);
      push.set_num_examples(128);
      (void)stranger.Send(push, std::vector<float>(64, 3e38f));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  for (auto& w : workers) {
    auto code = w->Wait(300);
    EXPECT_TRUE(code.ok() && *code == 0) << w->output();
  }
  done = true;
  attacker.join();
  auto code = ps->Wait(30);
  EXPECT_TRUE(code.ok() && *code == 0) << ps->output();
  const proto::RunSummary summary = testing::ReadRunSummary(dir);
  EXPECT_GT(summary.final_test_accuracy(), 0.8);
  EXPECT_EQ(summary.updates_applied(), 150);
  EXPECT_GT(summary.handshakes_refused(), 0);
  EXPECT_EQ(summary.rejected_requests(), 0);
}

}  // namespace
}  // namespace pstrain

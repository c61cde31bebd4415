// libFuzzer target: the ps's request dispatch (HostedShards, which holds the
// request handler) fed whole multipart messages, before and after a valid
// INIT. Input format: fuzz/request_frames.h.
//
// Each message's frames go through ParseFrames, as ReceiveRouted does, and
// then Handle (or HandleMalformed when they do not parse). Every reply is
// serialised as SendRouted would, with the parameters of the shard it names
// when it asks for them. Whatever the pushes carried (in any encoding: the
// seeds have BF16, FP16 and TOPK ones, so the decoder is fuzzed too), the
// shard's parameters stay finite.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fuzz/request_frames.h"
#include "glog/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "ps_server/hosted_shards.h"
#include "transport/pieces.h"
#include "transport/transport.h"

namespace pstrain::fuzz {
namespace {

// Every construction of and call into RequestHandler is in this class, so an
// API change (a peer's authenticated identity, the spec's worker count in the
// options) is adapted here in a few lines.
class HandlerUnderTest {
 public:
  // `setup.num_workers` is the cluster's worker count (the valid INIT says
  // the same). Authenticated: peer k is known as worker:k for the spec's
  // workers (worker:0 is the chief), then "client", then "ps:0", and the
  // last peer is nobody (a user id no ZAP handler would have set).
  explicit HandlerUnderTest(const Setup& setup)
      : shards_(Options(setup)), authenticated_(setup.authenticated) {}

  void Deliver(int peer, std::vector<zmq::message_t> frames, std::vector<Reply>* out) {
    const Peer from{PeerName(peer), authenticated_ ? UserId(peer) : ""};
    absl::StatusOr<Message> m = ParseFrames(std::move(frames));
    // Pieces (transport/pieces.h) are put back together first, by the ps's own
    // AssemblePiece.
    if (m.ok() && IsPiece(m->header)) {
      const PieceJudge judge = [this](const Peer& p, const proto::Header& first) {
        return shards_.AdmitPieces(p, first);
      };
      absl::StatusOr<std::optional<Message>> whole = AssemblePiece(
          pieces_, shards_.own(), from, *std::move(m), judge, {peer % kNumPeers, ++now_us_}, out);
      if (!whole.ok() || !whole->has_value()) return;
      m = **std::move(whole);
    }
    if (m.ok()) {
      shards_.Handle(from, *m, out);
    } else {
      shards_.own().HandleMalformed(from, m.status(), out);
    }
  }
  void Fail(std::vector<Reply>* out) {
    shards_.own().Fail(absl::UnavailableError("worker:1 is dead"), out);
  }
  void AbortParked(std::vector<Reply>* out) {
    shards_.own().AbortParked(absl::CancelledError("the ps is shutting down"), out);
  }
  const RequestHandler& handler() const { return shards_.own(); }
  const HostedShards& shards() const { return shards_; }

 private:
  static RequestHandlerOptions Options(const Setup& setup) {
    RequestHandlerOptions o{kJobId, /*shard_index=*/0, /*num_shards=*/1, setup.num_workers, {}, nullptr,
                            /*checkpoint_dir=*/""};
    if (!setup.authenticated) return o;
    for (int r = 0; r < setup.num_workers; ++r) {
      o.principals[UserId(r)] = {r == 0 ? Role::kChief : Role::kWorker, r};
    }
    o.principals["client"] = {Role::kClient, -1};
    o.principals["ps:0"] = {Role::kPs, -1};
    return o;
  }
  static std::string UserId(int peer) {
    const int k = peer % kNumPeers;
    if (k < 4) return "worker:" + std::to_string(k);  // not in the spec past num_workers
    if (k == kNumPeers - 1) return "";
    return k % 2 == 0 ? "client" : "ps:0";
  }

  HostedShards shards_;
  bool authenticated_;
  PieceAssembler pieces_{size_t{1} << 20, size_t{2} << 20, 8};
  int64_t now_us_ = 0;  // a piece a microsecond
};

std::vector<zmq::message_t> ToFrames(const std::vector<std::string>& parts) {
  std::vector<zmq::message_t> frames;
  for (const std::string& p : parts) frames.emplace_back(p.data(), p.size());
  return frames;
}

// What the ps's event loop does with replies: serialise each header and read
// the parameters it attaches.
void Consume(const HandlerUnderTest& target, std::vector<Reply>* replies) {
  for (const Reply& r : *replies) {
    CHECK(!r.peer.empty());
    CHECK(r.header.is_reply());
    const std::string wire = r.header.SerializeAsString();
    CHECK_LE(wire.size(), kMaxHeaderBytes);
    if (r.with_params) {
      const RequestHandler* shard = target.shards().Serving(r.header.shard_index());
      CHECK(shard != nullptr) << "a reply with the parameters of a shard not served";
      for (float p : shard->params()) CHECK(std::isfinite(p)) << "a push made the shard non-finite";
    }
  }
  replies->clear();
}

void Run(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const Setup setup = Setup::FromByte(data[0]);
  HandlerUnderTest target(setup);
  std::vector<Reply> replies;
  if (setup.init_first) {
    const FuzzMessage init = ValidInit(setup);
    target.Deliver(init.peer, ToFrames(init.frames), &replies);
    CHECK(target.handler().initialized()) << "the harness's INIT was refused";
    Consume(target, &replies);
  }
  if (setup.fail_first) target.Fail(&replies);
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (const FuzzMessage& m : SplitMessages(rest)) {
    target.Deliver(m.peer, ToFrames(m.frames), &replies);
    Consume(target, &replies);
  }
  target.AbortParked(&replies);
  Consume(target, &replies);
  (void)target.handler().Stats().SerializeAsString();
}

}  // namespace
}  // namespace pstrain::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // The handler logs each INIT, and protobuf one line per header with a
  // string that is not UTF-8: keep the fuzzer's output to its own lines.
  FLAGS_minloglevel = google::GLOG_WARNING;
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::fuzz::Run(data, size);
  return 0;
}

#pragma once

// The byte format fuzz_request reads, shared with the seed generator so that
// the seeds and the harness cannot drift apart.
//
//   input   := setup message*
//   setup   := 1 byte: bit 0 send the chief's valid INIT first; bits 1-2 the
//              INIT's mode (0 sync, 1 async, 2 ssp, 3 sync with a backup
//              worker); bits 3-4 the INIT's worker count minus 1; bit 5 latch
//              a job failure (a dead worker) before the messages.
//   message := peer (1 byte, mod kNumPeers) count (1 byte, mod 4) frame*count
//   frame   := length (2 bytes, little-endian) bytes[length]
//
// A truncated message or frame ends the input. Frames are the ZeroMQ frames
// after the ROUTER's identity: [header] or [header, payload], or anything
// else for ParseFrames to refuse.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/pstrain.pb.h"

namespace pstrain::fuzz {

// The cluster the harness's handler serves and the valid INIT describes.
inline constexpr uint64_t kJobId = 0x10b;
inline constexpr uint64_t kPlanFingerprint = 0x91a4;
inline constexpr int kShardFloats = 4;
inline constexpr int kNumPeers = 7;  // 4 workers, a client, a ps, and nobody (fuzz_request.cc)

struct Setup {
  bool init_first = false;
  int mode = 0;         // 0 sync, 1 async, 2 ssp, 3 sync with a backup worker
  int num_workers = 1;  // 1..4
  bool fail_first = false;
  // CURVE: peers carry authenticated task names (see the harness), and the
  // handler trusts those, not the headers.
  bool authenticated = false;

  uint8_t ToByte() const {
    return static_cast<uint8_t>((init_first ? 1 : 0) | (mode & 3) << 1 |
                                ((num_workers - 1) & 3) << 3 | (fail_first ? 1 : 0) << 5 |
                                (authenticated ? 1 : 0) << 6);
  }
  static Setup FromByte(uint8_t b) {
    return {(b & 1) != 0, (b >> 1) & 3, ((b >> 3) & 3) + 1, (b >> 5 & 1) != 0,
            (b >> 6 & 1) != 0};
  }
};

struct FuzzMessage {
  int peer = 0;
  std::vector<std::string> frames;
};

inline std::string PeerName(int peer) { return "peer" + std::to_string(peer % kNumPeers); }

// Splits `bytes` (the input after the setup byte) into messages.
inline std::vector<FuzzMessage> SplitMessages(absl::string_view bytes) {
  std::vector<FuzzMessage> out;
  while (bytes.size() >= 2) {
    FuzzMessage m;
    m.peer = static_cast<uint8_t>(bytes[0]) % kNumPeers;
    const int count = static_cast<uint8_t>(bytes[1]) % 4;
    bytes.remove_prefix(2);
    for (int f = 0; f < count; ++f) {
      if (bytes.size() < 2) return out;
      const size_t len = static_cast<uint8_t>(bytes[0]) | static_cast<size_t>(static_cast<uint8_t>(bytes[1])) << 8;
      bytes.remove_prefix(2);
      if (bytes.size() < len) return out;
      m.frames.emplace_back(bytes.substr(0, len));
      bytes.remove_prefix(len);
    }
    out.push_back(std::move(m));
  }
  return out;
}

inline void AppendFrame(absl::string_view frame, std::string* out) {
  out->push_back(static_cast<char>(frame.size() & 0xff));
  out->push_back(static_cast<char>(frame.size() >> 8 & 0xff));
  out->append(frame.data(), frame.size());
}

// The encoding SplitMessages reads. REQUIRES: frames.size() < 4, each frame
// under 64 KiB.
inline std::string JoinMessage(const FuzzMessage& m) {
  std::string out;
  out.push_back(static_cast<char>(m.peer));
  out.push_back(static_cast<char>(m.frames.size()));
  for (const std::string& f : m.frames) AppendFrame(f, &out);
  return out;
}

// A request header as a worker of rank `rank` sends it to the harness's shard.
inline proto::Header RequestHeader(proto::MessageType type, int rank) {
  proto::Header h;
  h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h.set_job_id(kJobId);
  h.set_type(type);
  h.mutable_sender()->set_type(rank == 0 ? proto::CHIEF : proto::WORKER);
  h.mutable_sender()->set_index(rank);
  h.set_rank(rank);
  h.set_request_id(1);
  h.set_plan_fingerprint(kPlanFingerprint);
  h.set_range_begin(0);
  h.set_range_end(kShardFloats);
  h.set_encoding(proto::F32);
  h.set_num_shards(1);
  return h;
}

// The chief's INIT for `setup`: header and the shard's initial parameters.
inline FuzzMessage ValidInit(const Setup& setup) {
  proto::Header h = RequestHeader(proto::INIT, 0);
  proto::JobConfig* job = h.mutable_job();
  constexpr proto::UpdateMode kModes[] = {proto::SYNC, proto::ASYNC, proto::SSP, proto::SYNC};
  job->set_mode(kModes[setup.mode & 3]);
  job->set_num_workers(setup.num_workers);
  job->set_learning_rate(0.5);
  job->set_momentum(0.5);
  job->set_staleness(setup.mode == 2 ? 1 : 0);
  job->set_backup_workers(setup.mode == 3 && setup.num_workers > 1 ? 1 : 0);
  job->set_total_steps(8);
  // Two tensors in two parameter groups: pushes with step settings are
  // applied segment by segment.
  for (int t = 0; t < 2; ++t) {
    proto::TensorLayout* l = job->add_layout();
    l->set_name(t == 0 ? "w" : "b");
    l->set_size(kShardFloats / 2);
    l->set_group(t);
  }
  // An embedding table with admission, eviction and a row cap: a request
  // mutated into EMBEDDING_PULL or EMBEDDING_PUSH reaches its checks.
  proto::EmbeddingTableConfig* table = job->add_tables();
  table->set_name("e");
  table->set_dim(2);
  table->set_optimizer(proto::ROW_ADAGRAD);
  table->set_lr(0.1);
  table->set_eps(1e-10);
  table->set_init_std(1.0);
  table->set_admit_after(1);
  table->set_evict_after_updates(4);
  table->set_max_rows_per_ps(8);
  const float params[kShardFloats] = {1.0f, -1.0f, 0.5f, 0.25f};
  return {0, {h.SerializeAsString(),
              std::string(reinterpret_cast<const char*>(params), sizeof(params))}};
}

}  // namespace pstrain::fuzz

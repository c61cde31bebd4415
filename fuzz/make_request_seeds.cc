// Writes fuzz_request's seed corpus: real protocol messages (the headers a
// worker and the chief send) in the harness's frame format, a few valid
// conversations and a few invalid ones, pushes in every --wire encoding
// among them (so the fuzzer starts inside the decoder, common/wire_codec.h).
// Usage: make_request_seeds DIR

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/wire_codec.h"
#include "fuzz/request_frames.h"

namespace pstrain::fuzz {
namespace {

std::string Floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

FuzzMessage Request(proto::MessageType type, int rank, int64_t step = 0, int64_t version = 0) {
  proto::Header h = RequestHeader(type, rank);
  h.set_step(step);
  h.set_version(version);
  FuzzMessage m{rank, {}};
  if (type == proto::PUSH || type == proto::PUSH_PULL) {
    h.set_num_examples(32);
    m.frames = {h.SerializeAsString(), Floats({0.1f, -0.2f, 0.3f, 0.0f})};
  } else {
    m.frames = {h.SerializeAsString()};
  }
  return m;
}

template <typename T>
std::string Raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string Half(uint16_t (*encode)(float), const std::vector<float>& v) {
  std::vector<uint16_t> codes;
  for (float x : v) codes.push_back(encode(x));
  return Raw(codes);
}

// (index, value) pairs of a TOPK payload.
std::string Pairs(const std::vector<std::pair<uint32_t, float>>& pairs) {
  std::string out;
  for (const auto& [index, value] : pairs) out += Raw(std::vector<uint32_t>{index}) + Raw(std::vector<float>{value});
  return out;
}

// A PUSH_PULL of `rank` whose payload is `bytes` in `encoding`; each with a
// request id of its own, so that none is answered as a repeat of another.
FuzzMessage EncodedPush(int rank, int64_t step, proto::Encoding encoding, uint64_t topk_count,
                        const std::string& bytes) {
  static uint64_t request_id = 100;
  proto::Header h = RequestHeader(proto::PUSH_PULL, rank);
  h.set_request_id(++request_id);
  h.set_step(step);
  h.set_version(step);
  h.set_num_examples(32);
  h.set_encoding(encoding);
  h.set_topk_count(topk_count);
  return {rank, {h.SerializeAsString(), bytes}};
}

// A PUSH_PULL of `rank` whose payload goes in pieces of `piece_bytes`
// (transport/pieces.h), one message each, as a CURVE worker sends a large one.
std::vector<FuzzMessage> PiecedPush(int rank, int64_t step, uint32_t piece_bytes,
                                    const std::string& bytes) {
  static uint64_t request_id = 500;
  proto::Header h = RequestHeader(proto::PUSH_PULL, rank);
  h.set_request_id(++request_id);
  h.set_step(step);
  h.set_version(step);
  h.set_num_examples(32);
  const uint32_t parts = static_cast<uint32_t>((bytes.size() + piece_bytes - 1) / piece_bytes);
  h.set_parts(parts);
  h.set_piece_bytes(piece_bytes);
  std::vector<FuzzMessage> pieces;
  for (uint32_t k = 0; k < parts; ++k) {
    h.set_part(k);
    pieces.push_back({rank, {h.SerializeAsString(), bytes.substr(k * piece_bytes, piece_bytes)}});
  }
  return pieces;
}

template <typename... Groups>
std::vector<FuzzMessage> Concat(Groups... groups) {
  std::vector<FuzzMessage> all;
  (all.insert(all.end(), groups.begin(), groups.end()), ...);
  return all;
}

// A script's step settings: two groups (lr, momentum), `absent` tensors.
proto::StepSettings Settings(double lr, std::vector<int32_t> absent) {
  proto::StepSettings s;
  for (int g = 0; g < 2; ++g) {
    proto::GroupSettings* gs = s.add_groups();
    gs->set_lr(lr * (g + 1));
    gs->set_momentum(0.5);
  }
  *s.mutable_absent() = {absent.begin(), absent.end()};
  return s;
}

// A PUSH_PULL with step settings, or a REDUCE (its absent tensors only).
FuzzMessage ScriptRequest(proto::MessageType type, int rank, int64_t step,
                          const proto::StepSettings& settings, const std::string& payload,
                          uint32_t round = 0) {
  static uint64_t request_id = 900;
  proto::Header h = RequestHeader(type, rank);
  h.set_request_id(++request_id);
  h.set_step(step);
  h.set_version(step);
  h.set_num_examples(16);
  h.set_reduce_round(round);
  *h.mutable_step_settings() = settings;
  return {rank, {h.SerializeAsString(), payload}};
}

FuzzMessage Barrier(int rank, const std::string& name, bool with_report) {
  proto::Header h = RequestHeader(proto::BARRIER, rank);
  h.set_barrier_name(name);
  if (with_report) {
    h.mutable_report()->set_rank(rank);
    h.mutable_report()->set_steps(8);
    h.mutable_report()->set_images(1024);
  }
  return {rank, {h.SerializeAsString()}};
}

std::string Input(const Setup& setup, const std::vector<FuzzMessage>& messages) {
  std::string out(1, static_cast<char>(setup.ToByte()));
  for (const FuzzMessage& m : messages) out += JoinMessage(m);
  return out;
}

struct Seed {
  const char* name;
  std::string bytes;
};

// The chief's RESTORE of a standby's state in parts of `part_bytes`
// (transport/state_parts.h) for the job of ValidInit(`setup`): the state's
// 8 floats (parameters and momentum) and 8 bytes of tables (not a valid
// encoding: the restore is refused once the parts are together).
std::vector<FuzzMessage> RestoreInParts(const Setup& setup, uint32_t part_bytes) {
  proto::Header h;
  h.ParseFromString(ValidInit(setup).frames[0]);
  h.set_type(proto::RESTORE);
  h.mutable_restore()->set_from_payload(true);
  h.mutable_replica()->set_version(3);
  h.mutable_replica()->set_tables_bytes(8);
  const std::string bytes = Floats({0.1f, 0.2f, 0.3f, 0.4f, 0, 0, 0, 0, 1, 2});
  std::vector<FuzzMessage> out;
  for (uint32_t offset = 0; offset < bytes.size(); offset += part_bytes) {
    proto::Header part = h;
    part.set_request_id(100 + offset);
    part.mutable_state_part()->set_offset(offset);
    part.mutable_state_part()->set_total(bytes.size());
    part.mutable_state_part()->set_stream(5);
    out.push_back({0, {part.SerializeAsString(), bytes.substr(offset, part_bytes)}});
  }
  return out;
}

// Pushes in every encoding, well formed and not.
std::vector<Seed> EncodedSeeds() {
  const Setup sync2{true, 0, 2, false};
  const Setup async2{true, 1, 2, false};
  const std::vector<float> grad = {0.1f, -0.2f, 0.3f, 0.0f};
  return {
      {"valid_sync_encodings", Input(sync2, {EncodedPush(0, 0, proto::BF16, 0, Half(F32ToBf16, grad)),
                                             EncodedPush(1, 0, proto::TOPK, 2, Pairs({{0, 0.1f}, {2, 0.3f}})),
                                             EncodedPush(0, 1, proto::FP16, 0, Half(F32ToFp16, grad)),
                                             EncodedPush(1, 1, proto::F32, 0, Raw(grad))})},
      {"valid_async_topk", Input(async2, {EncodedPush(1, 0, proto::TOPK, 1, Pairs({{3, -1.0f}})),
                                          EncodedPush(0, 0, proto::TOPK, 4,
                                                      Pairs({{0, 1}, {1, 2}, {2, 3}, {3, 4}})),
                                          EncodedPush(1, 1, proto::FP16, 0, Half(F32ToFp16, {7e4f, 1, 2, 3}))})},
      {"invalid_encodings", Input(async2, {EncodedPush(1, 0, proto::TOPK, 2, Pairs({{2, 1}, {1, 1}})),
                                           EncodedPush(1, 0, proto::TOPK, 2, Pairs({{1, 1}, {1, 1}})),
                                           EncodedPush(1, 0, proto::TOPK, 1, Pairs({{4, 1}})),
                                           EncodedPush(1, 0, proto::TOPK, 3, Pairs({{0, 1}})),
                                           EncodedPush(1, 0, proto::TOPK, 0, ""),
                                           EncodedPush(1, 0, proto::BF16, 0, Half(F32ToBf16, {1, 2, 3})),
                                           EncodedPush(1, 0, proto::FP16, 2, Half(F32ToFp16, grad)),
                                           EncodedPush(1, 0, proto::BF16, 0, Half(F32ToBf16, {1, NAN, 0, 0})),
                                           EncodedPush(1, 0, static_cast<proto::Encoding>(7), 0, Raw(grad))})},
  };
}

// A PyTorch script's requests: pushes with parameter groups' settings and
// absent tensors, REDUCE rounds, the optimizer's state read.
std::vector<Seed> ScriptSeeds() {
  const Setup sync2{true, 0, 2, false};
  const Setup async2{true, 1, 2, false};
  const std::string grad = Raw(std::vector<float>{0.1f, -0.2f, 0.3f, 0.0f});
  proto::StepSettings one_group;
  one_group.add_groups()->set_lr(0.1);
  proto::StepSettings bad_momentum = Settings(0.1, {});
  bad_momentum.mutable_groups(1)->set_momentum(2.0);
  FuzzMessage state = Request(proto::OPTIMIZER_STATE, 1);
  return {
      {"valid_sync_script_step",
       Input(sync2, {ScriptRequest(proto::REDUCE, 0, 0, Settings(0, {1}), grad),
                     ScriptRequest(proto::REDUCE, 1, 0, Settings(0, {}), grad),
                     ScriptRequest(proto::REDUCE, 0, 0, Settings(0, {}), grad, 1),
                     ScriptRequest(proto::REDUCE, 1, 0, Settings(0, {}), grad, 1),
                     ScriptRequest(proto::PUSH_PULL, 0, 0, Settings(0.1, {1}), grad),
                     ScriptRequest(proto::PUSH_PULL, 1, 0, Settings(0.1, {1}), grad), state,
                     Barrier(1, "done", true), Request(proto::PUSH_PULL, 0, 1, 1)})},
      {"valid_async_script_steps",
       Input(async2, {ScriptRequest(proto::PUSH_PULL, 1, 0, Settings(0.1, {0}), grad),
                      ScriptRequest(proto::PUSH_PULL, 0, 0, Settings(0.0, {0, 1}), grad),
                      ScriptRequest(proto::PUSH_PULL, 1, 1, Settings(0.2, {}), grad), state})},
      {"invalid_script_requests",
       Input(sync2, {ScriptRequest(proto::PUSH_PULL, 1, 0, one_group, grad),
                     ScriptRequest(proto::PUSH_PULL, 1, 0, bad_momentum, grad),
                     ScriptRequest(proto::PUSH_PULL, 1, 0, Settings(-1, {}), grad),
                     ScriptRequest(proto::PUSH_PULL, 1, 0, Settings(0.1, {1, 0}), grad),
                     ScriptRequest(proto::REDUCE, 1, 0, Settings(0, {2}), grad),
                     ScriptRequest(proto::REDUCE, 1, 0, Settings(0, {}), grad.substr(4)),
                     ScriptRequest(proto::REDUCE, 1, 7, Settings(0, {}), grad),
                     ScriptRequest(proto::REDUCE, 0, 0, Settings(0, {}),
                                   Raw(std::vector<float>{NAN, INFINITY, 0, 0}))})},
  };
}

std::vector<Seed> Seeds() {
  const Setup sync2{true, 0, 2, false};
  const Setup async2{true, 1, 2, false};
  const Setup ssp3{true, 2, 3, false};
  const Setup backup3{true, 3, 3, false};
  const Setup none{false, 0, 1, false};
  proto::Header other_job = RequestHeader(proto::PULL, 1);
  other_job.set_job_id(kJobId + 1);
  proto::Header reply = RequestHeader(proto::STATS, 1);
  reply.set_is_reply(true);
  const std::string header = RequestHeader(proto::PUSH, 1).SerializeAsString();
  return {
      {"valid_sync_round",
       Input(sync2,
             {Request(proto::REGISTER, 1), Request(proto::PUSH_PULL, 0),
              Request(proto::PUSH_PULL, 1), Request(proto::PULL, 0, 1, 1), Barrier(0, "done", true),
              Barrier(1, "done", true), Request(proto::STATS, 1), Request(proto::SHUTDOWN, 0)})},
      {"valid_init_after_register",
       Input(none, {Request(proto::REGISTER, 1), ValidInit(sync2), Request(proto::HEARTBEAT, 1)})},
      {"valid_async_pushes",
       Input(async2,
             {Request(proto::PUSH, 1), Request(proto::PUSH, 0), Request(proto::PUSH_PULL, 1, 1, 0),
              Request(proto::PULL, 0, 1, 0), Request(proto::STATS, 0)})},
      {"valid_ssp_wait",
       Input(ssp3, {Request(proto::PUSH_PULL, 0), Request(proto::PUSH_PULL, 0, 1, 1),
                    Request(proto::PUSH_PULL, 0, 2, 2), Request(proto::PUSH_PULL, 1),
                    Request(proto::PUSH_PULL, 2)})},
      {"valid_sync_backup",
       Input(backup3, {Request(proto::PUSH_PULL, 0), Request(proto::PUSH_PULL, 1),
                       Request(proto::PUSH_PULL, 2), Request(proto::STATS, 2)})},
      {"invalid_other_job_and_reply",
       Input(sync2, {{1, {other_job.SerializeAsString()}}, {1, {reply.SerializeAsString()}}})},
      {"invalid_frames", Input(sync2, {{1, {}},
                                       {1, {""}},
                                       {1, {header, "abc"}},
                                       {1, {header, "", ""}},
                                       {2, {"\xff\xff\xff"}}})},
      {"invalid_push_before_init",
       Input(none, {Request(proto::PUSH_PULL, 1), Request(proto::INIT, 1)})},
      {"invalid_after_failure",
       Input({true, 0, 2, true}, {Request(proto::PUSH_PULL, 1), Request(proto::STATS, 0)})},
      // Pieces: two workers' pushes in pieces, interleaved, then whole.
      {"valid_sync_pieces",
       Input(sync2, Concat(PiecedPush(0, 0, 8, Floats({0.1f, -0.2f, 0.3f, 0.0f})),
                           PiecedPush(1, 0, 4, Floats({0.5f, 0.5f, -1.0f, 2.0f})),
                           std::vector<FuzzMessage>{Request(proto::PULL, 0, 1, 1)}))},
      // A standby's state relayed by the chief in parts to a restarted ps,
      // then a part out of order and a part from the middle of a fetch.
      {"restore_in_parts",
       Input({false, 0, 2, false},
             Concat(RestoreInParts({true, 0, 2, false}, 16),
                    std::vector<FuzzMessage>{RestoreInParts({true, 0, 2, false}, 8)[2]},
                    std::vector<FuzzMessage>{Request(proto::FETCH_REPLICA, 0)}))},
      // An orphan piece, a piece of a PULL, a layout that changes midway.
      {"invalid_pieces",
       Input(async2, Concat(std::vector<FuzzMessage>{PiecedPush(1, 0, 4, Floats({1, 2, 3, 4}))[2]},
                            std::vector<FuzzMessage>{PiecedPush(0, 0, 8, Floats({1, 2, 3, 4}))[0],
                                                     PiecedPush(0, 0, 4, Floats({1, 2, 3, 4}))[1]},
                            std::vector<FuzzMessage>{Request(proto::STATS, 0)}))},
  };
}

}  // namespace
}  // namespace pstrain::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_request_seeds DIR\n");
    return 2;
  }
  std::vector<pstrain::fuzz::Seed> seeds = pstrain::fuzz::Seeds();
  for (auto& seed : pstrain::fuzz::EncodedSeeds()) seeds.push_back(std::move(seed));
  for (auto& seed : pstrain::fuzz::ScriptSeeds()) seeds.push_back(std::move(seed));
  for (const auto& seed : seeds) {
    const std::string path = std::string(argv[1]) + "/" + seed.name;
    std::ofstream(path, std::ios::binary) << seed.bytes;
    if (!std::ofstream(path, std::ios::app)) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}

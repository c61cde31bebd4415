#pragma once

// A worker's gradient as one step's pushes carry it (--wire): a payload per
// shard in the encoding of common/wire_codec.h, with error feedback for the
// lossy ones.
//
// Error feedback (Seide et al. 2014, 1-bit SGD; Lin et al. 2018, Deep
// Gradient Compression; Karimireddy et al. 2019, EF-SGD): the encoder keeps,
// per parameter, the residual e of what it has not sent. Step t's gradient
// g_t goes out as encode(g_t + e), and e becomes
//   (g_t + e) - decode(encode(g_t + e)),
// decoded by the very function the ps decodes with. So after steps 1..T,
//   sum_t decode(payload_t) = sum_t g_t - e_T   (to float rounding):
// nothing is dropped, only delayed. With F32 the payloads are views of the
// gradient itself (no copy, no residual): the f32 path is what it was.
//
// One encoding per step. Encode is called once per step; a call for the
// same step as the call before (the step's push never completed and the
// step is computed again, after a rejoin) starts again from the residual
// before that call, so that no residual is counted twice. Until the next
// Encode the payloads stay as they are: a step whose gradient some shards
// lost is sent to them again byte for byte (PsClient::FinishStep), which
// decodes to what the residual assumes.
//
// A gradient of weight 0 (an empty batch, `weighted` false) is sent as it
// is, without the residual: the ps gives it no weight, and the residual
// waits for the next step.
//
// Lifetime: a payload's bytes belong to the encoder (F32: to the `grads`
// passed to Encode) and stay valid and unchanged until the next Encode or
// the encoder's end. PsClient sends them without copying, so the encoder
// (and, with F32, the gradient buffer) must outlive the client.
//
// Thread safety: none; the training thread owns it.

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/shard_plan.h"
#include "common/wire_codec.h"

namespace pstrain {

class GradientEncoder {
 public:
  GradientEncoder(const WireEncoding& encoding, const ShardPlan& plan);

  // Encodes step `step`'s gradient (the whole flat vector) for every shard
  // and updates the residual; returns the payloads, one per shard.
  // REQUIRES: grads.size() == plan.total_size().
  absl::Span<const EncodedShard> Encode(int64_t step, absl::Span<const float> grads, bool weighted);
  // The same, a shard at a time (overlap: a shard is sent as soon as its
  // gradient is final): Begin(step), then EncodeShard for every shard.
  void Begin(int64_t step);
  const EncodedShard& EncodeShard(int shard, absl::Span<const float> grads, bool weighted);

  // The last Encode's payloads, one per shard.
  absl::Span<const EncodedShard> payloads() const { return payloads_; }
  // The residual e after the last Encode (all of the flat vector; empty
  // with F32).
  absl::Span<const float> residual() const { return residual_; }
  const WireEncoding& encoding() const { return encoding_; }
  // Payload bytes of one step, all shards together.
  size_t bytes_per_step() const;

 private:
  void EncodeLossy(int shard, absl::Span<const float> grads, bool weighted);

  WireEncoding encoding_;
  std::vector<ShardRange> ranges_;
  std::vector<uint64_t> topk_counts_;       // [shard] TOPK: k
  std::vector<std::vector<char>> bytes_;    // [shard] the payloads' storage
  std::vector<EncodedShard> payloads_;      // [shard]
  std::vector<float> residual_;             // e after the last Encode
  std::vector<float> previous_;             // e before it
  std::vector<float> decoded_;              // scratch: what a shard's ps decodes
  std::vector<uint32_t> scratch_;           // TOPK's selection
  int64_t last_step_ = -1;
};

}  // namespace pstrain

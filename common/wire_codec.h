#pragma once

// How a gradient push carries one shard's gradient (Header.encoding,
// --wire): the worker encodes, the ps decodes into an aligned f32 buffer.
// Pure functions, no state; the worker's error feedback is
// worker/gradient_encoder.h.
//
// Byte layouts of the payload frame (little-endian; n = the shard's size in
// floats, < 2^32):
//
//   F32   n x IEEE binary32.                                    4n bytes
//   BF16  n x bfloat16 (the top 16 bits of the binary32), then
//         two zero bytes when n is odd.                         2n rounded up to 4
//   FP16  n x IEEE binary16, padded as BF16.                    2n rounded up to 4
//   TOPK  k = Header.topk_count pairs (index u32, value
//         binary32), indices strictly increasing, < n; every
//         entry not listed is 0. 1 <= k <= n.                   8k bytes
//
// (16-bit payloads are padded so that every frame is whole 32-bit words, as
// the transport requires.)
//
// Rounding: BF16 and FP16 round to nearest, ties to even, subnormals
// included. A finite value whose rounding would overflow to infinity
// (beyond bf16's 3.3895e38 or fp16's 65504, by half a unit in the last
// place or more) is clamped to the largest finite value of its sign, so a
// finite gradient always decodes finite; the worker's error feedback keeps
// the difference. Infinities stay infinities and NaNs stay NaNs (quiet), so
// the ps refuses them exactly as it refuses them in F32.
//
// TOPK keeps the k entries of largest magnitude (a NaN counts as larger
// than infinity), on ties the lower index first; k = TopKCount(R, n).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

// What --wire names: an encoding and, for TOPK, the fraction of each
// shard's entries sent.
struct WireEncoding {
  proto::Encoding kind = proto::F32;
  double topk_ratio = 1.0;  // TOPK: R, 0 < R <= 1
  bool lossy() const { return kind != proto::F32; }
  // "f32", "bf16", "fp16", "topk:0.01" (ParseWireEncoding reads it back).
  std::string ToString() const;
};

// Parses "f32", "bf16", "fp16" or "topk:R" with 0 < R <= 1.
// InvalidArgument saying what is expected otherwise.
absl::StatusOr<WireEncoding> ParseWireEncoding(absl::string_view text);

// One shard's encoded gradient as a PUSH carries it: the header's fields and
// the payload, which the span does not own.
struct EncodedShard {
  proto::Encoding encoding = proto::F32;
  uint64_t topk_count = 0;  // TOPK only
  absl::Span<const char> bytes;
};

// k for a shard of n >= 1 entries: max(1, ceil(R n)), at most n. R n is
// taken to within 1e-6, so that 0.1 x 30 is 3 (not 4, as binary doubles
// would have it).
uint64_t TopKCount(double ratio, size_t n);

// The payload's size for a shard of n entries (TOPK: of topk_count pairs).
// REQUIRES: `encoding` is one of the four above.
size_t EncodedBytes(proto::Encoding encoding, size_t n, uint64_t topk_count);

// The largest payload a push of `encoding` may carry for a shard of n: 8n
// for TOPK (k = n), else 4n. The ps's size bound before decoding.
size_t MaxEncodedBytes(proto::Encoding encoding, size_t n);

// One value. See the rounding rules above.
uint16_t F32ToBf16(float value);
float Bf16ToF32(uint16_t bits);
uint16_t F32ToFp16(float value);
float Fp16ToF32(uint16_t bits);

// Writes `values` in `encoding` into `out` (its contents replaced,
// EncodedBytes long). TOPK sends `topk_count` entries; `scratch` is its
// working space, kept by the caller to spare an allocation per call.
// REQUIRES: `encoding` one of the four; values nonempty, fewer than 2^32;
// TOPK: 1 <= topk_count <= values.size().
void EncodeGradient(proto::Encoding encoding, uint64_t topk_count, absl::Span<const float> values,
                    std::vector<char>* out, std::vector<uint32_t>* scratch);

// Reads a payload back: every entry of `out` (the shard's n floats) is
// written. InvalidArgument saying what is wrong for anything but exactly a
// layout above: an encoding this ps does not decode (Unimplemented), a
// topk_count out of [1, n] or given with another encoding, a byte count
// that does not match, an index out of range or not above the one before,
// a non-zero pad. Never reads outside `payload` nor writes outside `out`:
// these bytes come from the network. Values are not checked (the caller
// refuses non-finite ones).
absl::Status DecodeGradient(proto::Encoding encoding, uint64_t topk_count,
                            absl::Span<const char> payload, absl::Span<float> out);

}  // namespace pstrain

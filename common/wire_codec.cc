#include "common/wire_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

// Bit patterns of |x| (sign bit cleared).
constexpr uint32_t kF32Inf = 0x7F800000u;
// The smallest |x| that bf16 rounding would carry to infinity: halfway
// between bf16's largest finite value (0x7F7F) and infinity, where ties go
// to the even one, infinity.
constexpr uint32_t kBf16Overflow = 0x7F7F8000u;
// Likewise for fp16: 65520, halfway between 65504 and 2^16.
constexpr uint32_t kFp16Overflow = 0x477FF000u;
// 2^-14, fp16's smallest normal value.
constexpr uint32_t kFp16MinNormal = 0x38800000u;
// (127 - 15) << 23: the exponent bias difference of binary32 and binary16.
constexpr uint32_t kFp16Rebias = 0x38000000u;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(T v, char* p) {
  std::memcpy(p, &v, sizeof(T));
}

// Orders floats by magnitude as unsigned integers do their bit patterns
// with the sign cleared; NaNs come above infinity.
uint32_t MagnitudeKey(float f) { return Bits(f) & 0x7FFFFFFFu; }

size_t Padded16(size_t n) { return (2 * n + 3) / 4 * 4; }

// |x| < 2^-14 as an fp16 subnormal, in units of 2^-24, rounded to nearest
// even. A result of 0x400 is the smallest normal, which is right.
uint16_t SubnormalFp16(uint32_t a) {
  const int shift = 126 - static_cast<int>(a >> 23);  // significand bits to drop
  if (shift > 24) return 0;                          // below half of 2^-24 (or a tie at 0)
  const uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
  uint32_t q = sig >> shift;
  const uint32_t rest = sig & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u) != 0)) ++q;
  return static_cast<uint16_t>(q);
}

void Encode16(absl::Span<const float> values, uint16_t (*convert)(float), std::vector<char>* out) {
  out->assign(Padded16(values.size()), 0);
  char* p = out->data();
  for (size_t i = 0; i < values.size(); ++i) Store(convert(values[i]), p + 2 * i);
}

// The top k in index order: the k-th largest magnitude found by a
// selection over the keys alone, then one pass in index order taking
// everything above it and as many of its ties as fit, lowest index first.
void EncodeTopK(absl::Span<const float> values, uint64_t k, std::vector<char>* out,
                std::vector<uint32_t>* keys) {
  keys->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) (*keys)[i] = MagnitudeKey(values[i]);
  std::nth_element(keys->begin(), keys->begin() + static_cast<long>(k - 1), keys->end(),
                   std::greater<uint32_t>());
  const uint32_t kth = (*keys)[k - 1];
  uint64_t ties = k;
  for (float v : values) ties -= MagnitudeKey(v) > kth ? 1 : 0;
  out->resize(8 * k);
  char* p = out->data();
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t key = MagnitudeKey(values[i]);
    if (key < kth || (key == kth && ties == 0)) continue;
    if (key == kth) --ties;
    Store(static_cast<uint32_t>(i), p);
    Store(values[i], p + 4);
    p += 8;
  }
}

absl::Status SizeError(absl::string_view what, size_t bytes, size_t n, size_t expected) {
  return absl::InvalidArgumentError(absl::StrCat(what, " payload of ", bytes, " bytes for a range of ",
                                                 n, " floats (expected ", expected, ")"));
}

absl::Status DecodeF32(absl::Span<const char> payload, absl::Span<float> out) {
  if (payload.size() != 4 * out.size()) {
    // Worded as the ps always said it: tests and logs look for it.
    return absl::InvalidArgumentError(absl::StrCat("payload of ", payload.size(),
                                                   " bytes for a range of ", out.size(), " floats"));
  }
  if (!out.empty()) std::memcpy(out.data(), payload.data(), payload.size());
  return absl::OkStatus();
}

absl::Status Decode16(absl::string_view what, float (*convert)(uint16_t),
                      absl::Span<const char> payload, absl::Span<float> out) {
  const size_t n = out.size();
  if (payload.size() != Padded16(n)) return SizeError(what, payload.size(), n, Padded16(n));
  if (n % 2 == 1 && Load<uint16_t>(payload.data() + 2 * n) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " payload: its pad is not zero"));
  }
  for (size_t i = 0; i < n; ++i) out[i] = convert(Load<uint16_t>(payload.data() + 2 * i));
  return absl::OkStatus();
}

absl::Status DecodeTopK(uint64_t k, absl::Span<const char> payload, absl::Span<float> out) {
  const size_t n = out.size();
  if (k < 1 || k > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("topk_count ", k, " for a range of ", n, " floats (expected 1..", n, ")"));
  }
  if (payload.size() != 8 * k) return SizeError("topk", payload.size(), n, 8 * k);
  std::fill(out.begin(), out.end(), 0.0f);
  for (uint64_t j = 0; j < k; ++j) {
    const uint32_t index = Load<uint32_t>(payload.data() + 8 * j);
    if (index >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("topk pair ", j, ": index ", index, " is outside the range of ", n, " floats"));
    }
    if (j > 0 && index <= Load<uint32_t>(payload.data() + 8 * (j - 1))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "topk pair ", j, ": index ", index, " does not follow the one before (strictly increasing)"));
    }
    out[index] = Load<float>(payload.data() + 8 * j + 4);
  }
  return absl::OkStatus();
}

}  // namespace

std::string WireEncoding::ToString() const {
  switch (kind) {
    case proto::BF16:
      return "bf16";
    case proto::FP16:
      return "fp16";
    case proto::TOPK:
      return absl::StrCat("topk:", topk_ratio);
    default:
      return "f32";
  }
}

absl::StatusOr<WireEncoding> ParseWireEncoding(absl::string_view text) {
  if (text == "f32") return WireEncoding{proto::F32, 1.0};
  if (text == "bf16") return WireEncoding{proto::BF16, 1.0};
  if (text == "fp16") return WireEncoding{proto::FP16, 1.0};
  double ratio = 0;
  if (absl::ConsumePrefix(&text, "topk:")) {
    if (absl::SimpleAtod(text, &ratio) && ratio > 0 && ratio <= 1) {
      return WireEncoding{proto::TOPK, ratio};
    }
    return absl::InvalidArgumentError(
        absl::StrCat("topk:R needs 0 < R <= 1 (the fraction of each shard's entries sent), got \"",
                     text, "\""));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"", text, "\" (expected f32, bf16, fp16 or topk:R with 0 < R <= 1)"));
}

uint64_t TopKCount(double ratio, size_t n) {
  const double k = std::ceil(ratio * static_cast<double>(n) - 1e-6);
  if (!(k >= 1)) return 1;
  return std::min<uint64_t>(static_cast<uint64_t>(std::min(k, 1e18)), n);
}

size_t EncodedBytes(proto::Encoding encoding, size_t n, uint64_t topk_count) {
  switch (encoding) {
    case proto::F32:
      return 4 * n;
    case proto::BF16:
    case proto::FP16:
      return Padded16(n);
    case proto::TOPK:
      return 8 * topk_count;
    default:
      LOG(FATAL) << "no layout for encoding " << encoding;
  }
  return 0;
}

size_t MaxEncodedBytes(proto::Encoding encoding, size_t n) {
  return encoding == proto::TOPK ? 8 * n : 4 * n;
}

uint16_t F32ToBf16(float value) {
  const uint32_t x = Bits(value);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > kF32Inf) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN, made quiet
  if (a == kF32Inf) return static_cast<uint16_t>(x >> 16);
  if (a >= kBf16Overflow) return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7F7Fu);
  // Round to nearest even: add just under half a unit, plus the unit's
  // lowest kept bit, and truncate. Carries into the exponent are right.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

float Bf16ToF32(uint16_t bits) { return FromBits(static_cast<uint32_t>(bits) << 16); }

uint16_t F32ToFp16(float value) {
  const uint32_t x = Bits(value);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > kF32Inf) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // quiet NaN
  if (a == kF32Inf) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a >= kFp16Overflow) return static_cast<uint16_t>(sign | 0x7BFFu);  // clamped to 65504
  if (a < kFp16MinNormal) return static_cast<uint16_t>(sign | SubnormalFp16(a));
  uint32_t m = a - kFp16Rebias;
  m += 0x0FFFu + ((m >> 13) & 1u);  // round to nearest even on the 13 dropped bits
  return static_cast<uint16_t>(sign | (m >> 13));
}

float Fp16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return FromBits(sign | kF32Inf | (mantissa << 13));
  if (exponent != 0) return FromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  const float v = static_cast<float>(mantissa) * 0x1p-24f;  // subnormal or zero: exact
  return sign != 0 ? -v : v;
}

void EncodeGradient(proto::Encoding encoding, uint64_t topk_count, absl::Span<const float> values,
                    std::vector<char>* out, std::vector<uint32_t>* scratch) {
  CHECK(!values.empty() && values.size() < (size_t{1} << 32));
  switch (encoding) {
    case proto::F32:
      out->resize(4 * values.size());
      std::memcpy(out->data(), values.data(), out->size());
      return;
    case proto::BF16:
      return Encode16(values, F32ToBf16, out);
    case proto::FP16:
      return Encode16(values, F32ToFp16, out);
    case proto::TOPK:
      CHECK(topk_count >= 1 && topk_count <= values.size()) << topk_count;
      return EncodeTopK(values, topk_count, out, scratch);
    default:
      LOG(FATAL) << "no layout for encoding " << encoding;
  }
}

absl::Status DecodeGradient(proto::Encoding encoding, uint64_t topk_count,
                            absl::Span<const char> payload, absl::Span<float> out) {
  if (encoding != proto::TOPK && topk_count != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("topk_count ", topk_count, " with payload encoding ", encoding, " (only TOPK has one)"));
  }
  switch (encoding) {
    case proto::F32:
      return DecodeF32(payload, out);
    case proto::BF16:
      return Decode16("bf16", Bf16ToF32, payload, out);
    case proto::FP16:
      return Decode16("fp16", Fp16ToF32, payload, out);
    case proto::TOPK:
      return DecodeTopK(topk_count, payload, out);
    default:
      return absl::UnimplementedError(absl::StrCat(
          "payload encoding ", encoding, " (this ps decodes F32, BF16, FP16 and TOPK)"));
  }
}

}  // namespace pstrain

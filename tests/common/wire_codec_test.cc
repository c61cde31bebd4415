// The push encodings: bf16 and fp16 round to nearest even at every boundary
// (ties, subnormals, overflow, NaN), top-k selects by magnitude with ties to
// the lower index, every layout is exactly as common/wire_codec.h draws it,
// and the decoder refuses anything else without reading past the payload.

#include "common/wire_codec.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

absl::Span<const char> View(const std::vector<char>& v) { return absl::MakeConstSpan(v); }

// Bytes of `values` laid end to end, as a peer might send them.
template <typename T>
std::vector<char> Raw(const std::vector<T>& values) {
  std::vector<char> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A TOPK payload of (index, value) pairs.
std::vector<char> Pairs(const std::vector<std::pair<uint32_t, float>>& pairs) {
  std::vector<char> out;
  for (const auto& [index, value] : pairs) {
    const std::vector<char> i = Raw(std::vector<uint32_t>{index});
    const std::vector<char> v = Raw(std::vector<float>{value});
    out.insert(out.end(), i.begin(), i.end());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Whether `code` is the correctly rounded (nearest, ties to the even code)
// encoding of `x`, judged only by decoding it and its neighbours in double.
template <typename Decode>
void ExpectNearestEven(float x, uint16_t code, Decode decode) {
  const double want = x;
  const double got = decode(code);
  for (int step : {-1, 1}) {
    const auto other = static_cast<uint16_t>(code + step);
    const double alt = decode(other);
    if (std::isnan(alt) || std::signbit(alt) != std::signbit(got)) continue;
    const double d_got = std::fabs(want - got), d_alt = std::fabs(want - alt);
    EXPECT_LE(d_got, d_alt) << x << " -> " << code << ", but " << other << " is nearer";
    if (d_got == d_alt) {
      EXPECT_EQ(code % 2, 0) << x << ": a tie goes to the even code";
    }
  }
}

TEST(Bf16, RoundsToNearestEvenNotByTruncation) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBf16(-2.5f), 0xC020);
  const float half_ulp = std::ldexp(1.0f, -8);  // bf16 has 7 mantissa bits
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + half_ulp)), 1.0f);                      // tie: to even
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 3 * half_ulp)), 1.0f + 4 * half_ulp);  // tie: to even
  // Just over half: up, where truncation would give 1.
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + half_ulp + std::ldexp(1.0f, -20))), 1.0f + 2 * half_ulp);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + half_ulp - std::ldexp(1.0f, -20))), 1.0f);
  // A carry into the exponent.
  EXPECT_EQ(Bf16ToF32(F32ToBf16(FromBits(0x3FFFFFFF))), 2.0f);
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
}

TEST(Bf16, KeepsSubnormalsAndRoundsThemToEven) {
  EXPECT_EQ(F32ToBf16(FromBits(0x00010000)), 0x0001);  // the smallest bf16 subnormal
  EXPECT_EQ(F32ToBf16(FromBits(0x00008000)), 0x0000);  // half of it: tie to 0
  EXPECT_EQ(F32ToBf16(FromBits(0x00018000)), 0x0002);  // one and a half: tie to 2
  EXPECT_EQ(F32ToBf16(FromBits(0x00008001)), 0x0001);
  EXPECT_EQ(F32ToBf16(FromBits(0x80000001)), 0x8000);  // -tiny -> -0
}

TEST(Bf16, ClampsWhatWouldOverflowAndKeepsInfinitiesAndNaNs) {
  EXPECT_EQ(F32ToBf16(FLT_MAX), 0x7F7F);
  EXPECT_EQ(F32ToBf16(-FLT_MAX), 0xFF7F);
  EXPECT_EQ(F32ToBf16(FromBits(0x7F7F8000)), 0x7F7F);  // the tie that would go to infinity
  EXPECT_EQ(F32ToBf16(FromBits(0x7F7F7FFF)), 0x7F7F);
  EXPECT_TRUE(std::isfinite(Bf16ToF32(0x7F7F)));
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(F32ToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(FromBits(0x7F800001)))));  // payload only in the low half
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(FromBits(0xFF800001)))));
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(F32ToFp16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToFp16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToFp16(65504.0f), 0x7BFF);
  const float half_ulp = std::ldexp(1.0f, -11);  // fp16 has 10 mantissa bits
  EXPECT_EQ(Fp16ToF32(F32ToFp16(1.0f + half_ulp)), 1.0f);
  EXPECT_EQ(Fp16ToF32(F32ToFp16(1.0f + 3 * half_ulp)), 1.0f + 4 * half_ulp);
  EXPECT_EQ(Fp16ToF32(F32ToFp16(2049.0f)), 2048.0f);  // spacing 2 here: ties to even
  EXPECT_EQ(Fp16ToF32(F32ToFp16(2051.0f)), 2052.0f);
  EXPECT_EQ(Fp16ToF32(F32ToFp16(2049.001f)), 2050.0f);
  EXPECT_EQ(F32ToFp16(-0.0f), 0x8000);
}

TEST(Fp16, RoundsSubnormalsToEvenAndCarriesIntoTheNormals) {
  EXPECT_EQ(F32ToFp16(std::ldexp(1.0f, -24)), 0x0001);      // the smallest subnormal
  EXPECT_EQ(F32ToFp16(std::ldexp(1.0f, -25)), 0x0000);      // half of it: tie to 0
  EXPECT_EQ(F32ToFp16(std::ldexp(3.0f, -25)), 0x0002);      // 1.5 units: tie to 2
  EXPECT_EQ(F32ToFp16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  EXPECT_EQ(F32ToFp16(std::ldexp(1.0f, -40)), 0x0000);
  EXPECT_EQ(F32ToFp16(FromBits(0x00000001)), 0x0000);       // an f32 subnormal
  EXPECT_EQ(F32ToFp16(std::ldexp(1.0f, -14)), 0x0400);      // the smallest normal
  // Just under it, 0x3FF.8 units: a tie, carried up to the normal 0x400.
  EXPECT_EQ(F32ToFp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);
  EXPECT_EQ(Fp16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToF32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::signbit(Fp16ToF32(0x8000)));
}

TEST(Fp16, ClampsFiniteValuesBeyond65504AndKeepsInfinitiesAndNaNs) {
  EXPECT_EQ(F32ToFp16(65519.0f), 0x7BFF);  // rounds to 65504 anyway
  EXPECT_EQ(F32ToFp16(65520.0f), 0x7BFF);  // would round to infinity: clamped
  EXPECT_EQ(F32ToFp16(1e6f), 0x7BFF);
  EXPECT_EQ(F32ToFp16(-1e6f), 0xFBFF);
  EXPECT_EQ(F32ToFp16(FLT_MAX), 0x7BFF);
  EXPECT_EQ(F32ToFp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(F32ToFp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_TRUE(std::isnan(Fp16ToF32(F32ToFp16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(Fp16ToF32(F32ToFp16(FromBits(0x7F800001)))));  // low payload bits only
  EXPECT_TRUE(std::isnan(Fp16ToF32(F32ToFp16(-std::nanf("")))));
}

TEST(HalfPrecision, EveryCodeRoundTripsAndRandomFloatsGoToTheNearestEvenCode) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const auto code = static_cast<uint16_t>(c);
    const float b = Bf16ToF32(code), h = Fp16ToF32(code);
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(b))));
    } else {
      EXPECT_EQ(F32ToBf16(b), code);
    }
    if (std::isnan(h)) {
      EXPECT_TRUE(std::isnan(Fp16ToF32(F32ToFp16(h))));
    } else {
      EXPECT_EQ(F32ToFp16(h), code);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = FromBits(static_cast<uint32_t>(rng()));
    if (!std::isfinite(x)) continue;
    const uint16_t b = F32ToBf16(x);
    if (std::fabs(x) < FromBits(0x7F7F8000)) ExpectNearestEven(x, b, Bf16ToF32);
    // fp16's range, with its subnormals: a narrower distribution.
    const float y = std::ldexp(static_cast<float>(rng() % 2048) - 1024.0f, static_cast<int>(rng() % 40) - 34);
    if (std::fabs(y) < 65520.0f) ExpectNearestEven(y, F32ToFp16(y), Fp16ToF32);
  }
}

TEST(TopK, CountsRTimesTheShardRoundedUpAndAtLeastOne) {
  EXPECT_EQ(TopKCount(0.01, 10920), 110u);  // 109.2
  EXPECT_EQ(TopKCount(0.1, 30), 3u);        // not 4: 0.1 x 30 is 3.0000000000000004 in doubles
  EXPECT_EQ(TopKCount(0.3, 10), 3u);
  EXPECT_EQ(TopKCount(1e-9, 100), 1u);
  EXPECT_EQ(TopKCount(0.5, 1), 1u);
  EXPECT_EQ(TopKCount(1.0, 7), 7u);
  EXPECT_EQ(TopKCount(0.999, 7), 7u);
}

std::vector<float> EncodeDecode(proto::Encoding e, uint64_t k, const std::vector<float>& values,
                                std::vector<char>* bytes) {
  std::vector<uint32_t> scratch;
  EncodeGradient(e, k, values, bytes, &scratch);
  std::vector<float> out(values.size(), -1.0f);
  const absl::Status s = DecodeGradient(e, e == proto::TOPK ? k : 0, View(*bytes), absl::MakeSpan(out));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(TopK, KeepsTheLargestMagnitudesInIndexOrderTiesToTheLowerIndex) {
  const std::vector<float> v = {0.1f, -5.0f, 3.0f, -5.0f, 0.0f, 7.0f};
  std::vector<char> bytes;
  EXPECT_THAT(EncodeDecode(proto::TOPK, 3, v, &bytes), ElementsAre(0, -5, 0, -5, 0, 7));
  EXPECT_EQ(bytes, Pairs({{1, -5.0f}, {3, -5.0f}, {5, 7.0f}}));
  // Two of magnitude 5 for one place: the lower index.
  EXPECT_THAT(EncodeDecode(proto::TOPK, 2, v, &bytes), ElementsAre(0, -5, 0, 0, 0, 7));
  EXPECT_EQ(bytes, Pairs({{1, -5.0f}, {5, 7.0f}}));
  EXPECT_THAT(EncodeDecode(proto::TOPK, 1, v, &bytes), ElementsAre(0, 0, 0, 0, 0, 7));
  // k = n: everything, zeros included.
  EXPECT_THAT(EncodeDecode(proto::TOPK, 6, v, &bytes), ElementsAre(0.1f, -5, 3, -5, 0, 7));
  EXPECT_EQ(bytes.size(), 48u);
  // All equal: the first k.
  EXPECT_EQ(EncodeDecode(proto::TOPK, 2, {2, -2, 2, -2}, &bytes), std::vector<float>({2, -2, 0, 0}));
  // One entry.
  EXPECT_EQ(EncodeDecode(proto::TOPK, 1, {-0.5f}, &bytes), std::vector<float>({-0.5f}));
}

TEST(TopK, ANaNOrInfinityIsAlwaysSentSoThePsRefusesIt) {
  std::vector<char> bytes;
  const std::vector<float> out =
      EncodeDecode(proto::TOPK, 2, {1e30f, std::nanf(""), -INFINITY, 5.0f}, &bytes);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], -INFINITY);
  EXPECT_EQ(out[0], 0.0f);
}

TEST(Layouts, AreTheBytesTheHeaderDescribes) {
  std::vector<char> bytes;
  EncodeDecode(proto::BF16, 0, {1.0f, -2.5f, 0.0f}, &bytes);
  // Three little-endian codes and a zero pad to whole 32-bit words.
  EXPECT_EQ(bytes, Raw(std::vector<uint16_t>{0x3F80, 0xC020, 0x0000, 0x0000}));
  EncodeDecode(proto::FP16, 0, {1.0f, -2.0f}, &bytes);
  EXPECT_EQ(bytes, Raw(std::vector<uint16_t>{0x3C00, 0xC000}));
  EncodeDecode(proto::F32, 0, {1.5f, -3.0f}, &bytes);
  EXPECT_EQ(bytes, Raw(std::vector<float>{1.5f, -3.0f}));
  EXPECT_EQ(EncodedBytes(proto::BF16, 3, 0), 8u);
  EXPECT_EQ(EncodedBytes(proto::FP16, 4, 0), 8u);
  EXPECT_EQ(EncodedBytes(proto::TOPK, 100, 5), 40u);
  EXPECT_EQ(EncodedBytes(proto::F32, 5, 0), 20u);
  EXPECT_EQ(MaxEncodedBytes(proto::TOPK, 5), 40u);
  EXPECT_EQ(MaxEncodedBytes(proto::BF16, 5), 20u);
}

absl::Status Decode(proto::Encoding e, uint64_t k, const std::vector<char>& bytes, size_t n) {
  std::vector<float> out(n);
  return DecodeGradient(e, k, View(bytes), absl::MakeSpan(out));
}

TEST(Decode, RefusesTopKPayloadsThatAreNotExactlyTheLayout) {
  EXPECT_TRUE(Decode(proto::TOPK, 2, Pairs({{0, 1}, {3, 2}}), 4).ok());
  EXPECT_THAT(Decode(proto::TOPK, 2, Pairs({{3, 1}, {0, 2}}), 4).message(), HasSubstr("strictly increasing"));
  EXPECT_THAT(Decode(proto::TOPK, 2, Pairs({{1, 1}, {1, 2}}), 4).message(), HasSubstr("strictly increasing"));
  EXPECT_THAT(Decode(proto::TOPK, 1, Pairs({{4, 1}}), 4).message(), HasSubstr("outside the range"));
  EXPECT_THAT(Decode(proto::TOPK, 1, Pairs({{0xFFFFFFFFu, 1}}), 4).message(), HasSubstr("outside"));
  EXPECT_THAT(Decode(proto::TOPK, 0, {}, 4).message(), HasSubstr("topk_count 0"));
  EXPECT_THAT(Decode(proto::TOPK, 5, Pairs({{0, 1}, {1, 1}, {2, 1}, {3, 1}, {3, 1}}), 4).message(),
              HasSubstr("topk_count 5"));
  EXPECT_THAT(Decode(proto::TOPK, uint64_t{1} << 62, Pairs({{0, 1}}), 4).message(), HasSubstr("topk_count"));
  EXPECT_THAT(Decode(proto::TOPK, 2, Pairs({{0, 1}}), 4).message(), HasSubstr("payload of 8 bytes"));
  std::vector<char> short_pair = Pairs({{0, 1}, {1, 2}});
  short_pair.pop_back();
  EXPECT_THAT(Decode(proto::TOPK, 2, short_pair, 4).message(), HasSubstr("payload of 15 bytes"));
}

TEST(Decode, RefusesWrongSizesPadsEncodingsAndCounts) {
  EXPECT_THAT(Decode(proto::F32, 0, Raw(std::vector<float>(3)), 4).message(),
              HasSubstr("payload of 12 bytes for a range of 4 floats"));
  EXPECT_THAT(Decode(proto::BF16, 0, Raw(std::vector<uint16_t>(3)), 4).message(),
              HasSubstr("bf16 payload of 6 bytes"));
  EXPECT_THAT(Decode(proto::FP16, 0, Raw(std::vector<float>(4)), 4).message(),
              HasSubstr("fp16 payload of 16 bytes"));
  EXPECT_TRUE(Decode(proto::FP16, 0, Raw(std::vector<uint16_t>{0x3C00, 0x3C00, 0x3C00, 0}), 3).ok());
  EXPECT_THAT(Decode(proto::FP16, 0, Raw(std::vector<uint16_t>{0x3C00, 0x3C00, 0x3C00, 1}), 3).message(),
              HasSubstr("pad is not zero"));
  EXPECT_THAT(Decode(proto::F32, 3, Raw(std::vector<float>(4)), 4).message(), HasSubstr("only TOPK"));
  EXPECT_EQ(Decode(static_cast<proto::Encoding>(9), 0, Raw(std::vector<float>(4)), 4).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(Decode(proto::ENCODING_UNSPECIFIED, 0, Raw(std::vector<float>(4)), 4).code(),
            absl::StatusCode::kUnimplemented);
}

TEST(Decode, RandomBytesAreRefusedOrDecodedNeverMisread) {
  std::mt19937 rng(3);
  const proto::Encoding kinds[] = {proto::F32, proto::BF16, proto::FP16, proto::TOPK};
  for (int i = 0; i < 20000; ++i) {
    std::vector<char> bytes(rng() % 64);
    for (char& c : bytes) c = static_cast<char>(rng());
    const size_t n = 1 + rng() % 9;
    const proto::Encoding e = kinds[rng() % 4];
    std::vector<float> out(n + 2, 12345.0f);  // guards on each side
    const absl::Status s = DecodeGradient(e, e == proto::TOPK ? rng() % 10 : 0, View(bytes),
                                          absl::MakeSpan(out).subspan(1, n));
    EXPECT_EQ(out.front(), 12345.0f);
    EXPECT_EQ(out.back(), 12345.0f);
    if (s.ok()) {
      EXPECT_EQ(bytes.size(), EncodedBytes(e, n, bytes.size() / 8));
    }
  }
}

TEST(WireEncoding, ParsesTheFlagsValuesAndRefusesOthersSayingWhatIsExpected) {
  EXPECT_EQ(ParseWireEncoding("f32")->kind, proto::F32);
  EXPECT_EQ(ParseWireEncoding("bf16")->kind, proto::BF16);
  EXPECT_EQ(ParseWireEncoding("fp16")->kind, proto::FP16);
  auto topk = ParseWireEncoding("topk:0.01");
  ASSERT_TRUE(topk.ok());
  EXPECT_EQ(topk->kind, proto::TOPK);
  EXPECT_EQ(topk->topk_ratio, 0.01);
  EXPECT_EQ(topk->ToString(), "topk:0.01");
  EXPECT_TRUE(ParseWireEncoding("topk:1").ok());
  EXPECT_FALSE(ParseWireEncoding("f32").value().lossy());
  EXPECT_TRUE(ParseWireEncoding("bf16").value().lossy());
  for (const char* bad : {"topk:0", "topk:1.5", "topk:-0.1", "topk:", "topk:abc", "topk:nan", "topk"}) {
    EXPECT_THAT(ParseWireEncoding(bad).status().message(), HasSubstr("0 < R <= 1")) << bad;
  }
  EXPECT_THAT(ParseWireEncoding("f64").status().message(), HasSubstr("expected f32, bf16, fp16"));
  EXPECT_FALSE(ParseWireEncoding("BF16").ok());
}

}  // namespace
}  // namespace pstrain

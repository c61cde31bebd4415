// Error feedback: what the ps decodes over a run adds up to the true
// gradients less the final residual, for every lossy encoding; a step
// encoded again starts from the residual it started from; f32 is the
// gradient itself, untouched.

#include "worker/gradient_encoder.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

ShardPlan TwoShards(int64_t floats) {
  auto plan = ShardPlan::Create("t", {{"w", floats - 7}, {"b", 7}}, 2, ShardStrategy::kBalanced);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

// What every shard's ps decodes from `payloads`, as one flat vector.
std::vector<float> DecodeAll(const ShardPlan& plan, absl::Span<const EncodedShard> payloads) {
  std::vector<float> out(static_cast<size_t>(plan.total_size()));
  for (int k = 0; k < plan.num_shards(); ++k) {
    const ShardRange r = plan.range(k);
    const absl::Status s = DecodeGradient(
        payloads[k].encoding, payloads[k].topk_count, payloads[k].bytes,
        absl::MakeSpan(out).subspan(static_cast<size_t>(r.begin), static_cast<size_t>(r.size())));
    EXPECT_TRUE(s.ok()) << s;
  }
  return out;
}

std::vector<float> RandomGradient(std::mt19937* rng, size_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> g(n);
  for (float& x : g) x = normal(*rng);
  return g;
}

class ErrorFeedback : public ::testing::TestWithParam<const char*> {};

TEST_P(ErrorFeedback, WhatThePsDecodedSumsToTheGradientsLessTheFinalResidual) {
  const ShardPlan plan = TwoShards(301);  // odd shards: bf16/fp16 pads
  const WireEncoding wire = *ParseWireEncoding(GetParam());
  GradientEncoder encoder(wire, plan);
  std::mt19937 rng(11);
  const size_t n = static_cast<size_t>(plan.total_size());
  std::vector<double> sent(n, 0.0), truth(n, 0.0), magnitude(n, 0.0);
  for (int64_t step = 0; step < 200; ++step) {
    // Gradients spread over many binades, some beyond fp16's range.
    const std::vector<float> g = RandomGradient(&rng, n, step % 50 == 7 ? 1e5f : 1e-3f);
    const std::vector<float> d = DecodeAll(plan, encoder.Encode(step, g, /*weighted=*/true));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(d[i])) << "a finite gradient decodes finite";
      sent[i] += d[i];
      truth[i] += g[i];
      magnitude[i] += std::fabs(g[i]) + std::fabs(d[i]) + std::fabs(encoder.residual()[i]);
    }
  }
  ASSERT_EQ(encoder.residual().size(), n);
  double max_error = 0;
  for (size_t i = 0; i < n; ++i) {
    const double error = std::fabs(sent[i] - (truth[i] - encoder.residual()[i]));
    // Float rounding of the 200 additions g + e and subtractions (g + e) - d.
    EXPECT_LE(error, 1e-6 * magnitude[i] + 1e-30) << i;
    max_error = std::max(max_error, error / (magnitude[i] + 1e-30));
  }
  std::printf("RESULT error_feedback wire=%s max_relative_error=%.3g\n", GetParam(), max_error);
}

TEST_P(ErrorFeedback, AStepEncodedAgainStartsFromTheResidualItStartedFrom) {
  const ShardPlan plan = TwoShards(100);
  GradientEncoder encoder(*ParseWireEncoding(GetParam()), plan);
  std::mt19937 rng(5);
  const size_t n = static_cast<size_t>(plan.total_size());
  encoder.Encode(0, RandomGradient(&rng, n, 1.0f), true);
  const std::vector<float> g = RandomGradient(&rng, n, 1.0f);
  encoder.Encode(1, g, true);
  const std::vector<float> residual(encoder.residual().begin(), encoder.residual().end());
  const std::vector<float> decoded = DecodeAll(plan, encoder.payloads());
  // The same step again (its push was lost; computed again): the same
  // bytes and the same residual, not the residual added twice.
  encoder.Encode(1, g, true);
  EXPECT_EQ(DecodeAll(plan, encoder.payloads()), decoded);
  EXPECT_EQ(std::vector<float>(encoder.residual().begin(), encoder.residual().end()), residual);
  // The next step goes on from it.
  encoder.Encode(2, std::vector<float>(n, 0.0f), true);
  const std::vector<float> flushed = DecodeAll(plan, encoder.payloads());
  for (size_t i = 0; i < n; ++i) {
    EXPECT_FLOAT_EQ(flushed[i] + encoder.residual()[i], residual[i]) << i;
  }
}

TEST_P(ErrorFeedback, AGradientOfNoWeightIsSentAsItIsAndLeavesTheResidual) {
  const ShardPlan plan = TwoShards(64);
  GradientEncoder encoder(*ParseWireEncoding(GetParam()), plan);
  std::mt19937 rng(9);
  const size_t n = static_cast<size_t>(plan.total_size());
  encoder.Encode(0, RandomGradient(&rng, n, 1.0f), true);
  const std::vector<float> residual(encoder.residual().begin(), encoder.residual().end());
  encoder.Encode(1, std::vector<float>(n, 0.0f), /*weighted=*/false);
  EXPECT_EQ(DecodeAll(plan, encoder.payloads()), std::vector<float>(n, 0.0f));
  EXPECT_EQ(std::vector<float>(encoder.residual().begin(), encoder.residual().end()), residual);
}

// "topk:0.01" -> "topk_0_01": a test name.
std::string ParamName(const ::testing::TestParamInfo<const char*>& param) {
  std::string name = param.param;
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Lossy, ErrorFeedback,
                         ::testing::Values("bf16", "fp16", "topk:0.01", "topk:0.3", "topk:1"), ParamName);

TEST(GradientEncoder, TopKSendsItsShareOfEachShardAndTheResidualKeepsTheRest) {
  const ShardPlan plan = TwoShards(1000);
  GradientEncoder encoder(*ParseWireEncoding("topk:0.01"), plan);
  std::vector<float> g(1000, 0.5f);
  g[3] = 9.0f;
  g[700] = -8.0f;
  encoder.Encode(0, g, true);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(encoder.payloads()[k].encoding, proto::TOPK);
    EXPECT_EQ(encoder.payloads()[k].topk_count, 5u);  // ceil(0.01 x 500)
    EXPECT_EQ(encoder.payloads()[k].bytes.size(), 40u);
  }
  EXPECT_EQ(encoder.bytes_per_step(), 80u);
  const std::vector<float> d = DecodeAll(plan, encoder.payloads());
  EXPECT_EQ(d[3], 9.0f);
  EXPECT_EQ(d[700], -8.0f);
  EXPECT_EQ(encoder.residual()[3], 0.0f);
  EXPECT_EQ(encoder.residual()[999], 0.5f);
  // The residual grows until an entry is among the largest.
  for (int64_t step = 1; step < 200; ++step) encoder.Encode(step, std::vector<float>(1000, 0.0f), true);
  EXPECT_LT(encoder.residual()[999], 0.5f);
}

TEST(GradientEncoder, F32SendsTheGradientItselfWithoutCopyOrResidual) {
  const ShardPlan plan = TwoShards(50);
  GradientEncoder encoder(WireEncoding{}, plan);
  std::vector<float> g(50);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>(i);
  encoder.Encode(0, g, true);
  EXPECT_TRUE(encoder.residual().empty());
  for (int k = 0; k < 2; ++k) {
    const ShardRange r = plan.range(k);
    EXPECT_EQ(encoder.payloads()[k].encoding, proto::F32);
    EXPECT_EQ(encoder.payloads()[k].bytes.data(), reinterpret_cast<const char*>(g.data() + r.begin));
    EXPECT_EQ(encoder.payloads()[k].bytes.size(), static_cast<size_t>(r.size()) * sizeof(float));
  }
  EXPECT_EQ(DecodeAll(plan, encoder.payloads()), g);
  EXPECT_EQ(encoder.bytes_per_step(), 200u);
}

TEST(GradientEncoder, Bf16HalvesTheBytesAndKeepsWhatRoundingLeft) {
  const ShardPlan plan = TwoShards(21);
  GradientEncoder encoder(*ParseWireEncoding("bf16"), plan);
  const float x = 1.0f + std::ldexp(1.0f, -9);  // a quarter unit of bf16 above 1
  encoder.Encode(0, std::vector<float>(21, x), true);
  EXPECT_EQ(encoder.bytes_per_step(), 24u + 20u);  // 11 and 10 entries, padded to words
  float sent = DecodeAll(plan, encoder.payloads())[0];
  EXPECT_EQ(sent, 1.0f);
  EXPECT_EQ(encoder.residual()[0], std::ldexp(1.0f, -9));
  // Four quarters make a unit: after four steps all of it was sent
  // (1, 1, 1 + 2^-7, 1: the third rounds up, the fourth has nothing over).
  for (int64_t step = 1; step < 4; ++step) {
    encoder.Encode(step, std::vector<float>(21, x), true);
    sent += DecodeAll(plan, encoder.payloads())[0];
  }
  EXPECT_EQ(sent, 4 * x);
  EXPECT_EQ(encoder.residual()[0], 0.0f);
}

}  // namespace
}  // namespace pstrain

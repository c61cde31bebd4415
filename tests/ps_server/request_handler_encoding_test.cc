// Encoded gradient pushes (--wire) at the ps: each worker in its own
// encoding, sync averaging exactly what was decoded, and every malformed
// encoded payload refused, counted, and without effect on the shard.

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/wire_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_server/request_handler.h"
#include "tests/ps_server/request_handler_fixture.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::string Pairs(const std::vector<std::pair<uint32_t, float>>& pairs) {
  std::string out;
  for (const auto& [index, value] : pairs) out += Bytes(std::vector<uint32_t>{index}) + Bytes(std::vector<float>{value});
  return out;
}

class EncodedPushTest : public RequestHandlerTest {
 protected:
  // A PUSH_PULL of rank `rank` at step/version 0 with `bytes` as its payload.
  std::vector<Reply> PushEncoded(int rank, proto::Encoding encoding, uint64_t topk_count,
                                 const std::string& bytes, int n = 1) {
    proto::Header h = Base(proto::PUSH_PULL, rank);
    h.set_num_examples(n);
    h.set_encoding(encoding);
    h.set_topk_count(topk_count);
    Message m;
    m.header = std::move(h);
    if (!bytes.empty()) {
      m.payload = zmq::message_t(bytes.data(), bytes.size());
      m.has_payload = true;
    }
    return Send(rank, m);
  }

  std::vector<float> Params() { return {H().params().begin(), H().params().end()}; }
};

TEST_F(EncodedPushTest, SyncAveragesWhatItDecodedFromWorkersOfDifferentEncodings) {
  Init(proto::SYNC, 3);
  RegisterAll(3);
  // bf16 {1, 1 + 2^-9 (rounds to 1), -2.5, 3}, weight 1.
  const float x = 1.0f + std::ldexp(1.0f, -9);
  std::vector<uint16_t> bf16;
  for (float v : {1.0f, x, -2.5f, 3.0f}) bf16.push_back(F32ToBf16(v));
  EXPECT_TRUE(PushEncoded(0, proto::BF16, 0, Bytes(bf16), 1).empty());
  // top-k {0, 2, 0, -4}, weight 2.
  EXPECT_TRUE(PushEncoded(1, proto::TOPK, 2, Pairs({{1, 2.0f}, {3, -4.0f}}), 2).empty());
  // fp16 {0.5, 0.5, 0.5, 0.5}, weight 1: completes the version.
  const std::vector<uint16_t> fp16(4, F32ToFp16(0.5f));
  std::vector<Reply> out = PushEncoded(2, proto::FP16, 0, Bytes(fp16), 1);
  ASSERT_EQ(out.size(), 3u);
  for (const Reply& r : out) {
    EXPECT_FALSE(IsError(r)) << r.header.error().message();
    EXPECT_TRUE(r.with_params);
    EXPECT_EQ(r.header.encoding(), proto::F32);  // parameters go back in f32
  }
  // (1*{1,1,-2.5,3} + 2*{0,2,0,-4} + 1*{.5,.5,.5,.5}) / 4 = {.375, 1.375, -.5, -1.125};
  // p = 1 - 0.5 * that.
  EXPECT_THAT(Params(), ::testing::ElementsAre(0.8125f, 0.3125f, 1.25f, 1.5625f));
  const proto::ShardStats stats = H().Stats();
  ASSERT_EQ(stats.pushes_by_encoding_size(), 5);
  EXPECT_EQ(stats.pushes_by_encoding(proto::F32), 0);
  EXPECT_EQ(stats.pushes_by_encoding(proto::BF16), 1);
  EXPECT_EQ(stats.pushes_by_encoding(proto::FP16), 1);
  EXPECT_EQ(stats.pushes_by_encoding(proto::TOPK), 1);
}

TEST_F(EncodedPushTest, AsyncAppliesEachEncodingOnArrival) {
  Init(proto::ASYNC, 1);
  std::vector<Reply> out = PushEncoded(0, proto::FP16, 0, Bytes(std::vector<uint16_t>(4, F32ToFp16(-2.0f))));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(IsError(out[0])) << out[0].header.error().message();
  EXPECT_THAT(Params(), ::testing::ElementsAre(2.0f, 2.0f, 2.0f, 2.0f));
  proto::Header h = Base(proto::PUSH, 0);
  h.set_step(1);
  h.set_version(1);
  h.set_num_examples(1);
  h.set_encoding(proto::TOPK);
  h.set_topk_count(1);
  const std::string pair = Pairs({{2, 4.0f}});
  Message m;
  m.header = h;
  m.payload = zmq::message_t(pair.data(), pair.size());
  m.has_payload = true;
  ASSERT_FALSE(IsError(Send(0, m).at(0)));
  EXPECT_THAT(Params(), ::testing::ElementsAre(2.0f, 2.0f, 0.0f, 2.0f));
}

TEST_F(EncodedPushTest, RefusesEveryMalformedEncodedPayloadAndLeavesTheShardAlone) {
  Init(proto::SYNC, 2);
  RegisterAll(2);
  const std::string bf16 = Bytes(std::vector<uint16_t>(4, F32ToBf16(1.0f)));
  struct Case {
    proto::Encoding encoding;
    uint64_t topk_count;
    std::string bytes;
    const char* says;
  };
  const std::vector<Case> cases = {
      {proto::TOPK, 2, Pairs({{3, 1.0f}, {1, 1.0f}}), "strictly increasing"},
      {proto::TOPK, 2, Pairs({{1, 1.0f}, {1, 1.0f}}), "strictly increasing"},
      {proto::TOPK, 1, Pairs({{4, 1.0f}}), "outside the range"},
      {proto::TOPK, 1, Pairs({{0x80000000u, 1.0f}}), "outside the range"},
      {proto::TOPK, 0, Pairs({{0, 1.0f}}), "topk_count 0"},
      {proto::TOPK, 3, Pairs({{0, 1.0f}, {1, 1.0f}}), "payload of 16 bytes"},
      {proto::TOPK, 1, Pairs({{0, 1.0f}, {1, 1.0f}}), "payload of 16 bytes"},
      {proto::TOPK, uint64_t{1} << 61, Pairs({{0, 1.0f}}), "topk_count"},
      {proto::TOPK, 5, Pairs({{0, 1}, {1, 1}, {2, 1}, {3, 1}, {5, 1}}), "larger than the shard"},
      {proto::TOPK, 2, Pairs({{0, 1.0f}, {1, std::nanf("")}}), "not finite"},
      {proto::BF16, 0, bf16.substr(0, 6), "bf16 payload of 6 bytes"},
      {proto::BF16, 0, bf16 + bf16, "bf16 payload of 16 bytes"},
      {proto::BF16, 0, "", "bf16 payload of 0 bytes"},
      {proto::BF16, 3, bf16, "only TOPK"},
      {proto::FP16, 0, Bytes(std::vector<uint16_t>{0x3C00, 0x7C00, 0x3C00, 0x3C00}), "not finite"},
      {proto::FP16, 0, Bytes(std::vector<uint16_t>{0x3C00, 0x7E00, 0x3C00, 0x3C00}), "not finite"},
      {proto::F32, 1, Bytes(std::vector<float>(4, 1.0f)), "only TOPK"},
      {static_cast<proto::Encoding>(9), 0, Bytes(std::vector<float>(4, 1.0f)), "payload encoding 9"},
      {proto::ENCODING_UNSPECIFIED, 0, Bytes(std::vector<float>(4, 1.0f)), "payload encoding 0"},
  };
  for (const Case& c : cases) {
    const std::vector<Reply> out = PushEncoded(1, c.encoding, c.topk_count, c.bytes);
    ASSERT_EQ(out.size(), 1u) << c.says;
    EXPECT_TRUE(IsError(out[0])) << c.says;
    EXPECT_THAT(out[0].header.error().message(), HasSubstr(c.says));
  }
  EXPECT_EQ(H().Stats().rejected_requests(), static_cast<int64_t>(cases.size()));
  EXPECT_EQ(H().Stats().gradients_received(), 0);
  // Nothing reached the shard: a valid version still averages just these two.
  EXPECT_TRUE(PushEncoded(0, proto::BF16, 0, bf16).empty());
  EXPECT_EQ(PushEncoded(1, proto::TOPK, 1, Pairs({{0, 2.0f}})).size(), 2u);
  EXPECT_THAT(Params(), ::testing::ElementsAre(0.25f, 0.75f, 0.75f, 0.75f));
}

}  // namespace
}  // namespace pstrain

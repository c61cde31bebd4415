// A state in parts (transport/state_parts.h): the slices a sender cuts,
// and the receiver's assembler against parts out of order, of another
// stream or header, repeated, or of a size the header does not say.

#include "transport/state_parts.h"

#include <numeric>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Part `offset` (bytes) of `state`, `bytes` long, of stream `stream`.
Message Part(const std::vector<float>& state, uint64_t offset, size_t bytes, uint64_t stream = 9,
             uint64_t request_id = 1) {
  proto::Header h;
  h.set_type(proto::REPLICATE);
  h.set_shard_index(3);
  h.set_request_id(request_id);
  h.mutable_replica()->set_seq(request_id);
  h.mutable_replica()->set_version(5);
  proto::StatePart* p = h.mutable_state_part();
  p->set_offset(offset);
  p->set_total(state.size() * sizeof(float));
  p->set_stream(stream);
  return MakeMessage(h, StateSlice(state, offset, bytes));
}

std::vector<float> State(size_t floats) {
  std::vector<float> s(floats);
  std::iota(s.begin(), s.end(), 1.0f);
  return s;
}

TEST(StateParts, ThePartsOfAStateComeBackAsTheWholeMessage) {
  const std::vector<float> state = State(10);
  StatePartsAssembler a;
  uint64_t id = 1;
  for (uint64_t offset = 0; offset < 40; offset += 16) {
    auto got = a.Add(Part(state, offset, 16, 9, id++), 40);
    ASSERT_TRUE(got.ok()) << got.status();
    if (offset + 16 < 40) {
      EXPECT_FALSE(got->has_value());
      EXPECT_EQ(a.received(), offset + 16);
      // The part just taken, again (its answer was lost): nothing new.
      auto again = a.Add(Part(state, offset, 16, 9, id++), 40);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_FALSE(again->has_value());
      EXPECT_EQ(a.received(), offset + 16);
      continue;
    }
    ASSERT_TRUE(got->has_value());
    const Message& whole = **got;
    EXPECT_FALSE(whole.header.has_state_part());
    EXPECT_EQ(whole.header.request_id(), id - 1);  // the answer goes to the last part
    EXPECT_EQ(whole.header.replica().version(), 5);
    std::vector<float> floats(whole.payload_floats());
    whole.CopyPayloadTo(absl::MakeSpan(floats));
    EXPECT_EQ(floats, state);
    EXPECT_FALSE(a.active());
  }
}

TEST(StateParts, APartThatDoesNotContinueTheStateDropsIt) {
  const std::vector<float> state = State(10);
  StatePartsAssembler a;
  ASSERT_TRUE(a.Add(Part(state, 0, 16), 40).ok());
  // A gap.
  EXPECT_FALSE(a.Add(Part(state, 32, 8), 40).ok());
  EXPECT_FALSE(a.active());
  // Another stream's part where this one goes on.
  ASSERT_TRUE(a.Add(Part(state, 0, 16), 40).ok());
  EXPECT_FALSE(a.Add(Part(state, 16, 16, /*stream=*/10), 40).ok());
  // Another header (a newer version) in the same stream.
  ASSERT_TRUE(a.Add(Part(state, 0, 16), 40).ok());
  Message other = Part(state, 16, 16);
  other.header.mutable_replica()->set_version(6);
  EXPECT_FALSE(a.Add(other, 40).ok());
  // A total the header does not say, a part past the total, a part not of
  // whole floats, an empty one: refused before anything is kept.
  EXPECT_FALSE(a.Add(Part(state, 0, 16), 44).ok());
  Message past = Part(state, 32, 8);
  past.header.mutable_state_part()->set_offset(36);
  EXPECT_FALSE(a.Add(past, 40).ok());
  Message odd = Part(state, 0, 16);
  odd.header.mutable_state_part()->set_offset(2);
  EXPECT_FALSE(a.Add(odd, 40).ok());
  EXPECT_FALSE(a.Add(Part(state, 0, 0), 40).ok());
  EXPECT_FALSE(a.active());
  // A first part starts afresh whatever was held.
  ASSERT_TRUE(a.Add(Part(state, 0, 16), 40).ok());
  ASSERT_TRUE(a.Add(Part(state, 16, 16), 40).ok());
  ASSERT_TRUE(a.Add(Part(state, 0, 16, /*stream=*/11), 40).ok());
  EXPECT_EQ(a.received(), 16u);
}

// A header may claim any total: what is held grows with the bytes that
// arrive, never from the claim (a petabyte claimed, 16 bytes held).
TEST(StateParts, WhatIsHeldIsWhatArrivedNotWhatTheHeaderClaims) {
  const std::vector<float> state = State(8);
  constexpr uint64_t kClaimed = uint64_t{1} << 50;
  StatePartsAssembler a;
  Message first = Part(state, 0, 16);
  first.header.mutable_state_part()->set_total(kClaimed);
  auto got = a.Add(first, kClaimed);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(a.received(), 16u);
  Message second = Part(state, 16, 16, 9, 2);
  second.header.mutable_state_part()->set_total(kClaimed);
  got = a.Add(second, kClaimed);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(a.received(), 32u);
}

TEST(StateParts, APartLeavesRoomForItsHeader) {
  proto::Header h;
  h.mutable_job()->set_num_workers(3);
  const size_t part = StatePartBytes(1 << 20, h);
  EXPECT_EQ(part % sizeof(float), 0u);
  EXPECT_LE(part + h.ByteSizeLong() + kStatePartHeaderRoom, size_t{1} << 20);
  EXPECT_GT(part, (size_t{1} << 20) - kStatePartHeaderRoom - h.ByteSizeLong() - sizeof(float));
  EXPECT_EQ(StatePartBytes(kStatePartHeaderRoom, h), 0u);
  EXPECT_EQ(StateSlice(State(3), 8, 100), std::vector<float>{3.0f});
}

}  // namespace
}  // namespace pstrain

// Payloads in pieces (transport/pieces.h): how they are cut, and the ps's
// assembler against pieces in order, out of order, from several peers and
// past its bounds.

#include "transport/pieces.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(PiecesFor, CutsCurvePayloadsFrom256KiBAndPlaintextOnesFrom32MiB) {
  EXPECT_EQ(PiecesFor(kMinPiecedBytes, /*curve=*/false).parts, 1u);
  EXPECT_EQ(PiecesFor(kMinPiecedPlainBytes - 4, false).parts, 1u);
  const PieceLayout plain = PiecesFor(kMinPiecedPlainBytes, false);
  EXPECT_EQ(plain.piece_bytes, kMaxPieceBytes);
  EXPECT_EQ(plain.parts, 32u);
  EXPECT_EQ(PiecesFor(44'800'000, false).parts, 43u);  // a ResNet-18's bytes
  EXPECT_EQ(PiecesFor(kMinPiecedBytes - 4, true).parts, 1u);
  const PieceLayout quarter_mib = PiecesFor(256 * 1024, true);
  EXPECT_EQ(quarter_mib.parts, 4u);
  EXPECT_EQ(quarter_mib.piece_bytes, 64u * 1024);
  const PieceLayout cnn_large = PiecesFor(2'678'824, true);  // 669,706 floats
  EXPECT_EQ(cnn_large.parts, 16u);
  const PieceLayout huge = PiecesFor(size_t{64} << 20, true);
  EXPECT_EQ(huge.piece_bytes, kMaxPieceBytes);
  EXPECT_EQ(huge.parts, 64u);
}

TEST(PiecesFor, PiecesAreWholeFloatsAndAddUpToThePayload) {
  for (size_t bytes : {size_t{262'144}, size_t{262'148}, size_t{2'678'824}, size_t{4'000'012},
                       size_t{33'554'436}}) {
    const PieceLayout layout = PiecesFor(bytes, true);
    ASSERT_GT(layout.parts, 1u) << bytes;
    EXPECT_EQ(layout.piece_bytes % sizeof(float), 0u);
    size_t sum = 0;
    for (uint32_t k = 0; k < layout.parts; ++k) {
      const size_t b = layout.Bytes(k, bytes);
      EXPECT_GT(b, 0u) << bytes << " piece " << k;
      EXPECT_LE(b, layout.piece_bytes);
      if (k + 1 < layout.parts) {
        EXPECT_EQ(b, layout.piece_bytes);
      }
      sum += b;
    }
    EXPECT_EQ(sum, bytes);
  }
}

proto::Header PieceHeader(uint64_t request, uint32_t part, uint32_t parts, uint64_t piece_bytes,
                          proto::MessageType type = proto::PUSH_PULL) {
  proto::Header h;
  h.set_type(type);
  h.set_session(7);
  h.set_request_id(request);
  h.set_step(3);
  h.set_part(part);
  h.set_parts(parts);
  h.set_piece_bytes(piece_bytes);
  return h;
}

Message Piece(const proto::Header& h, const std::string& bytes) {
  Message m;
  m.header = h;
  m.payload = zmq::message_t(bytes.data(), bytes.size());
  m.has_payload = true;
  return m;
}

// Takes a piece as the ps does once its first piece was judged: `peer`
// holds it, and may send up to `max_bytes`.
absl::StatusOr<std::optional<Message>> TakeAs(PieceAssembler& assembler, const std::string& peer,
                                              Message piece, size_t max_bytes = SIZE_MAX,
                                              int64_t now_us = 0, int fd = -1) {
  return assembler.Take(peer, std::move(piece), PieceGrant{max_bytes, peer, fd, now_us});
}

TEST(CheckPiece, RefusesIncoherentHeadersAndSizes) {
  EXPECT_TRUE(CheckPiece(PieceHeader(1, 0, 2, 8), 8).ok());
  EXPECT_TRUE(CheckPiece(PieceHeader(1, 1, 2, 8), 4).ok());
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 0, 1, 8), 8).ok());              // one part
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 0, kMaxParts + 1, 8), 8).ok());  // too many
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 2, 2, 8), 8).ok());              // part >= parts
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 0, 2, 6), 6).ok());              // not whole floats
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 0, 2, 0), 0).ok());
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 0, 2, kMaxPieceBytes + 4), 8).ok());
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 0, 2, 8), 4).ok());   // a middle piece short
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 1, 2, 8), 12).ok());  // the last one long
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 1, 2, 8), 0).ok());   // or empty
  EXPECT_FALSE(CheckPiece(PieceHeader(1, 1, 2, 8), 3).ok());   // or not whole floats
}

TEST(PieceAssembler, PutsPiecesInOrderBackTogetherAndHoldsNothingAfter) {
  PieceAssembler assembler(1 << 20, 1 << 20, 4);
  auto first = TakeAs(assembler, "w0", Piece(PieceHeader(5, 0, 3, 8), "AAAABBBB"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->has_value());
  auto second = TakeAs(assembler, "w0", Piece(PieceHeader(5, 1, 3, 8), "CCCCDDDD"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->has_value());
  EXPECT_EQ(assembler.held_bytes(), 16u);
  auto last = TakeAs(assembler, "w0", Piece(PieceHeader(5, 2, 3, 8), "EEEE"));
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(last->has_value());
  const Message& whole = **last;
  EXPECT_EQ(whole.payload.to_string(), "AAAABBBBCCCCDDDDEEEE");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(whole.payload.data()) % alignof(float), 0u);
  EXPECT_FALSE(IsPiece(whole.header));
  EXPECT_EQ(whole.header.request_id(), 5u);
  EXPECT_EQ(whole.header.step(), 3);
  EXPECT_EQ(assembler.partials(), 0u);
  EXPECT_EQ(assembler.held_bytes(), 0u);
}

TEST(PieceAssembler, PutsTheNextMessageInTheBufferTheLastOneReleased) {
  PieceAssembler assembler(1 << 20, 1 << 20, 4);
  const void* first_buffer = nullptr;
  for (uint64_t request : {5, 6}) {
    ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(request, 0, 2, 8), "AAAABBBB")).ok());
    auto last = TakeAs(assembler, "w0", Piece(PieceHeader(request, 1, 2, 8), "CCCC"));
    ASSERT_TRUE(last.ok() && last->has_value());
    const Message& whole = **last;
    EXPECT_EQ(whole.payload.to_string(), "AAAABBBBCCCC");
    std::vector<float> scratch;
    EXPECT_EQ(whole.PayloadFloats(&scratch).data(),
              reinterpret_cast<const float*>(whole.payload.data()));
    EXPECT_TRUE(scratch.empty());  // aligned: read in place
    if (first_buffer == nullptr) {
      first_buffer = whole.payload.data();
    } else {
      EXPECT_EQ(whole.payload.data(), first_buffer);
    }
  }
}

TEST(PieceAssembler, ABufferUsedBeforeCountsWholeAndOnlyWhereItFits) {
  // 1 KiB messages in 4 pieces of 256 bytes; at most 3 KiB held.
  PieceAssembler assembler(1 << 20, 3 << 10, 4);
  const std::string quarter(256, 'q');
  auto piece = [&](const std::string& peer, uint64_t request, uint32_t k) {
    auto got = TakeAs(assembler, peer, Piece(PieceHeader(request, k, 4, 256), quarter));
    ASSERT_TRUE(got.ok()) << got.status();
  };
  // Three messages at once, in new buffers (counted as they arrive: 3 KiB
  // at the end), then released: their buffers are kept.
  for (uint32_t k = 0; k < 4; ++k) {
    piece("w0", 1, k);
    piece("w1", 2, k);
    piece("w2", 3, k);
  }
  ASSERT_EQ(assembler.held_bytes(), 0u);
  piece("w0", 4, 0);  // in a kept buffer: counts its 1 KiB at once
  EXPECT_EQ(assembler.held_bytes(), 1024u);
  piece("w1", 5, 0);  // 2 KiB free: room for a kept one of up to 2 KiB
  EXPECT_EQ(assembler.held_bytes(), 2048u);
  // 1 KiB free: a kept buffer would not surely fit, so a new one, counted
  // as its bytes arrive; nobody is dropped.
  piece("w2", 6, 0);
  EXPECT_EQ(assembler.held_bytes(), 2048u + 256u);
  piece("w2", 6, 1);
  EXPECT_EQ(assembler.held_bytes(), 2048u + 512u);
  EXPECT_TRUE(assembler.TakeDropped().empty());
  EXPECT_EQ(assembler.partials(), 3u);
}

TEST(PieceAssembler, AWholeMessageOutlivesItsAssembler) {
  std::optional<Message> whole;
  {
    PieceAssembler assembler(1 << 20, 1 << 20, 4);
    ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(5, 0, 2, 8), "AAAABBBB")).ok());
    auto last = TakeAs(assembler, "w0", Piece(PieceHeader(5, 1, 2, 8), "CCCC"));
    ASSERT_TRUE(last.ok() && last->has_value());
    whole = std::move(**last);
  }
  EXPECT_EQ(whole->payload.to_string(), "AAAABBBBCCCC");
}

TEST(PieceAssembler, PassesWholeMessagesThroughAndRefusesPiecesOfOtherRequests) {
  PieceAssembler assembler(1 << 20, 1 << 20, 4);
  proto::Header plain;
  plain.set_type(proto::PUSH);
  auto through = TakeAs(assembler, "w0", Piece(plain, "ABCD"));
  ASSERT_TRUE(through.ok());
  ASSERT_TRUE(through->has_value());
  EXPECT_EQ((*through)->payload.to_string(), "ABCD");
  for (proto::MessageType type :
       {proto::INIT, proto::PULL, proto::RESTORE, proto::EMBEDDING_PULL}) {
    auto refused = TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 2, 4, type), "ABCD"));
    ASSERT_FALSE(refused.ok());
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("in pieces"));
  }
  // Embedding rows pushed in pieces are put back together as gradients are.
  auto rows =
      TakeAs(assembler, "w1", Piece(PieceHeader(7, 0, 2, 4, proto::EMBEDDING_PUSH), "ABCD"));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_FALSE(rows->has_value());
  rows = TakeAs(assembler, "w1", Piece(PieceHeader(7, 1, 2, 4, proto::EMBEDDING_PUSH), "EFGH"));
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_TRUE(rows->has_value());
  EXPECT_EQ((*rows)->payload.to_string(), "ABCDEFGH");
  auto unknown =
      TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 2, 4, proto::MessageType(999)), "ABCD"));
  EXPECT_FALSE(unknown.ok());
  EXPECT_EQ(assembler.partials(), 0u);
}

TEST(PieceAssembler, KeepsEachPeersPiecesApart) {
  PieceAssembler assembler(1 << 20, 1 << 20, 4);
  ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 2, 4), "AAAA")).ok());
  ASSERT_TRUE(TakeAs(assembler, "w1", Piece(PieceHeader(1, 0, 2, 4), "XXXX")).ok());
  auto w1 = TakeAs(assembler, "w1", Piece(PieceHeader(1, 1, 2, 4), "YYYY"));
  auto w0 = TakeAs(assembler, "w0", Piece(PieceHeader(1, 1, 2, 4), "BBBB"));
  ASSERT_TRUE(w0.ok() && w0->has_value());
  ASSERT_TRUE(w1.ok() && w1->has_value());
  EXPECT_EQ((*w0)->payload.to_string(), "AAAABBBB");
  EXPECT_EQ((*w1)->payload.to_string(), "XXXXYYYY");
}

TEST(PieceAssembler, APieceOutOfPlaceDropsThePeersMessage) {
  struct Case {
    const char* what;
    proto::Header second;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"a part skipped", PieceHeader(1, 2, 3, 4), "piece 2 where piece 1 was due"},
      {"the first again", PieceHeader(1, 0, 3, 4), "piece 0 where piece 1 was due"},
      {"parts changed", PieceHeader(1, 1, 4, 4), "layout"},
      {"piece size changed", PieceHeader(1, 1, 3, 8), "layout"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    PieceAssembler assembler(1 << 20, 1 << 20, 4);
    ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 3, 4), "AAAA")).ok());
    auto bad =
        TakeAs(assembler, "w0", Piece(c.second, c.second.piece_bytes() == 8 ? "BBBBBBBB" : "BBBB"));
    ASSERT_FALSE(bad.ok());
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(c.says));
    EXPECT_EQ(assembler.partials(), 0u);
    EXPECT_EQ(assembler.held_bytes(), 0u);
  }
  PieceAssembler assembler(1 << 20, 1 << 20, 4);
  auto orphan = TakeAs(assembler, "w0", Piece(PieceHeader(1, 1, 3, 4), "BBBB"));
  ASSERT_FALSE(orphan.ok());
  EXPECT_THAT(std::string(orphan.status().message()), HasSubstr("without the pieces before it"));
}

TEST(PieceAssembler, ANewRequestReplacesAnAbandonedOne) {
  PieceAssembler assembler(1 << 20, 1 << 20, 4);
  ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 3, 4), "AAAA")).ok());
  ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(2, 0, 2, 4), "CCCC")).ok());
  EXPECT_EQ(assembler.partials(), 1u);
  // The abandoned message's buffer, used again, counts whole (64 bytes).
  EXPECT_EQ(assembler.held_bytes(), 64u);
  auto whole = TakeAs(assembler, "w0", Piece(PieceHeader(2, 1, 2, 4), "DDDD"));
  ASSERT_TRUE(whole.ok() && whole->has_value());
  EXPECT_EQ((*whole)->payload.to_string(), "CCCCDDDD");
  EXPECT_EQ(assembler.held_bytes(), 0u);
}

TEST(PieceAssembler, HoldsAtMostItsBytesAndItsPeersDroppingTheLongestIdle) {
  PieceAssembler assembler(/*max_message_bytes=*/1 << 20, /*max_bytes=*/12, /*max_partials=*/2);
  ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 9, 4), "AAAA")).ok());
  ASSERT_TRUE(TakeAs(assembler, "w1", Piece(PieceHeader(2, 0, 9, 4), "BBBB")).ok());
  EXPECT_TRUE(assembler.TakeDropped().empty());
  // A third peer: the longest idle (w0) goes, and is reported with its
  // request, so that the ps can tell it.
  ASSERT_TRUE(TakeAs(assembler, "w2", Piece(PieceHeader(3, 0, 9, 4), "CCCC")).ok());
  EXPECT_EQ(assembler.partials(), 2u);
  std::vector<PieceAssembler::Dropped> dropped = assembler.TakeDropped();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].peer, "w0");
  EXPECT_EQ(dropped[0].header.request_id(), 1u);
  EXPECT_EQ(dropped[0].why.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(assembler.TakeDropped().empty());
  EXPECT_FALSE(TakeAs(assembler, "w0", Piece(PieceHeader(1, 1, 9, 4), "AAAA")).ok());
  // 8 bytes held of 12: w2's next piece fits, the one after makes w1 go.
  ASSERT_TRUE(TakeAs(assembler, "w2", Piece(PieceHeader(3, 1, 9, 4), "CCCC")).ok());
  ASSERT_TRUE(TakeAs(assembler, "w2", Piece(PieceHeader(3, 2, 9, 4), "CCCC")).ok());
  EXPECT_EQ(assembler.partials(), 1u);
  EXPECT_EQ(assembler.held_bytes(), 12u);
  dropped = assembler.TakeDropped();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].peer, "w1");
  EXPECT_EQ(dropped[0].header.request_id(), 2u);
  // w2 alone over the bound: refused, and nothing is held any more.
  auto over = TakeAs(assembler, "w2", Piece(PieceHeader(3, 3, 9, 4), "CCCC"));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("over 12 bytes"));
  EXPECT_EQ(assembler.partials(), 0u);
  EXPECT_EQ(assembler.held_bytes(), 0u);
  EXPECT_TRUE(assembler.TakeDropped().empty());  // its own refusal is not a drop
}

TEST(PieceAssembler, RefusesAtItsFirstPieceAMessageLargerThanTheLimit) {
  PieceAssembler assembler(/*max_message_bytes=*/64, /*max_bytes=*/1 << 20, 4);
  // 17 pieces of 4 bytes: at least 68 bytes.
  auto refused = TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 17, 4), "AAAA"));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("over the 64-byte limit"));
  EXPECT_EQ(assembler.partials(), 0u);
  // 16 pieces, the last as small as can be: 64 bytes, accepted.
  auto fits = TakeAs(assembler, "w0", Piece(PieceHeader(2, 0, 16, 4), "AAAA"));
  EXPECT_TRUE(fits.ok()) << fits.status();
}

TEST(PieceAssembler, HoldsAMessageToItsGrant) {
  PieceAssembler assembler(/*max_message_bytes=*/1 << 20, /*max_bytes=*/1 << 20, 4);
  // Granted 12 bytes: 4 pieces of 4 bytes are at least 16.
  auto refused = TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 4, 4), "AAAA"), 12);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("over the 12-byte limit"));
  EXPECT_EQ(assembler.partials(), 0u);
  // 3 pieces of 8 bytes may be as small as 20 bytes, within a grant of 20:
  // kept, until a piece would pass the grant.
  ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(2, 0, 3, 8), "AAAABBBB"), 20).ok());
  ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(2, 1, 3, 8), "CCCCDDDD")).ok());
  auto over = TakeAs(assembler, "w0", Piece(PieceHeader(2, 2, 3, 8), "EEEEFFFF"));
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("over 20 bytes"));
  EXPECT_EQ(assembler.partials(), 0u);
  EXPECT_EQ(assembler.held_bytes(), 0u);
}

TEST(PieceAssembler, OneHolderHoldsAtMostTwoMessagesHoweverManyConnectionsItOpens) {
  PieceAssembler assembler(1 << 20, 1 << 20, /*max_partials=*/16);
  auto take = [&](const std::string& route, const std::string& holder, uint64_t id) {
    return assembler.Take(route, Piece(PieceHeader(id, 0, 4, 4), "AAAA"),
                          PieceGrant{SIZE_MAX, holder, -1, 0});
  };
  ASSERT_TRUE(take("r1", "worker:1", 1).ok());
  ASSERT_TRUE(take("r2", "worker:1", 2).ok());
  ASSERT_TRUE(take("r9", "worker:2", 9).ok());
  EXPECT_TRUE(assembler.TakeDropped().empty());
  ASSERT_TRUE(take("r3", "worker:1", 3).ok());
  std::vector<PieceAssembler::Dropped> dropped = assembler.TakeDropped();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].peer, "r1");  // worker:1's oldest, not worker:2's
  EXPECT_EQ(dropped[0].why.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(assembler.partials(), 3u);
  EXPECT_EQ(assembler.dropped_total(), 1);
}

TEST(PieceAssembler, GivesUpMessagesWhosePiecesStopComingAndTellsTheirPeers) {
  PieceAssembler assembler(1 << 20, 1 << 20, 4);
  ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 3, 4), "AAAA"), SIZE_MAX,
                     /*now_us=*/1'000'000)
                  .ok());
  ASSERT_TRUE(TakeAs(assembler, "w1", Piece(PieceHeader(7, 0, 3, 4), "XXXX"), SIZE_MAX,
                     /*now_us=*/5'000'000)
                  .ok());
  ASSERT_TRUE(TakeAs(assembler, "w1", Piece(PieceHeader(7, 1, 3, 4), "YYYY"), SIZE_MAX,
                     /*now_us=*/11'500'000)
                  .ok());
  // At 12 s with a 10 s deadline: w0 (idle 11 s) goes, w1 (0.5 s) stays.
  EXPECT_EQ(assembler.Expire(12'000'000, 10'000'000), 1);
  std::vector<PieceAssembler::Dropped> dropped = assembler.TakeDropped();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].peer, "w0");
  EXPECT_EQ(dropped[0].header.request_id(), 1u);
  EXPECT_EQ(dropped[0].why.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(assembler.partials(), 1u);
  EXPECT_EQ(assembler.held_bytes(), 8u);
  auto late = TakeAs(assembler, "w0", Piece(PieceHeader(1, 1, 3, 4), "BBBB"));
  EXPECT_FALSE(late.ok());
  auto whole = TakeAs(assembler, "w1", Piece(PieceHeader(7, 2, 3, 4), "ZZZZ"));
  ASSERT_TRUE(whole.ok() && whole->has_value());
  EXPECT_EQ(assembler.dropped_total(), 1);
}

TEST(PieceAssembler, DropsTheMessagesOfAClosedConnectionTellingNobody) {
  PieceAssembler assembler(1 << 20, 1 << 20, 4);
  ASSERT_TRUE(TakeAs(assembler, "w0", Piece(PieceHeader(1, 0, 3, 4), "AAAA"), SIZE_MAX, 0, 7).ok());
  ASSERT_TRUE(TakeAs(assembler, "w1", Piece(PieceHeader(2, 0, 3, 4), "BBBB"), SIZE_MAX, 0, 8).ok());
  EXPECT_EQ(assembler.DropConnection(7), 1);
  EXPECT_EQ(assembler.DropConnection(-1), 0);
  std::vector<PieceAssembler::Dropped> dropped = assembler.TakeDropped();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].peer, "");
  EXPECT_EQ(dropped[0].header.request_id(), 1u);
  EXPECT_EQ(assembler.partials(), 1u);
  EXPECT_EQ(assembler.held_bytes(), 4u);
  EXPECT_EQ(assembler.dropped_total(), 1);
  assembler.Forget("w1");
  EXPECT_EQ(assembler.partials(), 0u);
  EXPECT_EQ(assembler.held_bytes(), 0u);
  EXPECT_TRUE(assembler.TakeDropped().empty());
}

}  // namespace
}  // namespace pstrain

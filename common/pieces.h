#pragma once

// A large payload as several ZeroMQ messages ("pieces"), on CURVE
// connections only.
//
// libzmq encrypts and decrypts each message whole: the receiver of one
// 2.68 MB message decrypts nothing until the sender has encrypted all of
// it. In pieces, the receiver decrypts piece j while the sender encrypts
// piece j + 1. A raw CURVE echo of 2.68 MB each way took 42-49% less time
// in pieces (BM_RawZmqEchoPieces), PUSH_PULL 12-29% less at 2.68 MB and
// half at 64 MiB (BM_PushPullRoundTripCurve; benchmarks/README.md).
// Without encryption, pieces cost time (1.67x at 256 KiB in 4 pieces on
// loopback), so a plaintext connection sends every payload whole.
//
// Each piece is an ordinary message whose header carries part, parts and
// piece_bytes (proto::Header); piece k holds payload bytes
// [k * piece_bytes, min((k + 1) * piece_bytes, total)), and the pieces of a
// message go in order on one connection (ZeroMQ keeps a connection's
// order). A receiver checks every piece against the first (CheckPiece,
// PieceAssembler): a peer may send anything.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/transport.h"
#include "proto/pstrain.pb.h"
#include "zmq.hpp"

namespace pstrain {

// Payloads below this go whole.
inline constexpr size_t kMinPiecedBytes = 256 * 1024;
// A piece is total / kTargetParts, within [kMinPieceBytes, kMaxPieceBytes].
inline constexpr size_t kMinPieceBytes = 64 * 1024;
inline constexpr size_t kMaxPieceBytes = 1024 * 1024;
inline constexpr int kTargetParts = 16;
// The most pieces a receiver accepts for one message.
inline constexpr uint32_t kMaxParts = 4096;

struct PieceLayout {
  size_t piece_bytes = 0;  // 0: whole
  uint32_t parts = 1;
  // Bytes of piece `part`.
  size_t Bytes(uint32_t part, size_t total) const;
};

// How a payload of `bytes` (whole floats) is cut: whole below
// kMinPiecedBytes or when `curve` is false.
PieceLayout PiecesFor(size_t bytes, bool curve);

// Whether `h` is the header of a piece (parts > 1).
inline bool IsPiece(const proto::Header& h) { return h.parts() > 1 || h.part() != 0; }

// Checks one piece's header and payload size on their own: parts in
// [2, kMaxParts], part < parts, piece_bytes a multiple of 4 in
// [4, kMaxPieceBytes], a payload of exactly piece_bytes for every piece
// but the last, and of 4 to piece_bytes whole floats for the last.
absl::Status CheckPiece(const proto::Header& h, size_t payload_bytes);

// The ps's side: puts the pieces of each peer's message back together.
// One message per peer at a time; a piece that does not follow its
// predecessor (another request, a part out of order, another layout)
// drops what was held of that peer's message. What is held is bounded: a
// message in pieces may not be larger than `max_message_bytes` (refused
// at its first piece), and at most `max_partials` peers and `max_bytes`
// in all are held; past them the longest-idle partial messages are
// dropped, and TakeDropped says whose, so that each can be told.
class PieceAssembler {
 public:
  PieceAssembler(size_t max_message_bytes, size_t max_bytes, int max_partials);

  // A partial message dropped to make room for others': its peer, the
  // header of its first piece (which request), and why.
  struct Dropped {
    std::string peer;
    proto::Header header;
    absl::Status why;
  };

  // Takes one piece from `peer`: the whole message once `piece` was the
  // last (its header that of the last piece, part and parts cleared; its
  // payload one aligned frame), nullopt while more are due, or
  // InvalidArgument saying why the piece does not fit (the peer's partial
  // message is dropped).
  absl::StatusOr<std::optional<Message>> Add(const std::string& peer, Message piece);

  // What a ps does with every message it receives: one that is not a
  // piece comes back as it is; a piece of a PUSH or PUSH_PULL goes to Add;
  // a piece of any other request is refused (InvalidArgument).
  absl::StatusOr<std::optional<Message>> Take(const std::string& peer, Message m);

  // The partial messages dropped to make room since the last call.
  std::vector<Dropped> TakeDropped();

  size_t partials() const { return partials_.size(); }
  size_t held_bytes() const { return held_bytes_; }

 private:
  struct Partial {
    proto::Header first;  // part 0's header
    uint64_t session = 0;
    uint64_t request_id = 0;
    uint32_t parts = 0;
    uint64_t piece_bytes = 0;
    std::vector<zmq::message_t> pieces;
    size_t bytes = 0;
    uint64_t last_use = 0;
  };
  void Drop(std::map<std::string, Partial>::iterator it);
  // Drops `it` to make room, and keeps it in dropped_.
  void Evict(std::map<std::string, Partial>::iterator it);
  // Drops the longest-idle partials other than `keep` until `need` more
  // bytes fit; false if they cannot.
  bool MakeRoom(size_t need, const std::string& keep);

  size_t max_message_bytes_;
  size_t max_bytes_;
  int max_partials_;
  std::vector<Dropped> dropped_;
  std::map<std::string, Partial> partials_;
  size_t held_bytes_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace pstrain

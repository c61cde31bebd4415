#pragma once

// A large payload as several ZeroMQ messages ("pieces"): from 256 KiB on
// CURVE connections, from 32 MiB on plaintext ones.
//
// libzmq encrypts and decrypts each message whole: the receiver of one
// 2.68 MB message decrypts nothing until the sender has encrypted all of
// it. In pieces, the receiver decrypts piece j while the sender encrypts
// piece j + 1. A raw CURVE echo of 2.68 MB each way took 42-49% less time
// in pieces (BM_RawZmqEchoPieces), PUSH_PULL 12-29% less at 2.68 MB and
// half at 64 MiB (BM_PushPullRoundTripCurve; benchmarks/log/curve_pieces.md).
// Without encryption, small pieces cost time (1.67x at 256 KiB in 4 pieces
// on loopback), but a whole message of 32 MiB or more is received into a
// fresh mapping faulted in page by page (kMinPiecedPlainBytes), so a
// plaintext connection sends those in pieces.
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
#include "proto/pstrain.pb.h"
#include "transport/frame_pool.h"
#include "transport/transport.h"
#include "zmq.hpp"

namespace pstrain {

// Payloads below this go whole on a CURVE connection.
inline constexpr size_t kMinPiecedBytes = 256 * 1024;
// And on a plaintext one: glibc's largest mmap threshold. libzmq receives
// a whole message into one allocation of its size, which above that is
// mapped afresh and faulted in page by page every time.
inline constexpr size_t kMinPiecedPlainBytes = size_t{32} << 20;
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
// kMinPiecedBytes on a CURVE connection, below kMinPiecedPlainBytes on a
// plaintext one.
PieceLayout PiecesFor(size_t bytes, bool curve);

// Whether `h` is the header of a piece (parts > 1).
inline bool IsPiece(const proto::Header& h) { return h.parts() > 1 || h.part() != 0; }

// Checks one piece's header and payload size on their own: parts in
// [2, kMaxParts], part < parts, piece_bytes a multiple of 4 in
// [4, kMaxPieceBytes], a payload of exactly piece_bytes for every piece
// but the last, and of 4 to piece_bytes whole floats for the last.
absl::Status CheckPiece(const proto::Header& h, size_t payload_bytes);

// What the receiver allows one message in pieces, decided from its first
// piece before anything of it is kept (the ps judges it as it would the
// whole message: ps_server/request_handler.h, AdmitPieces).
struct PieceGrant {
  size_t max_bytes = 0;  // the whole payload's largest size
  std::string holder;    // whose it is (the authenticated task), for per-holder bounds
  int fd = -1;           // the connection it comes on (-1: not known)
  int64_t now_us = 0;    // when this piece was received (a monotonic clock)
};

// The ps's side: puts the pieces of each peer's message back together.
// One message per peer (connection) at a time; a piece that does not
// follow its predecessor (another request, a part out of order, another
// layout) drops what was held of that peer's message. What is held is
// bounded: a message may not be larger than its grant or than
// `max_message_bytes` (refused at its first piece, and at the piece that
// would pass it); one holder (an authenticated task, however many
// connections it opens) holds at most kMaxPartialsPerHolder messages; at
// most `max_partials` messages and `max_bytes` in all are held. Past those
// bounds the longest-idle partial messages are dropped; a partial message
// idle past a deadline (Expire) or whose connection closed
// (DropConnection) is dropped too. TakeDropped says whose, so that each
// can be told.
class PieceAssembler {
 public:
  // Messages in pieces one holder may have at once: a worker sends one
  // push at a time on its connection; a second covers a restarted
  // client's new connection while its old one is not yet seen closed.
  static constexpr int kMaxPartialsPerHolder = 2;

  PieceAssembler(size_t max_message_bytes, size_t max_bytes, int max_partials);

  // A partial message given up: its peer ("" when nobody is to be told:
  // its connection is gone), the header of its first piece (which
  // request), and why.
  struct Dropped {
    std::string peer;
    proto::Header header;
    absl::Status why;
  };

  // Takes one piece from `peer`: the whole message once `piece` was the
  // last (its header that of the first piece, part and parts cleared; its
  // payload one aligned frame), nullopt while more are due, or
  // InvalidArgument saying why the piece does not fit (the peer's partial
  // message is dropped). A first piece starts a message under `grant`;
  // later pieces use only grant.now_us.
  absl::StatusOr<std::optional<Message>> Add(const std::string& peer, Message piece,
                                             const PieceGrant& grant);

  // What a ps does with every message it receives: one that is not a
  // piece comes back as it is; a piece of a PUSH, PUSH_PULL, REDUCE or
  // EMBEDDING_PUSH goes to Add;
  // a piece of any other request is refused (InvalidArgument).
  absl::StatusOr<std::optional<Message>> Take(const std::string& peer, Message m,
                                              const PieceGrant& grant);

  // Gives up what `peer` holds, telling nobody (its new first piece was
  // refused, and is answered).
  void Forget(const std::string& peer);
  // Drops every partial message idle for more than `idle_us` (each peer is
  // told, DeadlineExceeded). Returns how many.
  int Expire(int64_t now_us, int64_t idle_us);
  // Drops every partial message that came on connection `fd`, which has
  // closed (nobody to tell). Returns how many.
  int DropConnection(int fd);

  // The partial messages given up since the last call.
  std::vector<Dropped> TakeDropped();

  size_t partials() const { return partials_.size(); }
  size_t held_bytes() const { return held_bytes_; }
  // Partial messages given up so far (to make room, expired, their
  // connection closed), not counting refused pieces.
  int64_t dropped_total() const { return dropped_total_; }

 private:
  struct Partial {
    proto::Header first;  // part 0's header
    uint64_t session = 0;
    uint64_t request_id = 0;
    uint32_t parts = 0;
    uint64_t piece_bytes = 0;
    size_t max_bytes = 0;
    std::string holder;
    int fd = -1;
    // The pieces so far, copied in as each arrives (its frame freed at
    // once), into a buffer of the most the message may carry: address
    // space, whose pages are touched only by bytes that arrive, or a
    // buffer already in use before.
    FramePool::Buffer whole;
    uint32_t pieces_in = 0;
    size_t bytes = 0;
    // What it counts against max_bytes_: its bytes, or its buffer's
    // capacity where the buffer was used before (in memory whole).
    size_t charged = 0;
    uint64_t last_use = 0;
    int64_t last_us = 0;
  };
  using Iterator = std::map<std::string, Partial>::iterator;
  void Drop(Iterator it);
  // Drops `it` and keeps it in dropped_, to be told `why` (its peer is
  // not told when `tell` is false).
  void GiveUp(Iterator it, absl::Status why, bool tell = true);
  // Drops the longest-idle partials other than `keep` until `need` more
  // bytes fit; false if they cannot.
  bool MakeRoom(size_t need, const std::string& keep);
  // Makes room for a new partial message of `holder`.
  void MakeRoomForNew(const std::string& holder);
  absl::Status CheckNext(const Partial& p, const proto::Header& h, size_t bytes) const;
  absl::StatusOr<Iterator> Start(const std::string& peer, const proto::Header& h,
                                 const PieceGrant& grant);

  size_t max_message_bytes_;
  size_t max_bytes_;
  int max_partials_;
  // The whole messages' frames, reused (a large fresh one is mapped and
  // faulted in page by page each time).
  FramePool whole_frames_;
  std::vector<Dropped> dropped_;
  std::map<std::string, Partial> partials_;
  size_t held_bytes_ = 0;
  uint64_t clock_ = 0;
  int64_t dropped_total_ = 0;
};

}  // namespace pstrain

#include "transport/pieces.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

size_t PieceLayout::Bytes(uint32_t part, size_t total) const {
  if (parts <= 1) return total;
  const size_t begin = static_cast<size_t>(part) * piece_bytes;
  return begin >= total ? 0 : std::min(piece_bytes, total - begin);
}

PieceLayout PiecesFor(size_t bytes, bool curve) {
  PieceLayout layout;
  if (bytes < (curve ? kMinPiecedBytes : kMinPiecedPlainBytes)) return layout;
  // A whole number of floats, rounded up: the last piece is the smallest.
  size_t piece = (bytes + kTargetParts - 1) / kTargetParts;
  piece = (piece + sizeof(float) - 1) / sizeof(float) * sizeof(float);
  piece = std::clamp(piece, kMinPieceBytes, kMaxPieceBytes);
  layout.piece_bytes = piece;
  const size_t parts = (bytes + piece - 1) / piece;
  if (parts <= 1 || parts > kMaxParts) return PieceLayout();  // over 4 GiB: whole
  layout.parts = static_cast<uint32_t>(parts);
  return layout;
}

absl::Status CheckPiece(const proto::Header& h, size_t payload_bytes) {
  if (h.parts() < 2 || h.parts() > kMaxParts) {
    return absl::InvalidArgumentError(
        absl::StrCat("a piece of ", h.parts(), " parts (2 to ", kMaxParts, ")"));
  }
  if (h.part() >= h.parts()) {
    return absl::InvalidArgumentError(absl::StrCat("piece ", h.part(), " of ", h.parts()));
  }
  if (h.piece_bytes() < sizeof(float) || h.piece_bytes() > kMaxPieceBytes ||
      h.piece_bytes() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("pieces of ", h.piece_bytes(), " bytes"));
  }
  const bool last = h.part() + 1 == h.parts();
  if (last ? (payload_bytes == 0 || payload_bytes > h.piece_bytes() ||
              payload_bytes % sizeof(float) != 0)
           : payload_bytes != h.piece_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("piece ", h.part(), " of ", h.parts(),
                                                   " carries ", payload_bytes,
                                                   " bytes; pieces are ", h.piece_bytes()));
  }
  return absl::OkStatus();
}

PieceAssembler::PieceAssembler(size_t max_message_bytes, size_t max_bytes, int max_partials)
    : max_message_bytes_(max_message_bytes),
      max_bytes_(max_bytes),
      max_partials_(std::max(1, max_partials)),
      whole_frames_(/*keep_bytes=*/max_message_bytes) {}

std::vector<PieceAssembler::Dropped> PieceAssembler::TakeDropped() {
  std::vector<Dropped> out;
  out.swap(dropped_);
  return out;
}

void PieceAssembler::GiveUp(Iterator it, absl::Status why, bool tell) {
  dropped_.push_back({tell ? it->first : std::string(), it->second.first, std::move(why)});
  ++dropped_total_;
  Drop(it);
}

void PieceAssembler::Drop(Iterator it) {
  held_bytes_ -= it->second.charged;
  partials_.erase(it);
}

void PieceAssembler::Forget(const std::string& peer) {
  if (auto it = partials_.find(peer); it != partials_.end()) Drop(it);
}

int PieceAssembler::Expire(int64_t now_us, int64_t idle_us) {
  int n = 0;
  for (auto it = partials_.begin(); it != partials_.end();) {
    auto next = std::next(it);
    if (now_us - it->second.last_us > idle_us) {
      GiveUp(it, absl::DeadlineExceededError(
                     absl::StrCat("the ps gave up this message: no piece of it came for ",
                                  idle_us / 1'000'000, " s")));
      ++n;
    }
    it = next;
  }
  return n;
}

int PieceAssembler::DropConnection(int fd) {
  if (fd < 0) return 0;
  int n = 0;
  for (auto it = partials_.begin(); it != partials_.end();) {
    auto next = std::next(it);
    if (it->second.fd == fd) {
      GiveUp(it, absl::CancelledError("its connection closed"), /*tell=*/false);
      ++n;
    }
    it = next;
  }
  return n;
}

bool PieceAssembler::MakeRoom(size_t need, const std::string& keep) {
  while (held_bytes_ + need > max_bytes_) {
    auto oldest = partials_.end();
    for (auto it = partials_.begin(); it != partials_.end(); ++it) {
      if (it->first == keep) continue;
      if (oldest == partials_.end() || it->second.last_use < oldest->second.last_use) oldest = it;
    }
    if (oldest == partials_.end()) return false;
    GiveUp(oldest, absl::ResourceExhaustedError(
                       "the ps dropped this message's pieces to make room for other peers' "
                       "(too many messages in pieces at once)"));
  }
  return true;
}

void PieceAssembler::MakeRoomForNew(const std::string& holder) {
  auto oldest_of = [&](bool same_holder) {
    auto oldest = partials_.end();
    for (auto it = partials_.begin(); it != partials_.end(); ++it) {
      if (same_holder && it->second.holder != holder) continue;
      if (oldest == partials_.end() || it->second.last_use < oldest->second.last_use) oldest = it;
    }
    return oldest;
  };
  const int held =
      static_cast<int>(std::count_if(partials_.begin(), partials_.end(),
                                     [&](const auto& p) { return p.second.holder == holder; }));
  if (held >= kMaxPartialsPerHolder) {
    GiveUp(oldest_of(true),
           absl::ResourceExhaustedError(
               absl::StrCat("the ps dropped this message's pieces: ", holder, " began more than ",
                            kMaxPartialsPerHolder, " messages in pieces at once")));
  }
  if (partials_.size() >= static_cast<size_t>(max_partials_)) {
    GiveUp(oldest_of(false), absl::ResourceExhaustedError(
                                 "the ps dropped this message's pieces to make room for other "
                                 "peers' (too many messages in pieces at once)"));
  }
}

absl::Status PieceAssembler::CheckNext(const Partial& p, const proto::Header& h,
                                       size_t bytes) const {
  if (h.parts() != p.parts || h.piece_bytes() != p.piece_bytes) {
    return absl::InvalidArgumentError("a piece changes its message's layout");
  }
  if (h.part() != p.pieces_in) {
    return absl::InvalidArgumentError(
        absl::StrCat("piece ", h.part(), " where piece ", p.pieces_in, " was due"));
  }
  if (p.bytes + bytes > p.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("pieces of over ", p.max_bytes, " bytes, the most this message may carry"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PieceAssembler::Iterator> PieceAssembler::Start(const std::string& peer,
                                                               const proto::Header& h,
                                                               const PieceGrant& grant) {
  if (h.part() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("piece ", h.part(), " of ", h.parts(), " without the pieces before it"));
  }
  const size_t limit = std::min(max_message_bytes_, grant.max_bytes);
  // The smallest the whole message can be: every piece but the last full.
  if (static_cast<uint64_t>(h.parts() - 1) * h.piece_bytes() + sizeof(float) > limit) {
    return absl::InvalidArgumentError(absl::StrCat("a message of ", h.parts(), " pieces of ",
                                                   h.piece_bytes(), " bytes: over the ", limit,
                                                   "-byte limit"));
  }
  MakeRoomForNew(grant.holder);
  Partial p;
  p.first = h;
  p.session = h.session();
  p.request_id = h.request_id();
  p.parts = h.parts();
  p.piece_bytes = h.piece_bytes();
  p.max_bytes = limit;
  p.holder = grant.holder;
  p.fd = grant.fd;
  // A buffer used before is in memory whole: it counts whole from here, so
  // it is taken only where it fits the bound without dropping anyone. A
  // new one counts the bytes that arrive (Add).
  const size_t capacity = std::min<size_t>(limit, size_t{p.parts} * p.piece_bytes);
  p.whole = whole_frames_.Take(
      capacity, /*reuse=*/held_bytes_ + 2 * FramePool::Rounded(capacity) <= max_bytes_);
  if (p.whole.data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no memory for a message of ", capacity, " bytes"));
  }
  if (p.whole.reused()) {
    p.charged = p.whole.capacity();
    held_bytes_ += p.charged;
  }
  return partials_.emplace(peer, std::move(p)).first;
}

absl::StatusOr<std::optional<Message>> PieceAssembler::Take(const std::string& peer, Message m,
                                                            const PieceGrant& grant) {
  if (!IsPiece(m.header)) return std::optional<Message>(std::move(m));
  const proto::MessageType type = m.header.type();
  if (type != proto::PUSH && type != proto::PUSH_PULL && type != proto::REDUCE &&
      type != proto::EMBEDDING_PUSH) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", proto::MessageType_IsValid(type) ? proto::MessageType_Name(type) : "request",
        " in pieces (only PUSH, PUSH_PULL, REDUCE and EMBEDDING_PUSH payloads come in pieces)"));
  }
  return Add(peer, std::move(m), grant);
}

absl::StatusOr<std::optional<Message>> PieceAssembler::Add(const std::string& peer, Message piece,
                                                           const PieceGrant& grant) {
  const proto::Header& h = piece.header;
  const size_t bytes = piece.payload_bytes();
  auto it = partials_.find(peer);
  absl::Status bad = CheckPiece(h, bytes);
  if (bad.ok() && it != partials_.end()) {
    const Partial& p = it->second;
    if (p.session == h.session() && p.request_id == h.request_id()) {
      bad = CheckNext(p, h, bytes);
    } else {
      Drop(it);  // that request was given up: another one has begun
      it = partials_.end();
    }
  }
  if (bad.ok() && it == partials_.end()) {
    absl::StatusOr<Iterator> started = Start(peer, h, grant);
    if (started.ok()) it = *started;
    bad = started.status();
  }
  // What this piece adds to the partial message's count (nothing where
  // its buffer counts whole already).
  const size_t extra =
      it == partials_.end()
          ? 0
          : std::max(it->second.bytes + bytes, it->second.charged) - it->second.charged;
  if (bad.ok() && !MakeRoom(extra, peer)) {
    bad = absl::ResourceExhaustedError(
        absl::StrCat("messages in pieces over ", max_bytes_, " bytes at once"));
  }
  if (!bad.ok()) {
    if (it != partials_.end()) Drop(it);
    return bad;
  }
  Partial& p = it->second;
  p.last_use = ++clock_;
  p.last_us = grant.now_us;
  p.bytes += bytes;
  p.charged += extra;
  held_bytes_ += extra;
  // CheckNext: every piece before this one was piece_bytes, and all of
  // them fit the buffer (p.max_bytes).
  std::memcpy(p.whole.data() + p.bytes - bytes, piece.payload.data(), bytes);
  if (++p.pieces_in < p.parts) return std::optional<Message>();
  Message whole;
  // The first piece's header: the one the ps judged (PieceGrant).
  whole.header = std::move(p.first);
  whole.header.clear_part();
  whole.header.clear_parts();
  whole.header.clear_piece_bytes();
  whole.payload = std::move(p.whole).Frame(p.bytes);
  whole.has_payload = true;
  Drop(it);
  return std::optional<Message>(std::move(whole));
}

}  // namespace pstrain

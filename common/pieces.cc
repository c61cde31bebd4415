#include "common/pieces.h"

#include <algorithm>
#include <cstring>
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
  if (!curve || bytes < kMinPiecedBytes) return layout;
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
      max_partials_(std::max(1, max_partials)) {}

std::vector<PieceAssembler::Dropped> PieceAssembler::TakeDropped() {
  std::vector<Dropped> out;
  out.swap(dropped_);
  return out;
}

void PieceAssembler::Evict(std::map<std::string, Partial>::iterator it) {
  dropped_.push_back({it->first, it->second.first,
                      absl::ResourceExhaustedError(
                          "the ps dropped this message's pieces to make room for other peers' "
                          "(too many messages in pieces at once for --max_message_mb)")});
  Drop(it);
}

void PieceAssembler::Drop(std::map<std::string, Partial>::iterator it) {
  held_bytes_ -= it->second.bytes;
  partials_.erase(it);
}

bool PieceAssembler::MakeRoom(size_t need, const std::string& keep) {
  while (held_bytes_ + need > max_bytes_) {
    auto oldest = partials_.end();
    for (auto it = partials_.begin(); it != partials_.end(); ++it) {
      if (it->first == keep) continue;
      if (oldest == partials_.end() || it->second.last_use < oldest->second.last_use) oldest = it;
    }
    if (oldest == partials_.end()) return false;
    Evict(oldest);
  }
  return true;
}

absl::StatusOr<std::optional<Message>> PieceAssembler::Take(const std::string& peer, Message m) {
  if (!IsPiece(m.header)) return std::optional<Message>(std::move(m));
  const proto::MessageType type = m.header.type();
  if (type != proto::PUSH && type != proto::PUSH_PULL) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", proto::MessageType_IsValid(type) ? proto::MessageType_Name(type) : "request",
        " in pieces (only PUSH and PUSH_PULL payloads come in pieces)"));
  }
  return Add(peer, std::move(m));
}

absl::StatusOr<std::optional<Message>> PieceAssembler::Add(const std::string& peer, Message piece) {
  const proto::Header& h = piece.header;
  auto it = partials_.find(peer);
  absl::Status bad = CheckPiece(h, piece.payload_bytes());
  if (bad.ok() && it != partials_.end()) {
    const Partial& p = it->second;
    const bool same_message = p.session == h.session() && p.request_id == h.request_id();
    if (same_message && (h.parts() != p.parts || h.piece_bytes() != p.piece_bytes)) {
      bad = absl::InvalidArgumentError("a piece changes its message's layout");
    } else if (same_message && h.part() != p.pieces.size()) {
      bad = absl::InvalidArgumentError(
          absl::StrCat("piece ", h.part(), " where piece ", p.pieces.size(), " was due"));
    } else if (!same_message) {
      Drop(it);  // that request was given up: another one has begun
      it = partials_.end();
    }
  }
  if (bad.ok() && it == partials_.end() && h.part() != 0) {
    bad = absl::InvalidArgumentError(
        absl::StrCat("piece ", h.part(), " of ", h.parts(), " without the pieces before it"));
  }
  // The smallest the whole message can be: every piece but the last full.
  if (bad.ok() && it == partials_.end() &&
      static_cast<uint64_t>(h.parts() - 1) * h.piece_bytes() + sizeof(float) > max_message_bytes_) {
    bad = absl::InvalidArgumentError(absl::StrCat("a message of ", h.parts(), " pieces of ",
                                                  h.piece_bytes(), " bytes: over the ",
                                                  max_message_bytes_, "-byte limit"));
  }
  if (bad.ok() && !MakeRoom(piece.payload_bytes(), peer)) {
    bad = absl::ResourceExhaustedError(
        absl::StrCat("messages in pieces over ", max_bytes_, " bytes at once"));
  }
  if (!bad.ok()) {
    if (it != partials_.end()) Drop(it);
    return bad;
  }
  if (it == partials_.end()) {
    if (partials_.size() >= static_cast<size_t>(max_partials_)) {
      auto oldest = std::min_element(
          partials_.begin(), partials_.end(),
          [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
      Evict(oldest);
    }
    Partial p;
    p.first = h;
    p.session = h.session();
    p.request_id = h.request_id();
    p.parts = h.parts();
    p.piece_bytes = h.piece_bytes();
    it = partials_.emplace(peer, std::move(p)).first;
  }
  Partial& p = it->second;
  p.last_use = ++clock_;
  p.bytes += piece.payload_bytes();
  held_bytes_ += piece.payload_bytes();
  p.pieces.push_back(std::move(piece.payload));
  if (p.pieces.size() < p.parts) return std::optional<Message>();
  Message whole;
  whole.header = std::move(piece.header);
  whole.header.clear_part();
  whole.header.clear_parts();
  whole.header.clear_piece_bytes();
  whole.payload = zmq::message_t(p.bytes);
  char* to = static_cast<char*>(whole.payload.data());
  for (const zmq::message_t& m : p.pieces) {
    std::memcpy(to, m.data(), m.size());
    to += m.size();
  }
  whole.has_payload = true;
  Drop(it);
  return std::optional<Message>(std::move(whole));
}

}  // namespace pstrain

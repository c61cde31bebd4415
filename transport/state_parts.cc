#include "transport/state_parts.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {

size_t StatePartBytes(int64_t max_message_bytes, const proto::Header& h) {
  const uint64_t room = h.ByteSizeLong() + kStatePartHeaderRoom;
  if (max_message_bytes <= 0 || static_cast<uint64_t>(max_message_bytes) <= room) return 0;
  return (static_cast<uint64_t>(max_message_bytes) - room) / sizeof(float) * sizeof(float);
}

std::vector<float> StateSlice(absl::Span<const float> state, uint64_t offset, size_t part_bytes) {
  const size_t begin = std::min<size_t>(offset / sizeof(float), state.size());
  const size_t end = std::min(state.size(), begin + part_bytes / sizeof(float));
  return {state.begin() + begin, state.begin() + end};
}

std::string StatePartsAssembler::Key(const proto::Header& h) {
  proto::Header k = h;
  k.clear_request_id();
  k.clear_state_part();
  if (k.has_replica()) k.mutable_replica()->clear_seq();
  return k.SerializeAsString();
}

void StatePartsAssembler::Clear() {
  active_ = false;
  key_.clear();
  buffer_.reset();
  capacity_ = 0;
  stream_ = total_ = received_ = last_offset_ = 0;
}

absl::StatusOr<std::optional<Message>> StatePartsAssembler::Add(const Message& m,
                                                                uint64_t expected_total) {
  const proto::StatePart& p = m.header.state_part();
  const uint64_t bytes = m.payload_bytes();
  auto refuse = [&](const std::string& why) {
    Clear();
    return absl::InvalidArgumentError(absl::StrCat("a state's part refused: ", why));
  };
  if (p.total() != expected_total || p.total() == 0 || p.total() % sizeof(float) != 0) {
    return refuse(
        absl::StrCat("a state of ", p.total(), " bytes, where its header says ", expected_total));
  }
  if (bytes == 0 || bytes % sizeof(float) != 0 || p.offset() % sizeof(float) != 0 ||
      p.offset() > p.total() || bytes > p.total() - p.offset()) {
    return refuse(
        absl::StrCat("bytes [", p.offset(), ", ", p.offset() + bytes, ") of ", p.total()));
  }
  if (p.offset() == 0 &&
      (!active_ || p.stream() != stream_ || received_ != bytes || Key(m.header) != key_)) {
    // The first part of a state: what was held of another is given up.
    Clear();
    active_ = true;
    key_ = Key(m.header);
    stream_ = p.stream();
    total_ = p.total();
  } else if (!active_ || p.stream() != stream_ || p.total() != total_ || Key(m.header) != key_) {
    return refuse("a part of another state than the one being put together");
  } else if (p.offset() == last_offset_ && p.offset() + bytes == received_) {
    return std::optional<Message>();  // the part just taken, again
  } else if (p.offset() != received_) {
    return refuse(absl::StrCat("a part at byte ", p.offset(),
                               " where the state being put "
                               "together stopped at ",
                               received_));
  }
  // The buffer grows with the bytes that arrive, never from what a header
  // claims: to twice what it held, at most the total (a large one is
  // moved by remapping its pages, not copied: glibc's realloc).
  if (received_ + bytes > capacity_) {
    const uint64_t want =
        std::min<uint64_t>(total_, std::max<uint64_t>(received_ + bytes, 2 * capacity_));
    char* grown = static_cast<char*>(std::realloc(buffer_.get(), want));
    if (grown == nullptr) {
      Clear();
      return absl::ResourceExhaustedError(absl::StrCat("a state's part refused: no memory for ",
                                                       want, " bytes of a state of ", total_));
    }
    static_cast<void>(buffer_.release());
    buffer_.reset(grown);
    capacity_ = want;
  }
  std::memcpy(buffer_.get() + p.offset(), m.PayloadBytes().data(), bytes);
  last_offset_ = p.offset();
  received_ = p.offset() + bytes;
  if (received_ < total_) return std::optional<Message>();
  proto::Header h = m.header;
  h.clear_state_part();
  Message whole = MakeMessageTaking(std::move(h), std::move(buffer_), total_);
  Clear();
  return std::optional<Message>(std::move(whole));
}

}  // namespace pstrain

#pragma once

// A shard's state larger than one message, as parts (proto::StatePart): a
// REPLICATE from a primary to its standby, a FETCH_REPLICA reply from a
// standby to the chief, and the chief's RESTORE from that state to a
// restarted ps. Each part is an ordinary message of its own, with the
// whole state's header and a slice of its payload, and the next part goes
// only once the receiver answered this one, so that no message is over
// the job's --max_message_mb and the chief, relaying a standby's state to
// a restarted ps, holds two parts at most (one being restored, the next
// being fetched: PsClient::RestoreFromReplica). (Pieces, transport/pieces.h,
// cut one message for the cipher's sake and are put back together under
// the message limit.)
//
// The receiver puts a state back together with StatePartsAssembler, one
// state at a time per assembler, and then handles it as the whole message
// it stands for, with every check that message gets.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"
#include "transport/transport.h"

namespace pstrain {

// Room a part's message leaves for its header beside the payload.
inline constexpr size_t kStatePartHeaderRoom = 64 * 1024;
// The smallest part one may ask for (FETCH_REPLICA).
inline constexpr size_t kMinStatePartBytes = 4096;

// The most payload bytes (whole floats) one part may carry in a message of
// at most `max_message_bytes` whose header is `h`; 0 when the limit leaves
// no room.
size_t StatePartBytes(int64_t max_message_bytes, const proto::Header& h);

// Bytes [offset, offset + part_bytes) of `state`'s bytes, as floats (offset
// and part_bytes whole floats; the slice ends at the state's end).
std::vector<float> StateSlice(absl::Span<const float> state, uint64_t offset, size_t part_bytes);

class StatePartsAssembler {
 public:
  // Takes part `m` (m.header has state_part). Returns the whole state once
  // its last part is in: a message with the last part's header, state_part
  // cleared, and the whole payload. nullopt while more parts are due, and
  // for a repeat of the part just taken (its answer was lost). A part 0 of
  // another stream or header starts a new state (what was held is
  // dropped). Refused
  // (InvalidArgument, what was held dropped): a total that is not
  // `expected_total` (what the header says the whole payload is), a part
  // of another stream or header than the state being put together, or one
  // that does not start where the last one ended. What is held grows with
  // the bytes that arrive (ResourceExhausted when memory runs out), never
  // from what a header claims.
  absl::StatusOr<std::optional<Message>> Add(const Message& m, uint64_t expected_total);

  void Clear();
  bool active() const { return active_; }
  uint64_t received() const { return received_; }

 private:
  // The header without what differs between one state's parts.
  static std::string Key(const proto::Header& h);

  bool active_ = false;
  std::string key_;
  uint64_t stream_ = 0, total_ = 0, received_ = 0, last_offset_ = 0;
  MallocBuffer buffer_;  // capacity_ bytes, received_ of them filled
  uint64_t capacity_ = 0;
};

}  // namespace pstrain

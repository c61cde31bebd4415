// libFuzzer target: the frames of a ps's Unix socket (StreamReader,
// transport/stream_link.h), what a worker on the ps's host sends once
// admitted, and what a worker reads from its ps.
//
// The input: a first byte choosing how many bytes each read hands over
// (1 + byte, so frames are cut at every place), then the stream. Every
// message that comes out must be a pstrain header and a payload of whole
// floats within the limit; a payload may go into a sink of the caller's,
// as a worker's parameters do, when its size is the sink's.

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "glog/logging.h"
#include "transport/stream_link.h"

namespace pstrain::fuzz {
namespace {

constexpr size_t kMaxPayloadBytes = 1 << 16;

void Run(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const size_t chunk = 1 + data[0];
  const char* stream = reinterpret_cast<const char*>(data + 1);
  const size_t bytes = size - 1;
  StreamReader reader(kMaxPayloadBytes);
  std::vector<float> place(64);
  reader.set_sink([&](const proto::Header& h, size_t n) {
    return h.request_id() % 2 == 1 && n == place.size() * sizeof(float)
               ? absl::Span<char>(reinterpret_cast<char*>(place.data()), n)
               : absl::Span<char>();
  });
  std::vector<StreamMessage> out;
  size_t at = 0;
  absl::Status status;
  // One read a round, then EAGAIN, as a socket that is drained.
  while (status.ok()) {
    bool handed = false;
    status = reader.Read(
        [&](char* buf, size_t n) -> long {
          if (handed) {
            errno = EAGAIN;
            return -1;
          }
          handed = true;
          const size_t take = std::min({n, chunk, bytes - at});
          std::memcpy(buf, stream + at, take);
          at += take;
          return static_cast<long>(take);  // 0 at the end: the stream closed
        },
        SIZE_MAX, &out);
  }
  CHECK(absl::IsUnavailable(status) || absl::IsDataLoss(status) || absl::IsInvalidArgument(status))
      << status;
  for (const StreamMessage& m : out) {
    CHECK_LE(m.wire_bytes, kMaxHeaderBytes + kMaxPayloadBytes);
    if (!m.message.ok()) {
      CHECK(absl::IsInvalidArgument(m.message.status())) << m.message.status();
      continue;
    }
    CHECK_EQ(m.message->payload_bytes() % sizeof(float), 0u);
    CHECK_LE(m.message->payload_bytes(), kMaxPayloadBytes);
    if (m.payload_placed) CHECK(!m.message->has_payload);
  }
}

}  // namespace
}  // namespace pstrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::fuzz::Run(data, size);
  return 0;
}

#pragma once

// pstrain messages over a byte stream of its own (a Unix stream socket),
// without ZeroMQ: the link between a ps and a worker of its host
// (transport/local_route.h). Each message is one frame:
//
//   [magic u32 "PST1"][header bytes u32][payload bytes u64][header][payload]
//
// little-endian, the header a serialized proto::Header (1 to
// kMaxHeaderBytes), the payload whole 32-bit words (0 to the task's
// --max_message_mb; 0: none). A frame that breaks these rules ends the
// connection (InvalidArgument): nothing after it can be trusted to start
// a frame. A header that is not a pstrain header is reported as that one
// message's error, as over ZeroMQ, and the stream goes on.
//
// Why a stream of its own: over ZeroMQ each round trip crosses four
// threads (each side's I/O thread and the one that sends or receives),
// and on a host whose idle cores wake slowly that hand-off is most of a
// small model's step; here the thread that sends writes, and the one that
// waits reads (benchmarks/log/wire_bench.md: a 238 KB echo in 206-210 us
// over a raw Unix socket against 508-543 us over ZeroMQ's ipc://).
//
// Both ends read and write without blocking: a writer queues what the
// socket does not take yet (StreamLink::Flush writes more once poll says
// it can), a reader keeps a partial frame until the rest comes. A peer
// that stops reading or writing holds its own link only.
//
// Thread safety: none; a link belongs to one thread.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/pstrain.pb.h"
#include "transport/transport.h"
#include "zmq.hpp"

namespace pstrain {

// "PST1" as a little-endian u32: every frame's first word.
inline constexpr uint32_t kStreamMagic = 0x31545350;
inline constexpr size_t kStreamPrefixBytes = 16;
// A read stops once this many messages came (and the stage is parsed).
inline constexpr size_t kMaxMessagesPerRead = 256;

// One message read off a stream.
struct StreamMessage {
  // The message, or why its header is not a pstrain header.
  absl::StatusOr<Message> message = absl::UnknownError("not read");
  // Its payload went where the reader's sink said (the message has none).
  bool payload_placed = false;
  size_t wire_bytes = 0;  // the frame's header and payload bytes
};

// Where a payload of `bytes` goes once its header is read: a span of
// exactly `bytes` of the caller's (a reply's place in the parameters), or
// an empty span for a buffer of the reader's own. Asked only for payloads
// of whole words under a well-formed header.
using PayloadSink = std::function<absl::Span<char>(const proto::Header& header, size_t bytes)>;

// Reads frames off a stream. `read(buf, n)` returns what read(2) would:
// bytes read, 0 at the end of the stream, -1 with errno set.
class StreamReader {
 public:
  explicit StreamReader(size_t max_payload_bytes);

  // Reads until the source would block (EAGAIN), or at least `budget`
  // bytes or kMaxMessagesPerRead messages came, appending every whole
  // message to `out`. OK then; Unavailable ("closed") when the stream
  // ended between frames, DataLoss when it ended inside one,
  // InvalidArgument for a frame that breaks the rules, ResourceExhausted
  // when a payload's buffer cannot be had, Unavailable naming the error of
  // a failed read. After an error the reader is done.
  absl::Status Read(absl::FunctionRef<long(char* buf, size_t n)> read, size_t budget,
                    std::vector<StreamMessage>* out);
  // The same from file descriptor `fd` (non-blocking).
  absl::Status ReadFrom(int fd, size_t budget, std::vector<StreamMessage>* out);

  void set_sink(PayloadSink sink) { sink_ = std::move(sink); }
  // A frame is partly read.
  bool mid_frame() const { return state_ != State::kPrefix || begin_ != end_; }
  // A payload is being read into the sink's place, and how many of its
  // bytes are there so far (from the place's start).
  bool placing() const { return state_ == State::kPayload && placed_; }
  size_t placed_bytes() const { return placing() ? payload_done_ : 0; }

 private:
  enum class State { kPrefix, kHeader, kPayload };
  // Parses what the staging buffer holds; false when it needs more bytes.
  absl::Status Parse(std::vector<StreamMessage>* out, bool* progressed);
  void FinishMessage(std::vector<StreamMessage>* out);

  size_t max_payload_bytes_;
  PayloadSink sink_;
  std::vector<char> stage_;  // bytes read ahead: [begin_, end_)
  size_t begin_ = 0;
  size_t end_ = 0;
  State state_ = State::kPrefix;
  uint32_t header_bytes_ = 0;
  uint64_t payload_bytes_ = 0;
  size_t payload_done_ = 0;
  absl::StatusOr<proto::Header> header_ = absl::UnknownError("none");
  zmq::message_t own_;       // the payload's buffer, unless the sink gave one
  absl::Span<char> target_;  // where the payload goes
  bool placed_ = false;
};

// Queues frames for a stream and writes them as it takes them.
class StreamWriter {
 public:
  // Queues one message; `body` is held until written (a parameters frame
  // without a copy). An empty body: no payload.
  void Queue(const proto::Header& header, zmq::message_t body);
  // The same with a payload the caller keeps alive and unchanged until it
  // is written (queued_messages() no longer counts it).
  void QueueBorrowed(const proto::Header& header, absl::Span<const char> payload);
  // Writes what `fd` takes without blocking. OK when all is written or the
  // socket is full; Unavailable naming the error when the peer is gone.
  absl::Status Flush(int fd);
  bool empty() const { return queue_.empty(); }
  size_t queued_messages() const { return queue_.size(); }
  size_t queued_bytes() const { return queued_bytes_; }

 private:
  struct Entry {
    std::string head;  // prefix and header
    zmq::message_t body;
    absl::Span<const char> payload;  // body's bytes, or borrowed ones
    size_t done = 0;                 // bytes of head then payload written
    size_t size() const { return head.size() + payload.size(); }
  };
  void Push(const proto::Header& header, uint64_t payload_bytes, Entry entry);
  std::deque<Entry> queue_;
  size_t queued_bytes_ = 0;
};

// Both, on one connected socket, which the link owns (closed with it).
class StreamLink {
 public:
  StreamLink(int fd, size_t max_payload_bytes);
  ~StreamLink();
  StreamLink(const StreamLink&) = delete;
  StreamLink& operator=(const StreamLink&) = delete;

  int fd() const { return fd_; }
  StreamReader& reader() { return reader_; }
  const StreamReader& reader() const { return reader_; }
  StreamWriter& writer() { return writer_; }
  const StreamWriter& writer() const { return writer_; }
  // Queues and writes what the socket takes now.
  absl::Status Send(const proto::Header& header, zmq::message_t body);
  absl::Status SendBorrowed(const proto::Header& header, absl::Span<const char> payload);
  absl::Status Flush() { return writer_.Flush(fd_); }
  absl::Status Receive(size_t budget, std::vector<StreamMessage>* out) {
    return reader_.ReadFrom(fd_, budget, out);
  }
  // Ends the connection both ways and forgets what was partly read (and
  // where it went): every later Send and Receive fails.
  void Break();

 private:
  int fd_;
  size_t max_payload_bytes_;
  StreamReader reader_;
  StreamWriter writer_;
};

}  // namespace pstrain

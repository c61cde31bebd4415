#include "transport/stream_link.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// Bytes read ahead: a frame's prefix and header (at most kMaxHeaderBytes)
// always fit, and small frames come several to a read.
constexpr size_t kStageBytes = kStreamPrefixBytes + kMaxHeaderBytes + 64 * 1024;
// A payload's rest is read straight into its place when at least this
// much is due (else through the stage, with the next frame's start).
constexpr size_t kDirectReadBytes = 16 * 1024;
// How far a read through the stage reads past what the frame needs next:
// a small frame's header and payload come in one read, and no more of a
// large payload than this is copied out of the stage.
constexpr size_t kReadAheadBytes = 4096;
// The largest payload a stream takes when its task sets no limit.
constexpr uint64_t kUnlimitedPayloadBytes = uint64_t{4} << 30;
// Buffers one sendmsg gathers.
constexpr int kMaxIov = 64;

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint64_t LoadU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

StreamReader::StreamReader(size_t max_payload_bytes)
    : max_payload_bytes_(max_payload_bytes > 0 ? max_payload_bytes : kUnlimitedPayloadBytes),
      stage_(kStageBytes) {}

absl::Status StreamReader::ReadFrom(int fd, size_t budget, std::vector<StreamMessage>* out) {
  return Read([fd](char* buf, size_t n) { return static_cast<long>(::read(fd, buf, n)); }, budget,
              out);
}

absl::Status StreamReader::Read(absl::FunctionRef<long(char* buf, size_t n)> read, size_t budget,
                                std::vector<StreamMessage>* out) {
  size_t got = 0;
  const size_t first = out->size();
  for (;;) {
    for (bool progressed = true; progressed;) {
      if (absl::Status s = Parse(out, &progressed); !s.ok()) return s;
    }
    // The stage holds no whole frame now: what is left waits in the
    // socket, which poll reports.
    if (got >= budget || out->size() - first >= kMaxMessagesPerRead) return absl::OkStatus();
    // The stage holds less than the next step needs.
    const bool direct =
        state_ == State::kPayload && payload_bytes_ - payload_done_ >= kDirectReadBytes;
    char* into;
    size_t room;
    if (direct) {
      into = target_.data() + payload_done_;
      room = payload_bytes_ - payload_done_;
    } else {
      if (begin_ > 0) {
        std::memmove(stage_.data(), stage_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
      }
      size_t due = 0;  // what the frame needs next, beyond what is here
      if (state_ == State::kHeader) due = header_bytes_ - std::min<size_t>(header_bytes_, end_);
      if (state_ == State::kPayload) due = static_cast<size_t>(payload_bytes_) - payload_done_;
      into = stage_.data() + end_;
      room = std::min(stage_.size() - end_, due + kReadAheadBytes);
    }
    const long n = read(into, room);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat("read failed: ", std::strerror(errno)));
    }
    if (n == 0) {
      return mid_frame() ? absl::DataLossError("the stream ended inside a message")
                         : absl::UnavailableError("the stream closed");
    }
    got += static_cast<size_t>(n);
    if (!direct) {
      end_ += static_cast<size_t>(n);
      continue;
    }
    payload_done_ += static_cast<size_t>(n);
    if (payload_done_ == payload_bytes_) FinishMessage(out);
  }
}

absl::Status StreamReader::Parse(std::vector<StreamMessage>* out, bool* progressed) {
  *progressed = false;
  const size_t avail = end_ - begin_;
  const char* at = stage_.data() + begin_;
  switch (state_) {
    case State::kPrefix: {
      if (avail < kStreamPrefixBytes) return absl::OkStatus();
      const uint32_t magic = LoadU32(at);
      header_bytes_ = LoadU32(at + 4);
      payload_bytes_ = LoadU64(at + 8);
      if (magic != kStreamMagic) {
        return absl::InvalidArgumentError(
            absl::StrCat("a frame that does not start with pstrain's magic (",
                         absl::Hex(magic, absl::kZeroPad8), ")"));
      }
      if (header_bytes_ == 0 || header_bytes_ > kMaxHeaderBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a header of ", header_bytes_, " bytes (expected 1..", kMaxHeaderBytes, ")"));
      }
      if (payload_bytes_ % sizeof(float) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("a payload of ", payload_bytes_, " bytes is not whole f32 values"));
      }
      if (payload_bytes_ > max_payload_bytes_) {
        return absl::InvalidArgumentError(absl::StrCat("a payload of ", payload_bytes_,
                                                       " bytes, over the ", max_payload_bytes_,
                                                       " a task takes (--max_message_mb)"));
      }
      begin_ += kStreamPrefixBytes;
      state_ = State::kHeader;
      *progressed = true;
      return absl::OkStatus();
    }
    case State::kHeader: {
      if (avail < header_bytes_) return absl::OkStatus();
      proto::Header header;
      if (header.ParseFromArray(at, static_cast<int>(header_bytes_))) {
        header_ = std::move(header);
      } else {
        header_ = absl::InvalidArgumentError(
            absl::StrCat("header frame of ", header_bytes_, " bytes is not a pstrain header"));
      }
      begin_ += header_bytes_;
      *progressed = true;
      if (payload_bytes_ == 0) {
        FinishMessage(out);
        return absl::OkStatus();
      }
      const auto bytes = static_cast<size_t>(payload_bytes_);
      target_ = {};
      placed_ = false;
      if (header_.ok() && sink_) {
        const absl::Span<char> span = sink_(*header_, bytes);
        if (span.size() == bytes) {
          target_ = span;
          placed_ = true;
        }
      }
      if (!placed_) {
        try {
          own_.rebuild(bytes);
        } catch (const zmq::error_t& e) {
          return absl::ResourceExhaustedError(
              absl::StrCat("no memory for a payload of ", bytes, " bytes: ", e.what()));
        }
        target_ = {static_cast<char*>(own_.data()), bytes};
      }
      payload_done_ = 0;
      state_ = State::kPayload;
      return absl::OkStatus();
    }
    case State::kPayload: {
      const size_t take = std::min<size_t>(avail, payload_bytes_ - payload_done_);
      if (take == 0) return absl::OkStatus();
      std::memcpy(target_.data() + payload_done_, at, take);
      begin_ += take;
      payload_done_ += take;
      if (payload_done_ == payload_bytes_) FinishMessage(out);
      *progressed = true;
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

void StreamReader::FinishMessage(std::vector<StreamMessage>* out) {
  StreamMessage m;
  m.wire_bytes = header_bytes_ + static_cast<size_t>(payload_bytes_);
  if (header_.ok()) {
    Message message;
    message.header = *std::move(header_);
    if (payload_bytes_ > 0 && !placed_) {
      message.payload = std::move(own_);
      message.has_payload = true;
    }
    m.payload_placed = payload_bytes_ > 0 && placed_;
    m.message = std::move(message);
  } else {
    m.message = header_.status();
  }
  out->push_back(std::move(m));
  state_ = State::kPrefix;
  header_ = absl::UnknownError("none");
  own_ = zmq::message_t();
  target_ = {};
  placed_ = false;
  payload_bytes_ = 0;
  payload_done_ = 0;
}

void StreamWriter::Queue(const proto::Header& header, zmq::message_t body) {
  Entry entry;
  const size_t bytes = body.size();
  entry.body = std::move(body);
  Push(header, bytes, std::move(entry));
  // The frame's bytes are in place only now: a small message_t keeps them
  // in itself, and moving it moved them.
  Entry& queued = queue_.back();
  queued.payload = {static_cast<const char*>(queued.body.data()), queued.body.size()};
  queued_bytes_ += queued.payload.size();
}

void StreamWriter::QueueBorrowed(const proto::Header& header, absl::Span<const char> payload) {
  Entry entry;
  entry.payload = payload;
  Push(header, payload.size(), std::move(entry));
  queued_bytes_ += payload.size();
}

void StreamWriter::Push(const proto::Header& header, uint64_t payload_bytes, Entry entry) {
  const size_t header_bytes = header.ByteSizeLong();
  entry.head.resize(kStreamPrefixBytes + header_bytes);
  char* p = entry.head.data();
  const uint32_t magic = kStreamMagic;
  const auto hb = static_cast<uint32_t>(header_bytes);
  std::memcpy(p, &magic, 4);
  std::memcpy(p + 4, &hb, 4);
  std::memcpy(p + 8, &payload_bytes, 8);
  header.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(p + kStreamPrefixBytes));
  queue_.push_back(std::move(entry));
  queued_bytes_ += queue_.back().head.size();
}

absl::Status StreamWriter::Flush(int fd) {
  while (!queue_.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (const Entry& e : queue_) {
      if (n + 2 > kMaxIov) break;
      size_t skip = e.done;
      if (skip < e.head.size()) {
        iov[n++] = {const_cast<char*>(e.head.data()) + skip, e.head.size() - skip};
        skip = 0;
      } else {
        skip -= e.head.size();
      }
      if (e.payload.size() > skip) {
        iov[n++] = {const_cast<char*>(e.payload.data()) + skip, e.payload.size() - skip};
      }
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = ::sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat("write failed: ", std::strerror(errno)));
    }
    auto left = static_cast<size_t>(w);
    queued_bytes_ -= left;
    while (left > 0) {
      Entry& front = queue_.front();
      const size_t rest = front.size() - front.done;
      if (left < rest) {
        front.done += left;
        break;
      }
      left -= rest;
      queue_.pop_front();
    }
  }
  return absl::OkStatus();
}

StreamLink::StreamLink(int fd, size_t max_payload_bytes)
    : fd_(fd), max_payload_bytes_(max_payload_bytes), reader_(max_payload_bytes) {}

StreamLink::~StreamLink() {
  if (fd_ >= 0) ::close(fd_);
}

void StreamLink::Break() {
  ::shutdown(fd_, SHUT_RDWR);
  reader_ = StreamReader(max_payload_bytes_);
  writer_ = StreamWriter();
}

absl::Status StreamLink::Send(const proto::Header& header, zmq::message_t body) {
  writer_.Queue(header, std::move(body));
  return writer_.Flush(fd_);
}

absl::Status StreamLink::SendBorrowed(const proto::Header& header, absl::Span<const char> payload) {
  writer_.QueueBorrowed(header, payload);
  return writer_.Flush(fd_);
}

}  // namespace pstrain

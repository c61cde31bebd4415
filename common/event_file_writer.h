#pragma once

// TensorBoard event files (tfevents): what `tensorboard --logdir=DIR`
// reads, written without TensorFlow.
//
//   ASSIGN_OR_RETURN(auto tb, EventFileWriter::Open("runs/x/tb/worker0", "worker0"));
//   RETURN_IF_ERROR(tb->AddScalar("train/loss", step, loss));
//
// A file is a sequence of TFRecords: a little-endian u64 length, the
// masked CRC-32C of those 8 bytes (u32), the record, the masked CRC-32C of
// the record (common/crc32c.h). Each record is an Event
// (proto/tensorboard.proto: TensorFlow's field numbers); the first holds
// file_version "brain.Event:2", the others one scalar each. The file is
// DIR/events.out.tfevents.<unix seconds>.<host>.<suffix>, as TensorFlow
// names them; a new writer never appends to an old file (a restarted task
// writes a file of its own, and TensorBoard reads them all).
//
// Records are buffered and written by Flush (and by the destructor), each
// whole: a reader never sees half a record once Flush returned. Errors
// name the file; after one, every call returns it (latched).
//
// Thread safety: none.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {

class EventFileWriter {
 public:
  // Creates `dir` if missing and the file in it. `suffix` ends the file's
  // name ("worker0"; only [A-Za-z0-9_.-] are kept).
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Open(const std::string& dir,
                                                               const std::string& suffix);
  ~EventFileWriter();

  // A scalar at `step`, stamped with the wall time now (or `wall_time_s`,
  // seconds since the Unix epoch, when >= 0).
  absl::Status AddScalar(const std::string& tag, int64_t step, double value,
                         double wall_time_s = -1);
  absl::Status Flush();

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status Append(const std::string& record);

  std::string path_;
  std::FILE* file_;
  absl::Status status_;
};

// One TFRecord frame around `record` (for the writer, and tests).
std::string TfRecordFrame(const std::string& record);

}  // namespace pstrain

#include "common/event_file_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "proto/tensorboard.pb.h"

namespace pstrain {
namespace {

std::string Sanitized(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '.' || c == '-';
    if (keep) out.push_back(c);
  }
  return out.empty() ? "task" : out;
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return Sanitized(name);
}

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

double NowSeconds() { return static_cast<double>(UnixMicros()) * 1e-6; }

}  // namespace

std::string TfRecordFrame(const std::string& record) {
  std::string frame;
  frame.reserve(record.size() + 16);
  PutLittleEndian(record.size(), 8, &frame);
  PutLittleEndian(MaskCrc(Crc32c(frame)), 4, &frame);
  frame += record;
  PutLittleEndian(MaskCrc(Crc32c(record)), 4, &frame);
  return frame;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Open(const std::string& dir,
                                                                       const std::string& suffix) {
  RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.", UnixMicros() / 1'000'000, ".",
                                        HostName(), ".", Sanitized(suffix));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> w(new EventFileWriter(path, f));
  tensorboard::Event first;
  first.set_wall_time(NowSeconds());
  first.set_file_version("brain.Event:2");
  RETURN_IF_ERROR(w->Append(first.SerializeAsString()));
  RETURN_IF_ERROR(w->Flush());
  return w;
}

EventFileWriter::~EventFileWriter() {
  (void)Flush();
  std::fclose(file_);
}

absl::Status EventFileWriter::Append(const std::string& record) {
  if (!status_.ok()) return status_;
  const std::string frame = TfRecordFrame(record);
  if (std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size()) {
    status_ = absl::InternalError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  return status_;
}

absl::Status EventFileWriter::AddScalar(const std::string& tag, int64_t step, double value,
                                        double wall_time_s) {
  tensorboard::Event e;
  e.set_wall_time(wall_time_s >= 0 ? wall_time_s : NowSeconds());
  e.set_step(step);
  tensorboard::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  return Append(e.SerializeAsString());
}

absl::Status EventFileWriter::Flush() {
  if (!status_.ok()) return status_;
  if (std::fflush(file_) != 0) {
    status_ = absl::Status(errno == ENOSPC || errno == EDQUOT ? absl::StatusCode::kResourceExhausted
                                                              : absl::StatusCode::kInternal,
                           absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  return status_;
}

}  // namespace pstrain

#include "common/trace_writer.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// A JSON string literal (names are ours, but quote them properly anyway).
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path, int pid,
                                                               const std::string& process_name) {
  RETURN_IF_ERROR(MakeDirs(SplitPath(path).dir));
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  std::unique_ptr<TraceWriter> t(new TraceWriter(path, f, pid));
  RETURN_IF_ERROR(
      t->Line(absl::StrCat("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": ", pid,
                           ", \"tid\": 0, \"args\": {\"name\": ", Quoted(process_name), "}}")));
  return t;
}

TraceWriter::~TraceWriter() {
  if (status_.ok()) std::fputs("\n]\n", file_);
  std::fclose(file_);
}

absl::Status TraceWriter::Line(const std::string& event) {
  if (!status_.ok()) return status_;
  const std::string line = absl::StrCat(first_ ? "[\n" : "\n,", event);
  first_ = false;
  if (std::fputs(line.c_str(), file_) < 0) {
    status_ = absl::InternalError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  return status_;
}

absl::Status TraceWriter::NameThread(int tid, const std::string& name) {
  return Line(absl::StrCat("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": ", pid_,
                           ", \"tid\": ", tid, ", \"args\": {\"name\": ", Quoted(name), "}}"));
}

absl::Status TraceWriter::Complete(const std::string& name, const std::string& category, int tid,
                                   int64_t ts_us, int64_t dur_us, const std::string& args_json) {
  return Line(absl::StrCat("{\"name\": ", Quoted(name), ", \"cat\": ", Quoted(category),
                           ", \"ph\": \"X\", \"pid\": ", pid_, ", \"tid\": ", tid,
                           ", \"ts\": ", ts_us, ", \"dur\": ", dur_us < 0 ? 0 : dur_us,
                           ", \"args\": {", args_json, "}}"));
}

absl::Status TraceWriter::Flush() {
  if (!status_.ok()) return status_;
  if (std::fflush(file_) != 0) {
    status_ = absl::Status(
        errno == ENOSPC ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal,
        absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  return status_;
}

absl::Status MergeTimelines(const std::vector<std::string>& inputs, const std::string& out) {
  std::string merged = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (const std::string& path : inputs) {
    ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      absl::ConsumePrefix(&line, ",");
      // One event per line; the brackets and a line a killed task cut
      // short (it does not end with "}") are left out.
      if (!absl::StartsWith(line, "{") || !absl::EndsWith(line, "}")) continue;
      absl::StrAppend(&merged, first ? "" : ",\n", line);
      first = false;
    }
  }
  absl::StrAppend(&merged, "\n]}\n");
  return WriteFileAtomic(out, merged);
}

}  // namespace pstrain

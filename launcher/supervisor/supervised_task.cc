#include "launcher/supervisor/supervised_task.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace pstrain {
namespace {

// The longest part of a task's line a failure message quotes.
constexpr size_t kMaxQuotedChars = 400;

// glog's "E1126 12:00:00.000000 42 f.cc:1] ..." and "F..." lines.
bool IsGlogError(absl::string_view line) {
  return line.size() > 5 && (line[0] == 'E' || line[0] == 'F') && absl::ascii_isdigit(line[1]) &&
         absl::ascii_isdigit(line[4]);
}

}  // namespace

bool IsErrorLine(absl::string_view line) {
  return IsGlogError(line) || absl::StrContains(line, ": error: ");
}

std::string LastWords(const SupervisedTask& t, bool or_last_line) {
  absl::string_view line = t.last_error;
  if (line.empty() && or_last_line) line = t.last_line;
  if (IsGlogError(line)) {
    if (const size_t end = line.find("] "); end != absl::string_view::npos) line.remove_prefix(end + 2);
  }
  line = absl::StripAsciiWhitespace(line);
  if (line.size() <= kMaxQuotedChars) return std::string(line);
  return absl::StrCat(line.substr(0, kMaxQuotedChars), "...");
}

std::string LogPath(const LaunchOptions& options, const TaskId& id) {
  return absl::StrCat(options.run_dir, "/logs/", absl::StrReplaceAll(id.ToString(), {{":", "-"}}),
                      ".log");
}

bool IsProgressLine(const SupervisedTask& task, absl::string_view line) {
  if (!line.empty() && (line[0] == 'W' || line[0] == 'E' || line[0] == 'F')) return true;
  if (!absl::StartsWith(line, "I ")) return true;  // not a log line: a crash message
  return absl::StrContains(line, "] epoch ") && absl::StrContains(line, " done:");
}

std::string ExitReason(int exit_code) {
  return exit_code < 0 ? absl::StrCat("killed by signal ", -exit_code) : absl::StrCat("exit code ", exit_code);
}

std::string FormatSeconds(double s) { return absl::StrFormat("%.1f s", s); }

}  // namespace pstrain

#pragma once

// One task's timeline in Chrome's Trace Event Format (the JSON that
// Perfetto and chrome://tracing load; Horovod's timeline uses it too):
//
//   ASSIGN_OR_RETURN(auto t, TraceWriter::Open("runs/x/timeline/worker0.json", 1, "worker:0"));
//   t->NameThread(1, "train");
//   t->Complete("compute", "train", 1, start_us, duration_us);
//
// The file is the format's array form: "[", one event per line, each line
// but the first beginning with ",", and "]" when the writer closes. The
// format allows the closing bracket to be missing, so a killed task's file
// still loads. Times are microseconds of the Unix clock (UnixMicros), so
// the timelines of the tasks of one machine share a clock; across
// machines they are as aligned as the machines' clocks.
// MergeTimelines puts the tasks' files into one trace (the launcher does
// at the end of a run).
//
// Errors name the file and are latched. Thread safety: none.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {

class TraceWriter {
 public:
  // Creates (truncates) `path`, its directory if missing, and names
  // process `pid` after `process_name` ("worker:0").
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Open(const std::string& path, int pid,
                                                           const std::string& process_name);
  ~TraceWriter();

  absl::Status NameThread(int tid, const std::string& name);
  // A complete event ("ph": "X"): `name` from ts_us for dur_us on thread
  // `tid`; `args_json` is "" or a JSON object's members ("\"step\": 3").
  absl::Status Complete(const std::string& name, const std::string& category, int tid,
                        int64_t ts_us, int64_t dur_us, const std::string& args_json = "");
  absl::Status Flush();

 private:
  TraceWriter(std::string path, std::FILE* file, int pid)
      : path_(std::move(path)), file_(file), pid_(pid) {}
  absl::Status Line(const std::string& event);

  std::string path_;
  std::FILE* file_;
  int pid_;
  bool first_ = true;
  absl::Status status_;
};

// Merges the tasks' timelines (files TraceWriter wrote, closed or not) into
// one JSON object trace {"traceEvents": [...], "displayTimeUnit": "ms"} at
// `out` (written atomically). Errors name the file.
absl::Status MergeTimelines(const std::vector<std::string>& inputs, const std::string& out);

}  // namespace pstrain

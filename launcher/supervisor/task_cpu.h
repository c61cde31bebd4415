#pragma once

// RUN_DIR/task_cpu.csv: the CPU time each task of a launched job has used,
// sampled by the launcher as the job runs (about five times a second, and
// once more when a task's process exits), so that a reader can take what a
// task used between two moments of training: `pstrain plan` divides a ps's
// CPU time over the training steps by the requests it served in them,
// leaving out its start, the chief's INIT and checkpoint, and the idle
// time of evaluations.
//
//   unix_time,task,cpu_seconds
//   1795757322.754229,ps:0,0.0213
//
// cpu_seconds is user + system time of every thread of the task's
// processes so far (a restarted task's earlier processes included), read
// from /proc/PID/task/*/schedstat (nanoseconds) while the process lives
// and from wait4's rusage when it ends.
//
// Thread safety: none.

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/csv.h"

namespace pstrain {

// The CPU seconds process `pid` has used so far, summed over its threads
// (those that have exited are not counted: use rusage for a whole
// process's end). NotFound once the process is gone.
absl::StatusOr<double> LiveProcessCpuSeconds(pid_t pid);

class TaskCpuLog {
 public:
  // RUN_DIR/task_cpu.csv, truncated, or added to with `append` (a resumed
  // run). Errors name the file.
  static absl::StatusOr<std::unique_ptr<TaskCpuLog>> Open(const std::string& run_dir, bool append);

  // One row: `task`'s CPU seconds now.
  absl::Status Record(const std::string& task, double cpu_seconds);

 private:
  explicit TaskCpuLog(std::unique_ptr<CsvWriter> csv) : csv_(std::move(csv)) {}
  std::unique_ptr<CsvWriter> csv_;
};

struct CpuSample {
  double unix_s = 0;
  double cpu_seconds = 0;
};

// RUN_DIR/task_cpu.csv read back: each task's samples in time order.
// NotFound without the file (a run that no launcher ran, or of an older
// version); DataLoss naming the file for a row that is not numbers.
absl::StatusOr<std::map<std::string, std::vector<CpuSample>>> ReadTaskCpu(const std::string& run_dir);

// The first and the last sample in [from, to] (Unix seconds); nullopt
// unless there are two distinct ones.
std::optional<std::pair<CpuSample, CpuSample>> SamplesWithin(const std::vector<CpuSample>& samples,
                                                             double from, double to);

}  // namespace pstrain

#pragma once

// A task of a launch as the Supervisor (supervisor.h) keeps it: its
// process, its log, its restarts and the faults it is under; and what the
// launcher reads in a task's output and in how it ended. For the
// supervisor's files only; launch.h is the front door.

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "common/child_process.h"
#include "common/cluster_spec.h"
#include "launcher/supervisor/launch.h"

namespace pstrain {

// One task the launcher starts, kept for the whole launch; a restart
// replaces its process.
struct SupervisedTask {
  SupervisedTask(TaskId task, SpawnOptions how, ChildProcess child,
                 std::unique_ptr<std::ofstream> log_file)
      : id(task), spawn(std::move(how)), process(std::move(child)), log(std::move(log_file)),
        is_ps(task.type == TaskType::kPs) {}

  TaskId id;
  SpawnOptions spawn;  // what it is started, and restarted, with
  ChildProcess process;
  std::string pending;  // output not yet ended by a newline
  std::unique_ptr<std::ofstream> log;
  bool is_ps = false;
  int restarts = 0;            // times started again
  int64_t restart_at_us = 0;   // > 0: dead, to be started again then (monotonic)
  int dead_exit_code = 0;      // how the process to be replaced ended
  double cpu_seconds = 0;      // used by its processes that have exited
  int64_t resume_at_us = 0;    // > 0: stopped by a fault, SIGCONT due then
  int64_t away_until_us = 0;   // > 0: lost by a fault, not restarted before then
  size_t stop_record = 0;      // that fault's index in LaunchEvents::faults
  int64_t leftover_term_us = 0;  // when it got SIGTERM as a leftover (StopLeftovers)
  // Of its current life: its last line that reports an error (glog's E
  // and F lines, a binary's "NAME: error: ..."), and its last line.
  std::string last_error;
  std::string last_line;
  // How its previous life failed (its exit code and last words; "" for
  // none, or a signal): the same failure twice in a row is not restarted
  // again, it would fail the same way (a python3 without torch).
  std::string previous_failure;
  bool failed_the_same_way = false;
};

// Whether `line` reports an error: a glog error line ("E1126 ...", "F..."),
// or ExitWith's "worker: error: ..." (common/exit_codes.h).
bool IsErrorLine(absl::string_view line);

// What a failed task last said, for the launcher's message: its last error
// line (else, when `or_last_line`, its last line), without glog's prefix,
// at most 400 characters and "..."; "" when it said nothing.
std::string LastWords(const SupervisedTask& t, bool or_last_line);

// Whether a task's line belongs in the progress view (--echo=progress):
// warnings, errors, what is not a log line (a crash message), and the
// chief's epoch lines.
bool IsProgressLine(const SupervisedTask& task, absl::string_view line);

// RUN_DIR/logs/<task>.log, "ps:1" as "ps-1".
std::string LogPath(const LaunchOptions& options, const TaskId& id);

// "exit code 1", "killed by signal 9": how a restarted task's process ended.
std::string ExitReason(int exit_code);

// "2.5 s": a time as the launcher's lines give it.
std::string FormatSeconds(double s);

}  // namespace pstrain

#pragma once

// One progress line per run (of `pstrain launch --echo=progress`, or of an
// experiment), from the chief's log lines and the tasks' states:
//
//   [2/3] async: epoch 2/3, step 120/235, 21804 img/s, ETA 9 s, last test acc 0.9712, 4 running, 42 s
//   [2/3] async: epoch 2/3, step 130/235, ..., 3 running, worker:1 restarting, 44 s
//
// On a terminal the line is rewritten in place as the chief's step lines go
// by (images/s: the chief's, times the workers; ETA: from the share of
// steps done); elsewhere (a log file, CI) one line is printed per finished
// epoch, so a long run shows where it is without a wall of task output.

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// What a chief's log line says about progress.
struct ProgressEvent {
  enum class Kind { kNone, kStep, kEpochDone };
  Kind kind = Kind::kNone;
  int epoch = 0;           // 1-based
  int epochs = 0;
  int64_t step = 0;        // kStep: 1-based step within the epoch
  int64_t steps = 0;
  double accuracy = 0;     // kEpochDone: test accuracy
  double images_per_sec = 0;  // kStep: the chief's own rate ("... img/s (this worker)")
};

// Parses the trainer's "epoch E/N step S/T loss ..." and "epoch E/N done:
// test accuracy A, ..." log lines; kNone for any other line.
ProgressEvent ParseProgressLine(absl::string_view line);

class RunProgress {
 public:
  // `prefix` starts every line ("[2/3] async"); `rewrite`: a terminal;
  // `workers`: how many train at the chief's rate (for images/s).
  RunProgress(std::FILE* out, bool rewrite, std::string prefix, int workers = 1);

  // Feed every line of the chief's output.
  void OnChiefLine(absl::string_view line);
  // A task's state (LaunchOptions::on_task_state): shown as counts, and by
  // name when restarting or failed.
  void OnTaskState(const std::string& task, const std::string& state);
  // The run ended: prints its last line (its figures, or why it failed).
  void Finish(const absl::Status& status, double test_accuracy, double images_per_sec);

 private:
  void Print(const std::string& text, bool final_line);

  std::FILE* out_;
  bool rewrite_;
  std::string prefix_;
  int64_t start_us_;
  // ", 4 running" or ", 3 running, worker:1 restarting"; "" before any.
  std::string TaskStates() const;
  void Redraw();

  std::string last_accuracy_;  // "test acc 0.9712" after the first epoch
  int workers_;
  std::string last_step_;      // the step part of the current line
  std::map<std::string, std::string> states_;  // by task
};

}  // namespace pstrain

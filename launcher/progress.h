#pragma once

// One progress line per run of an experiment, from the chief's log lines:
//
//   [2/3] async: epoch 2/3, test acc 0.9712, 42 s
//
// On a terminal the line is rewritten in place as the chief's step lines go
// by; elsewhere (a log file, CI) one line is printed per finished epoch, so
// a long experiment shows where it is without a wall of task output.

#include <cstdint>
#include <cstdio>
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
};

// Parses the trainer's "epoch E/N step S/T loss ..." and "epoch E/N done:
// test accuracy A, ..." log lines; kNone for any other line.
ProgressEvent ParseProgressLine(absl::string_view line);

class RunProgress {
 public:
  // `prefix` starts every line ("[2/3] async"); `rewrite`: a terminal.
  RunProgress(std::FILE* out, bool rewrite, std::string prefix);

  // Feed every line of the chief's output.
  void OnChiefLine(absl::string_view line);
  // The run ended: prints its last line (its figures, or why it failed).
  void Finish(const absl::Status& status, double test_accuracy, double images_per_sec);

 private:
  void Print(const std::string& text, bool final_line);

  std::FILE* out_;
  bool rewrite_;
  std::string prefix_;
  int64_t start_us_;
  std::string last_accuracy_;  // "test acc 0.9712" after the first epoch
};

}  // namespace pstrain

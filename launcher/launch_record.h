#pragma once

// RUN_DIR/launch.json (proto::LaunchRecord): the flags a launch ran with,
// and how `pstrain launch --resume=RUN_DIR` takes them back.
//
// The record holds every flag as "--name=value" (TrainOptions::ToArgs()
// and the launcher's own flags). On resume, each recorded flag that the
// command line does not give is set to its recorded value through the flag
// registry, so the ordinary flag parsing that follows yields the options of
// the original launch; a flag the command line gives must agree with the
// record, or it is refused naming it. Only the run's length (--epochs,
// --max_steps: a run may be resumed to train longer), what it prints
// (--echo, --log_every_steps) and --max_restarts may change.

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pstrain {

// RUN_DIR/launch.json.
std::string LaunchRecordPath(const std::string& run_dir);

// Writes the record atomically. Errors name the file.
absl::Status WriteLaunchRecord(const std::string& run_dir, const std::vector<std::string>& flags,
                               const std::string& command_line);

// Reads RUN_DIR/launch.json and applies it to this process's flags (see
// above); `given` are the flags on the command line (flags/task_flags.h's
// FlagsOnCommandLine).
// NotFound naming the file when RUN_DIR holds no record (not a run
// directory of `pstrain launch`); InvalidArgument naming the flag that
// disagrees; DataLoss for a damaged record.
absl::Status ApplyLaunchRecord(const std::string& run_dir, const std::set<std::string>& given);

}  // namespace pstrain

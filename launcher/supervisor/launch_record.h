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
//
// The record also holds the user's command (what followed "--") and the
// directory it ran in, so that a job of a script resumes with
// `pstrain launch --resume=RUN_DIR` alone, from any directory: the script
// runs again in the directory it first ran in (its relative paths mean
// what they meant). A command given after "--" on resume runs instead, in
// the launcher's directory, and the record then holds it.

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {

// RUN_DIR/launch.json.
std::string LaunchRecordPath(const std::string& run_dir);

// The user's command of a launch: argv (the program first, resolved in
// PATH) and the directory it runs in. Empty argv: the C++ worker.
struct LaunchedCommand {
  std::vector<std::string> argv;
  std::string working_dir;
};

// Writes the record atomically. Errors name the file.
absl::Status WriteLaunchRecord(const std::string& run_dir, const std::vector<std::string>& flags,
                               const std::string& command_line, const LaunchedCommand& command);

// What a record says was launched besides its flags.
struct RecordedLaunch {
  LaunchedCommand command;   // as recorded (its program maybe relative)
  std::string command_line;  // the launcher's whole command line, for people
};

// Reads RUN_DIR/launch.json and applies it to this process's flags (see
// above); `given` are the flags on the command line (flags/task_flags.h's
// FlagsOnCommandLine). Returns the rest of the record.
// NotFound naming the file when RUN_DIR holds no record (not a run
// directory of `pstrain launch`); InvalidArgument naming the flag that
// disagrees; DataLoss for a damaged record.
absl::StatusOr<RecordedLaunch> ApplyLaunchRecord(const std::string& run_dir,
                                                 const std::set<std::string>& given);

// The command a resume that gives none after "--" runs: the recorded one
// with its program's path made absolute (a relative one is the recorded
// directory's), in the recorded directory; empty argv for a job of the C++
// worker. DataLoss naming the file for a damaged command (no program, a
// relative directory); FailedPrecondition for a script's job recorded
// without its command (by an older pstrain), saying to give it again.
absl::StatusOr<LaunchedCommand> CommandToResume(const RecordedLaunch& recorded,
                                                const std::string& run_dir);

}  // namespace pstrain

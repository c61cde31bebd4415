#include "launcher/supervisor/launch_record.h"

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "proto/run_summary.pb.h"

namespace pstrain {
namespace {

// Flags a resumed run may give other values: how long it trains, and what
// it prints, how often the launcher restarts a task or how a task waits
// for messages (which change nothing in the job).
bool MayDiffer(absl::string_view name) {
  return name == "epochs" || name == "max_steps" || name == "echo" || name == "log_every_steps" ||
         name == "timeline" || name == "metrics" || name == "metrics_port" ||
         name == "metrics_host" || name == "isolate" || name == "link_rate" ||
         name == "max_restarts" || name == "restart_backoff_s" || name == "max_message_mb" ||
         name == "busy_poll_us";
}

// Applies one recorded "--name=value".
absl::Status ApplyFlag(const std::string& arg, const std::string& path,
                       const std::set<std::string>& given) {
  const size_t eq = arg.find('=');
  if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
    return absl::DataLossError(absl::StrCat(path, ": damaged: \"", arg, "\" is not --name=value"));
  }
  const std::string name = arg.substr(2, eq - 2);
  const std::string recorded = arg.substr(eq + 1);
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": records --", name, ", which this pstrain does not know (another version?)"));
  }
  if (given.count(name) == 0) {
    std::string error;
    if (!flag->ParseFrom(recorded, &error)) {
      return absl::DataLossError(absl::StrCat(path, ": damaged: --", name, "=", recorded, ": ", error));
    }
    return absl::OkStatus();
  }
  if (MayDiffer(name)) return absl::OkStatus();
  // Compare parsed values: "--lr=0.1" and "--lr=0.10" agree.
  const std::string value = flag->CurrentValue();
  std::string error;
  if (!flag->ParseFrom(recorded, &error) || flag->CurrentValue() != value) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, "=", value, " disagrees with the run being resumed, which ran with --", name,
        "=", recorded, " (", path, "); leave it out, or start a new run"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string LaunchRecordPath(const std::string& run_dir) { return run_dir + "/launch.json"; }

absl::Status WriteLaunchRecord(const std::string& run_dir, const std::vector<std::string>& flags,
                               const std::string& command_line, const LaunchedCommand& command) {
  proto::LaunchRecord record;
  for (const std::string& f : flags) record.add_flags(f);
  record.set_command(command_line);
  for (const std::string& arg : command.argv) record.add_user_command(arg);
  record.set_working_dir(command.working_dir);
  record.set_started_at(absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  RETURN_IF_ERROR(MakeDirs(run_dir));
  return WriteFileAtomic(LaunchRecordPath(run_dir), ToJson(record));
}

absl::StatusOr<RecordedLaunch> ApplyLaunchRecord(const std::string& run_dir,
                                                 const std::set<std::string>& given) {
  const std::string path = LaunchRecordPath(run_dir);
  auto text = ReadFileToString(path);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat(
        "--resume=", run_dir, ": no ", path, " (not a run directory of pstrain launch, or one "
        "from before launches were recorded)"));
  }
  RETURN_IF_ERROR(text.status());
  proto::LaunchRecord record;
  if (absl::Status s = ParseJsonMessage(*text, path, &record); !s.ok()) {
    return absl::DataLossError(absl::StrCat("damaged launch record: ", s.message()));
  }
  for (const std::string& arg : record.flags()) RETURN_IF_ERROR(ApplyFlag(arg, path, given));
  RecordedLaunch recorded;
  recorded.command.argv.assign(record.user_command().begin(), record.user_command().end());
  recorded.command.working_dir = record.working_dir();
  recorded.command_line = record.command();
  return recorded;
}

absl::StatusOr<LaunchedCommand> CommandToResume(const RecordedLaunch& recorded,
                                                const std::string& run_dir) {
  const std::string path = LaunchRecordPath(run_dir);
  LaunchedCommand command = recorded.command;
  if (command.argv.empty()) {
    if (absl::StrContains(recorded.command_line, " -- ")) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " records a launch of a command (\"", recorded.command_line,
          "\") but not the command itself (an older pstrain wrote it): give the command again "
          "after --"));
    }
    return command;  // the C++ worker
  }
  if (command.argv.front().empty() || command.working_dir.empty() ||
      command.working_dir.front() != '/') {
    return absl::DataLossError(absl::StrCat(
        path, ": damaged: a command without its program or an absolute directory (\"",
        command.working_dir, "\"); give the command again after --"));
  }
  std::string& program = command.argv.front();
  if (program.front() != '/') program = absl::StrCat(command.working_dir, "/", program);
  return command;
}

}  // namespace pstrain

#pragma once

// A child process whose stdout and stderr come back through one pipe (the
// launcher's tasks, and the processes tests start).
//
// No orphans: the child asks the kernel to SIGKILL it when its parent dies
// (PR_SET_PDEATHSIG), so even a SIGKILLed launcher leaves nothing behind;
// and every child runs in its own process group so that the parent alone
// decides how a Ctrl-C reaches it.

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

struct SpawnOptions {
  std::string binary;                    // absolute path
  std::vector<std::string> args;         // without argv[0]
  // "NAME=value", added to the parent's environment (replacing a variable
  // of that name there).
  std::vector<std::string> extra_env;
  // The child's working directory; "": the parent's. One that cannot be
  // entered fails the child as an exec failure does (exit code 127).
  std::string working_dir;
};

class ChildProcess {
 public:
  // Forks and execs. Internal error if fork or pipe fail; an exec failure
  // shows up as exit code 127 with the reason on the child's output.
  static absl::StatusOr<ChildProcess> Spawn(const SpawnOptions& options);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();  // closes the pipe; does not kill or reap

  pid_t pid() const { return pid_; }
  // Read end of the child's stdout+stderr; -1 once closed.
  int output_fd() const { return output_fd_; }
  void CloseOutput();

  // Sends `signo` to the child's process group. No-op once reaped.
  void Signal(int signo) const;

  // Reaps the child if it has exited (non-blocking). Returns true once it
  // has; exit_code() is then its status (-N when killed by signal N), and
  // cpu_seconds() the CPU time (user + system, every thread) it used.
  // `kill_group`: what the child left running in its process group (a
  // script's helper processes) is killed first, while the unreaped child
  // still holds the group's id.
  bool Reap(bool kill_group = false);
  bool exited() const { return exited_; }
  int exit_code() const { return exit_code_; }
  double cpu_seconds() const { return cpu_seconds_; }

 private:
  ChildProcess(pid_t pid, int output_fd) : pid_(pid), output_fd_(output_fd) {}

  pid_t pid_ = -1;
  int output_fd_ = -1;
  bool exited_ = false;
  int exit_code_ = 0;
  double cpu_seconds_ = 0;
};

// Runs a command to its end: its exit code (-N for signal N) and its
// output. DeadlineExceeded (the command killed) past `timeout_s`.
struct CommandResult {
  int exit_code = 0;
  std::string output;
};
absl::StatusOr<CommandResult> RunCommand(const SpawnOptions& options, double timeout_s);

// "exit code 1", "killed by signal 9 (Killed)".
std::string DescribeExit(int exit_code);

}  // namespace pstrain

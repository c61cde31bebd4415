#include "common/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <set>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status_macros.h"

extern char** environ;

namespace pstrain {
namespace {

// In the forked child: says why it could not start (on its output, which
// the parent reads) and exits 127 as a shell does.
[[noreturn]] void FailChild(absl::string_view what, const std::string& name) {
  const char* reason = strerror(errno);
  (void)!write(STDERR_FILENO, what.data(), what.size());
  (void)!write(STDERR_FILENO, name.data(), name.size());
  (void)!write(STDERR_FILENO, ": ", 2);
  (void)!write(STDERR_FILENO, reason, strlen(reason));
  (void)!write(STDERR_FILENO, "\n", 1);
  _exit(127);
}

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(const SpawnOptions& options, pid_t parent, int write_fd,
                            char* const* argv, char* const* envp) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died before prctl
  setpgid(0, 0);
  dup2(write_fd, STDOUT_FILENO);
  dup2(write_fd, STDERR_FILENO);
  if (write_fd > STDERR_FILENO) close(write_fd);
  // Default dispositions for the signals the parent may handle itself.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) {
    FailChild("cannot enter ", options.working_dir);
  }
  execve(options.binary.c_str(), argv, envp);
  FailChild("cannot exec ", options.binary);
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const SpawnOptions& options) {
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls are allowed.
  std::vector<std::string> argv_strings = {options.binary};
  argv_strings.insert(argv_strings.end(), options.args.begin(), options.args.end());
  // extra_env replaces the parent's variables of the same names (a child
  // reads the first of two).
  std::set<std::string> replaced;
  for (const std::string& e : options.extra_env) replaced.insert(e.substr(0, e.find('=')));
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (replaced.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), options.extra_env.begin(), options.extra_env.end());
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<char*> envp = CStrings(env_strings);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    close(fds[0]);
    ExecChild(options, parent, fds[1], argv.data(), envp.data());
  }
  close(fds[1]);
  setpgid(pid, pid);  // also in the child: whichever runs first wins the race
  return ChildProcess(pid, fds[0]);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    CloseOutput();
    pid_ = other.pid_;
    output_fd_ = other.output_fd_;
    exited_ = other.exited_;
    exit_code_ = other.exit_code_;
    cpu_seconds_ = other.cpu_seconds_;
    other.pid_ = -1;
    other.output_fd_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() { CloseOutput(); }

void ChildProcess::CloseOutput() {
  if (output_fd_ >= 0) close(output_fd_);
  output_fd_ = -1;
}

void ChildProcess::Signal(int signo) const {
  if (pid_ > 0 && !exited_) kill(-pid_, signo);
}

bool ChildProcess::Reap(bool kill_group) {
  if (exited_ || pid_ <= 0) return exited_;
  if (kill_group) {
    siginfo_t info = {};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != pid_) {
      return false;
    }
    kill(-pid_, SIGKILL);
  }
  int status = 0;
  struct rusage usage = {};
  const pid_t r = wait4(pid_, &status, WNOHANG, &usage);
  if (r != pid_) return false;
  exited_ = true;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  cpu_seconds_ = seconds(usage.ru_utime) + seconds(usage.ru_stime);
  return true;
}

std::string DescribeExit(int exit_code) {
  if (exit_code >= 0) return absl::StrCat("exit code ", exit_code);
  return absl::StrCat("killed by signal ", -exit_code, " (", strsignal(-exit_code), ")");
}

absl::StatusOr<CommandResult> RunCommand(const SpawnOptions& options, double timeout_s) {
  ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Spawn(options));
  const int64_t deadline = MonotonicMicros() + static_cast<int64_t>(timeout_s * 1e6);
  CommandResult result;
  while (child.output_fd() >= 0) {
    const int64_t left_ms = (deadline - MonotonicMicros()) / 1000;
    if (left_ms <= 0) {
      child.Signal(SIGKILL);
      while (!child.Reap()) usleep(1000);
      return absl::DeadlineExceededError(absl::StrCat(options.binary, " took more than ", timeout_s,
                                                      " s: ", result.output));
    }
    pollfd p = {child.output_fd(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000))) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(child.output_fd(), buf, sizeof(buf));
    if (n > 0) {
      result.output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      child.CloseOutput();
    }
  }
  while (!child.Reap()) {
    if (MonotonicMicros() > deadline) child.Signal(SIGKILL);
    usleep(1000);
  }
  result.exit_code = child.exit_code();
  return result;
}

}  // namespace pstrain

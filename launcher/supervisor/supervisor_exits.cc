// How the tasks of a launch end, and the launch with them: a task done, a
// task restarted (launch.h's restart policy), a failure that stops every
// task, leftovers stopped once training is done, the deadline.

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/exit_codes.h"
#include "launcher/supervisor/launch.h"
#include "launcher/supervisor/supervisor.h"

namespace pstrain {

double RestartBackoffSeconds(const LaunchOptions& options, int restart) {
  double s = options.restart_backoff_s;
  for (int i = 1; i < restart && s < kMaxRestartBackoffS; ++i) s *= 2;
  // The cap holds the doubling back, not a longer first wait asked for.
  return std::max(options.restart_backoff_s, std::min(s, kMaxRestartBackoffS));
}

void Supervisor::StopAll(const std::string& reason) {
  if (failure_.empty()) failure_ = reason;
  for (SupervisedTask& t : tasks_) t.restart_at_us = 0;  // no restarts once stopping
  if (stop_us_ != 0) return;
  stop_us_ = MonotonicMicros();
  for (SupervisedTask& t : tasks_) {
    Resume(t);  // a stopped task could not act on SIGTERM
    t.process.Signal(SIGTERM);
  }
}

void Supervisor::OnExit(SupervisedTask& t) {
  t.cpu_seconds += t.process.cpu_seconds();
  RecordCpu(t, t.cpu_seconds);
  HandleExit(t);
  const int code = t.process.exit_code();
  State(t.id, code == 0 ? "done" : t.restart_at_us != 0 ? "restarting" : "ended");
}

void Supervisor::HandleExit(SupervisedTask& t) {
  t.resume_at_us = 0;  // a stopped process that died needs no SIGCONT
  const int code = t.process.exit_code();
  if (code != 0) {
    if (stop_us_ != 0) return;
    if (chief_done_ && (t.restarts > 0 || t.leftover_term_us != 0)) {
      return Print(absl::StrCat(t.id.ToString(), t.restarts > 0 ? " (restarted)" : "", " ended (",
                                ExitReason(code), ") after training was done; not a failure"));
    }
    if (MayRestart(t, code)) return ScheduleRestart(t, code);
    FailOn(t, code);
  } else if (spec_.IsChief(t.id)) {
    OnTrainingDone();
  } else if (t.is_ps && !chief_done_ && early_ps_exit_.empty()) {
    early_ps_exit_ = absl::StrCat(t.id.ToString(), " exited (code 0) before training finished; see ",
                                  LogPath(options_, t.id));
    early_ps_exit_us_ = MonotonicMicros();
  }
}

// A task waiting for its restart is not needed any more.
void Supervisor::OnTrainingDone() {
  chief_done_ = true;
  chief_done_us_ = MonotonicMicros();
  for (SupervisedTask& t : tasks_) {
    if (t.restart_at_us == 0) continue;
    t.restart_at_us = 0;
    Print(absl::StrCat(t.id.ToString(), " not restarted: training is done"));
  }
}

// A task restarted late may come up when training is done and wait for its
// peers (shut down) until its own timeout; so may a worker that was frozen
// (or declared dead) and rejoined just as the job ended, once every ps has
// exited. After chief_exit_grace_s it is stopped, SIGTERM then SIGKILL, and
// its end is not a failure (OnExit): as a TFJob succeeds with its chief.
void Supervisor::StopLeftovers() {
  if (!chief_done_ || stop_us_ != 0 || SecondsSince(chief_done_us_) <= options_.chief_exit_grace_s) return;
  bool every_ps_exited = true;
  for (const SupervisedTask& t : tasks_) every_ps_exited = every_ps_exited && (!t.is_ps || t.process.exited());
  for (SupervisedTask& t : tasks_) {
    if (t.process.exited() || t.is_ps) continue;
    if (t.restarts == 0 && !every_ps_exited) continue;
    if (t.leftover_term_us == 0) {
      Print(absl::StrCat(t.id.ToString(), t.restarts > 0 ? " (restarted)" : "",
                         " is still running when training is done: stopping it"));
      Resume(t);
      t.process.Signal(SIGTERM);
      t.leftover_term_us = MonotonicMicros();
    } else if (SecondsSince(t.leftover_term_us) > options_.stop_grace_s) {
      t.process.Signal(SIGKILL);
    }
  }
}

// Not once training is done or a ps was shut down (nothing left to rejoin),
// nor for a bad configuration (it would fail the same way again).
bool Supervisor::MayRestart(const SupervisedTask& t, int exit_code) const {
  return exit_code != kExitBadConfig && !chief_done_ && early_ps_exit_.empty() &&
         t.restarts < options_.max_restarts;
}

void Supervisor::ScheduleRestart(SupervisedTask& t, int exit_code) {
  double backoff = RestartBackoffSeconds(options_, t.restarts + 1);
  // A lost task comes back no sooner than its fault says.
  if (t.away_until_us != 0) backoff = std::max(backoff, (t.away_until_us - MonotonicMicros()) * 1e-6);
  t.away_until_us = 0;
  t.dead_exit_code = exit_code;
  t.restart_at_us = MonotonicMicros() + static_cast<int64_t>(backoff * 1e6);
  // Whether it failed as before is known once its output is read to the
  // end (RestartDue): said as a condition, not a promise.
  Print(absl::StrCat(t.id.ToString(), " died (", ExitReason(exit_code), "); restarting it (",
                     t.restarts + 1, " of ", options_.max_restarts, ") in ", FormatSeconds(backoff),
                     t.restarts > 0 && exit_code > 0 ? ", unless it failed as it did before" : ""));
}

std::string Supervisor::FailureOf(const SupervisedTask& t, int exit_code) const {
  std::string what = absl::StrCat(t.id.ToString(), " failed (", DescribeExit(exit_code), ")");
  if (exit_code == kExitBadConfig) {
    absl::StrAppend(&what, ", a bad configuration or input: not restarted");
  } else if (t.failed_the_same_way) {
    absl::StrAppend(&what, " the same way as before its restart: not restarted again, it would "
                           "fail so again");
  } else if (chief_done_) {
    absl::StrAppend(&what, " after training was done: not restarted");
  } else if (!early_ps_exit_.empty()) {
    absl::StrAppend(&what, " after a ps exited: not restarted");
  } else if (options_.max_restarts > 0) {
    absl::StrAppend(&what, " after it was restarted ", t.restarts, t.restarts == 1 ? " time" : " times",
                    " (--max_restarts=", options_.max_restarts, ")");
  }
  return absl::StrCat(what, "; see ", LogPath(options_, t.id));
}

void Supervisor::FailOn(SupervisedTask& t, int exit_code) {
  if (failure_.empty()) {
    failed_task_ = static_cast<int>(&t - tasks_.data());
    failed_code_ = exit_code;
  }
  StopAll(FailureOf(t, exit_code));
}

void Supervisor::RestartDue() {
  const int64_t now = MonotonicMicros();
  for (SupervisedTask& t : tasks_) {
    // The dead process's last output is read to its end first.
    if (t.restart_at_us == 0 || now < t.restart_at_us || t.process.output_fd() >= 0) continue;
    // An exit with an error (not a signal: kills and faults are not the
    // task's doing) the same as its previous life's is the task's own.
    const std::string words = LastWords(t, true);
    const std::string failure =
        t.dead_exit_code > 0 && !words.empty() ? absl::StrCat(t.dead_exit_code, ": ", words) : "";
    if (!failure.empty() && failure == t.previous_failure) {
      t.restart_at_us = 0;
      t.failed_the_same_way = true;
      FailOn(t, t.dead_exit_code);
      continue;
    }
    t.previous_failure = failure;
    Restart(t);
  }
}

void Supervisor::Restart(SupervisedTask& t) {
  t.restart_at_us = 0;
  ++t.restarts;
  t.last_error.clear();
  t.last_line.clear();
  const std::string reason = ExitReason(t.dead_exit_code);
  *t.log << "----- restarted (" << t.restarts << " of " << options_.max_restarts << ") after: " << reason
         << " -----\n";
  t.log->flush();
  auto process = ChildProcess::Spawn(t.spawn);
  if (!process.ok()) {
    return StopAll(absl::StrCat("cannot restart ", t.id.ToString(), ": ", process.status().message()));
  }
  t.process = *std::move(process);
  proto::TaskRestart r;
  r.set_task(t.id.ToString());
  r.set_at(absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  r.set_after_s(SecondsSince(launch_us_));
  r.set_exit_code(t.dead_exit_code);
  r.set_reason(reason);
  events_->restarts.push_back(std::move(r));
  Print(absl::StrCat("restarted ", t.id.ToString(), " (pid ", t.process.pid(), ")"));
  State(t.id, "running");
}

void Supervisor::CheckEarlyPsExit() {
  if (stop_us_ == 0 && !chief_done_ && !early_ps_exit_.empty() &&
      SecondsSince(early_ps_exit_us_) > options_.chief_exit_grace_s) {
    StopAll(early_ps_exit_);
  }
}

// A task waiting for its restart has not exited: it is coming back.
bool Supervisor::AllExited() const {
  for (const SupervisedTask& t : tasks_) {
    if (t.restart_at_us != 0 || !t.process.exited() || t.process.output_fd() >= 0) return false;
  }
  return true;
}

void Supervisor::CheckPsAfterWorkers() {
  if (stop_us_ != 0) return;
  for (const SupervisedTask& t : tasks_) {
    if (!t.is_ps && (!t.process.exited() || t.restart_at_us != 0)) return;
  }
  if (workers_done_us_ == 0) workers_done_us_ = MonotonicMicros();
  if (SecondsSince(workers_done_us_) > options_.ps_exit_grace_s) {
    StopAll(absl::StrCat("the workers finished but a ps did not exit within ",
                         options_.ps_exit_grace_s, " s (the chief never shut it down?)"));
  }
}

void Supervisor::CheckDeadline() {
  if (options_.deadline_s <= 0 || stop_us_ != 0 || SecondsSince(launch_us_) <= options_.deadline_s) return;
  deadline_exceeded_ = true;
  StopAll(absl::StrCat("did not finish within ", options_.deadline_s, " s: presumed hung"));
}

}  // namespace pstrain

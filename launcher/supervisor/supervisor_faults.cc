// The faults of a launch (LaunchOptions::faults): each sent when due, by
// time or by the chief's progress, and a stopped task resumed.

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "launcher/supervisor/launch.h"
#include "launcher/supervisor/supervisor.h"

namespace pstrain {

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKill:
      return "kill";
    case FaultKind::kStop:
      return "stop";
    case FaultKind::kLose:
      return "lose";
  }
  return "?";
}

const char* FaultSignalName(FaultKind kind) { return kind == FaultKind::kStop ? "SIGSTOP" : "SIGKILL"; }

std::string DescribeFault(const Fault& f) {
  std::string out = absl::StrFormat("%s %s at ", FaultKindName(f.kind), f.task.ToString());
  if (f.at_progress >= 0) absl::StrAppendFormat(&out, "%.0f%% of training", 100 * f.at_progress);
  if (f.at_progress >= 0 && f.at_s > 0) absl::StrAppend(&out, " or ");
  if (f.at_progress < 0 || f.at_s > 0) absl::StrAppendFormat(&out, "%.1f s", f.at_s);
  if (f.kind != FaultKind::kKill) absl::StrAppendFormat(&out, " for %.1f s", f.stop_s);
  return out;
}

void Supervisor::InjectDueFaults() {
  if (started_us_ == 0) return;
  const double now = SecondsSince(started_us_);
  // In the order given (PlanFaults orders a run's faults by their time),
  // one per pass of the loop: two due at once (one progress line can pass
  // both) go at least a pass apart, so that the second usually finds the
  // first's effect (a killed task reaped, hence not stopped as well).
  const bool one_gone = std::find(fault_due_done_.begin(), fault_due_done_.end(), true) !=
                        fault_due_done_.end();
  for (size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = faults_[i];
    const bool by_time = f.at_progress < 0 || (f.at_s > 0 && one_gone);
    const bool due = (by_time && f.at_s <= now) || (f.at_progress >= 0 && progress_ >= f.at_progress);
    if (fault_due_done_[i] || !due) continue;
    fault_due_done_[i] = true;
    Inject(f);
    return;
  }
}

void Supervisor::Inject(const Fault& f) {
  const double now = SecondsSince(started_us_);
  std::string what = absl::StrCat("fault: ", FaultSignalName(f.kind), " to ", f.task.ToString(), " at ",
                                  FormatSeconds(now));
  if (f.at_progress >= 0) absl::StrAppendFormat(&what, " (%.0f%% of training)", 100 * progress_);
  SupervisedTask* task = nullptr;
  for (SupervisedTask& t : tasks_) {
    if (t.id == f.task) task = &t;
  }
  if (stop_us_ != 0 || task == nullptr || task->process.exited() || task->restart_at_us != 0 ||
      (f.kind == FaultKind::kStop && task->resume_at_us != 0)) {
    return Print(absl::StrCat(what, " not sent: ", stop_us_ != 0 ? "the launch is stopping" : "it is not running"));
  }
  task->process.Signal(f.kind == FaultKind::kStop ? SIGSTOP : SIGKILL);
  events_->faults.push_back({f, now, task->process.pid(), -1, progress_});
  if (f.kind == FaultKind::kLose) {
    task->away_until_us = MonotonicMicros() + static_cast<int64_t>(f.stop_s * 1e6);
  }
  if (f.kind == FaultKind::kStop) {
    task->resume_at_us = MonotonicMicros() + static_cast<int64_t>(f.stop_s * 1e6);
    task->stop_record = events_->faults.size() - 1;
  }
  if (f.kind == FaultKind::kStop) return Print(absl::StrCat(what, " (SIGCONT in ", FormatSeconds(f.stop_s), ")"));
  if (f.kind == FaultKind::kLose) return Print(absl::StrCat(what, " (lost: away ", FormatSeconds(f.stop_s), ")"));
  Print(what);
}

void Supervisor::Resume(SupervisedTask& t) {
  if (t.resume_at_us == 0) return;
  t.resume_at_us = 0;
  t.process.Signal(SIGCONT);
  const double now = SecondsSince(started_us_);
  events_->faults[t.stop_record].resumed_s = now;
  Print(absl::StrCat("fault: SIGCONT to ", t.id.ToString(), " at ", FormatSeconds(now)));
}

void Supervisor::ResumeDue() {
  const int64_t now = MonotonicMicros();
  for (SupervisedTask& t : tasks_) {
    if (t.resume_at_us != 0 && now >= t.resume_at_us) Resume(t);
  }
}

}  // namespace pstrain

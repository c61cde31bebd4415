#pragma once

// The engine of Launch (launch.h): the tasks of one launch as child
// processes, from their start until every one has exited. It reads their
// output (prefixed, echoed as options.echo says, kept in RUN_DIR/logs/),
// restarts a task that fails while it may, sends the faults, samples the
// tasks' CPU into RUN_DIR/task_cpu.csv, follows the chief's progress, and
// stops everything on a failure, the deadline or options.cancel. launch.h
// states the policy; this class carries it out. Its methods are in
// supervisor.cc (start, output, the loop), supervisor_exits.cc (how tasks
// end: done, restarted, failed, stopped) and supervisor_faults.cc.
//
// Thread safety: none; one thread calls StartAll, then Wait.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/cancellation.h"
#include "common/child_process.h"
#include "common/cluster_spec.h"
#include "launcher/supervisor/launch.h"
#include "launcher/supervisor/netns_harness.h"
#include "launcher/supervisor/supervised_task.h"
#include "launcher/supervisor/task_cpu.h"

namespace pstrain {

// The tasks the launcher starts (not an evaluator), in the order it starts
// them: ps tasks first, so that workers find them listening.
std::vector<TaskId> StartedTasks(const ClusterSpec& spec);

class Supervisor {
 public:
  // `security_arg` (--secret_file=... or --insecure) goes to every task;
  // `events` (not null) gets the faults and restarts.
  // `metrics_ports` (by task, "ps:0"): each task's --metrics_port; empty:
  // none.
  // `net` (null: none): each task runs in its host's namespace.
  Supervisor(const LaunchOptions& options, const ClusterSpec& spec, std::string security_arg,
             std::map<std::string, int> metrics_ports, const NetnsHarness* net,
             LaunchEvents* events);

  // Makes RUN_DIR/logs/ and starts every task, in StartedTasks' order.
  // Internal, naming the task, when one cannot be started: the tasks
  // already running are being stopped then, and Wait reaps them.
  absl::Status StartAll();
  // Supervises until every task has exited (a task waiting for its
  // restart has not). OK when the launch succeeded; otherwise Cancelled
  // (options.cancel), DeadlineExceeded or Aborted, naming the failure as
  // launch.h says.
  absl::Status Wait();
  // nullptr for a task of the spec that the launcher does not start (an evaluator).
  const SupervisedTask* FindTask(const TaskId& id) const;

 private:
  // supervisor.cc: the tasks started, their output, the loop.
  SpawnOptions SpawnFor(const TaskId& id) const;
  void Print(const std::string& text) const;
  void Pump(SupervisedTask& task);
  void EmitLine(SupervisedTask& task, absl::string_view line);
  void ReapAll();
  // Tells options_.on_task_state.
  void State(const TaskId& id, const std::string& state);
  // Follows the chief's progress lines (progress_).
  void TrackProgress(const SupervisedTask& task, absl::string_view line);
  // RUN_DIR/task_cpu.csv: every live task's CPU time, when due.
  void SampleCpu();
  void RecordCpu(const SupervisedTask& task, double cpu_seconds);

  // supervisor_exits.cc: how the tasks end, and the launch.
  void OnExit(SupervisedTask& task);
  void HandleExit(SupervisedTask& task);
  void OnTrainingDone();
  void StopLeftovers();
  bool MayRestart(const SupervisedTask& task, int exit_code) const;
  void ScheduleRestart(SupervisedTask& task, int exit_code);
  std::string FailureOf(const SupervisedTask& task, int exit_code) const;
  // Stops everything for `task`'s failure, the launch's if it is the first.
  void FailOn(SupervisedTask& task, int exit_code);
  void RestartDue();
  void Restart(SupervisedTask& task);
  void StopAll(const std::string& reason);
  bool AllExited() const;
  void CheckEarlyPsExit();
  void CheckPsAfterWorkers();
  void CheckDeadline();

  // supervisor_faults.cc: the faults sent, a stopped task resumed.
  void InjectDueFaults();
  void Inject(const Fault& fault);
  void Resume(SupervisedTask& task);
  void ResumeDue();

  const LaunchOptions& options_;
  const Cancellation* const cancel_;  // options_.cancel, or NeverCancelled()
  const ClusterSpec& spec_;
  const std::string security_arg_;
  const std::map<std::string, int> metrics_ports_;
  const NetnsHarness* const net_;
  LaunchEvents* const events_;
  std::vector<Fault> faults_;  // options_.faults
  std::vector<bool> fault_due_done_;  // [fault] sent, or passed over (its task was down)
  // The share of the training steps done, from the chief's progress lines
  // (the highest yet: a restarted chief resumes behind it).
  double progress_ = 0;
  std::vector<SupervisedTask> tasks_;
  int64_t launch_us_ = 0;     // when StartAll began (monotonic)
  int64_t started_us_ = 0;    // when every task had been started; 0 before
  std::string failure_;       // first failure, named
  int failed_task_ = -1;      // the task whose failure failure_ is (index), -1: none
  int failed_code_ = 0;       // and its exit code
  int64_t stop_us_ = 0;       // when StopAll sent SIGTERM (monotonic), 0 before
  bool killed_ = false;
  bool deadline_exceeded_ = false;
  int64_t workers_done_us_ = 0;
  bool chief_done_ = false;    // the chief exited 0: training is done
  int64_t chief_done_us_ = 0;
  std::string early_ps_exit_;  // the first ps that exited 0 before that, named
  int64_t early_ps_exit_us_ = 0;
  std::unique_ptr<TaskCpuLog> cpu_log_;  // null: none (it could not be written)
  int64_t cpu_sampled_us_ = 0;           // the last sample (monotonic)
};

}  // namespace pstrain

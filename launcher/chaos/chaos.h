#pragma once

// `pstrain chaos`: does training survive any single failure? One
// undisturbed baseline run, then N runs of the same job, each with one or
// two faults (a task SIGKILLed, or SIGSTOPped for a while) at random times,
// the launcher restarting what dies (--max_restarts); then one report:
//
//   OUT/baseline/, OUT/run-001/ ...   each run's directory
//   OUT/report.md                     the fault plan and what each run did
//   OUT/report.json                   the same, for scripts
//
// A run that does not finish within run_timeout_s is a hang
// (DeadlineExceeded); one that ends in any other error is a failed run.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"
#include "launcher/chaos/chaos_report.h"
#include "launcher/experiments/experiment.h"
#include "launcher/supervisor/launch.h"

namespace pstrain {

struct ChaosOptions {
  // Every run's training (mode, max_steps, seed, checkpoints, ...), out_dir,
  // max_restarts. The fault plan is drawn from experiment.train.seed.
  ExperimentOptions experiment;
  std::string cluster_spec_path;
  int runs = 5;                          // runs with faults, after the baseline
  std::vector<FaultKind> fault_kinds = {FaultKind::kKill, FaultKind::kStop};
  int max_faults_per_run = 2;            // 1 or 2 (2: a quarter of the runs get two)
  // The fault targets: task types ("ps", "chief", "worker") or tasks
  // ("worker:1"); empty: every task of the spec. "chief" names the spec's
  // chief, worker:0 in a spec without one (which is also a "worker").
  std::vector<std::string> fault_targets;
  // The hang bound, for the baseline too; 0: none for the baseline, and 4 x
  // its wall time + 60 s for the others.
  double run_timeout_s = 0;
};

// What the fault plan is drawn from.
struct FaultPlanOptions {
  uint64_t seed = 1;
  int runs = 5;
  std::vector<FaultKind> kinds = {FaultKind::kKill, FaultKind::kStop};
  int max_faults_per_run = 2;
  std::vector<TaskId> tasks;     // the targets
  double baseline_s = 0;         // the baseline's wall time
  double peer_timeout_s = 60;    // a stop lasts up to twice this
};

// The faults of each run, a pure function of `options`: per run, one fault,
// or two with probability 1/4 when max_faults_per_run >= 2; its kind
// uniform over `kinds`, its target uniform over `tasks`, its moment a share
// u of the run's training steps (Fault::at_progress) uniform in [10%, 80%]
// (for a run's second fault: or u x baseline_s seconds after start if that
// comes first, which lands it while the first stalls the run), a stop's
// length uniform in [1 s, 2 x peer_timeout_s]. A run's faults are in time
// order. (The moment is not u x baseline_s alone: a run faster than its
// baseline could end before its fault.)
// REQUIRES: runs >= 0, kinds and tasks not empty.
std::vector<std::vector<Fault>> PlanFaults(const FaultPlanOptions& options);

// The tasks of `spec` that `targets` (as ChaosOptions::fault_targets)
// name, in the spec's order. InvalidArgument naming an item that names no
// task of the spec.
absl::StatusOr<std::vector<TaskId>> FaultTargets(const ClusterSpec& spec, const std::vector<std::string>& targets);

// "--faults=kill,stop" -> its kinds. InvalidArgument naming a bad one.
absl::StatusOr<std::vector<FaultKind>> ParseFaultKinds(const std::string& text);

// Runs the baseline and every planned run, then writes the report. Errors,
// before any faulty run: InvalidArgument / NotFound for bad options or a bad
// spec, Aborted when the baseline run fails. Cancelled when
// experiment.cancel fires.
// Runs that hang or fail are not errors here: they are counted in the
// result (and the report), for the caller to judge.
absl::StatusOr<ChaosResult> RunChaos(const ChaosOptions& options);

}  // namespace pstrain

#pragma once

// What `pstrain plan` learns from calibration runs: run directories of
// `pstrain launch` (or of `pstrain scale`'s cells), read back into the
// numbers of launcher/plan/plan_model.h. Nothing is assumed that a run did not
// measure:
//  - compute (b_i, a, g) from steps_worker*.csv: compute_ms - ahead_ms,
//    ahead_ms, and the gap between steps, over the steady steps (every
//    worker past a tenth of its steps), of the runs of the planned model in
//    which every task had a core (workers + ps <= the host's cores; if
//    none had, those with the fewest workers, and a note says so);
//  - the ps's CPU per request from task_cpu.csv: a ps's CPU time between
//    two samples inside the steady window over the requests of that window
//    (every worker step is one request to each ps), against the request's
//    bytes;
//  - a worker's CPU per step beyond its compute, from task_cpu.csv, and
//    how much more it takes where workers shared cores (runs of the
//    planned model with more workers than cores);
//  - the worker's remaining latency (lat): what the model leaves
//    unexplained of the run's measured step time, from the runs whose time
//    no resource bounds;
//  - for runs without task_cpu.csv (an older launcher's), the ps's cost
//    and lat from the step logs of the 1-worker runs instead (Calibrate);
//  - the bytes from the shard plan and --wire of each run, the link and
//    the security from what its launcher recorded in summary.json
//    (--isolate=netns, --link_rate, --insecure): CURVE's cost is in the
//    ps's and the worker's costs per byte, so a plan of the other security
//    needs runs of it.
// Runs of different models calibrate the costs per request and per byte
// together (a model of another size separates the fixed cost from the cost
// per byte); the compute is the planned model's own.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/plan/plan_model.h"
#include "launcher/reporting/run_record.h"

namespace pstrain {

// The model whose bytes a step moves: a named network or a parameter count.
struct ModelShape {
  std::string model;        // "cnn_large"; ignored when params > 0
  int64_t params = 0;       // > 0: one flat tensor of this many floats
  std::string wire = "f32";
  std::string shard_strategy = "balanced";
  // A script's job (`pstrain launch -- python3 train.py`: a model the plan
  // does not know, named "pytorch (train.py)"): the bytes one worker's
  // step moved to and from all the ps, as its run's ps tasks counted them
  // (summary.json's shards), dense tensors and embedding rows alike.
  // Every ps takes 1/P of them: the balanced cut of the dense tensors, the
  // rows' hash of their ids.
  double step_push_bytes = 0;  // > 0: measured
  double step_pull_bytes = 0;
};

// Per shard, the bytes of one worker's push (--wire) and pull (f32) of a
// step, and where a named model's shard begins in its flat vector (empty
// for a parameter count or a script's job: --overlap's leads are a named
// model's). InvalidArgument for an unknown model, wire or strategy, or more
// ps than the plan can cut.
absl::Status StepBytes(const ModelShape& shape, int num_ps, std::vector<double>* push,
                       std::vector<double>* pull, std::vector<int64_t>* begins);

// The model a script's job (pstrain.torch) records in summary.json.
inline constexpr char kScriptModel[] = "pytorch";

// One calibration run, read back.
struct CalibrationRun {
  std::string run_dir;
  RunRecord record;
  ModelShape shape;
  bool sync = true;
  bool insecure = false;
  std::string link_rate;        // "" when the run's links were free
  double link_bytes_per_s = 0;
  LinkKind link = LinkKind::kNic;
  int host_cores = 1;
  PlanCell cell;                // the run's own shape, as the model sees it
  double steady_images_per_second = 0;
  double compute_ms = 0;        // mean compute_ms of the steady steps
  double comm_ms = 0;
  double wait_ms = 0;  // of comm_ms, the ps held the push back (sync's barrier); -1: not recorded
  double worker_cpu_ms = -1;    // a worker's CPU per step; -1: no task_cpu.csv
  std::vector<double> ps_cpu_ms_per_request;  // [ps]; empty: no task_cpu.csv
};

// Reads RUN_DIR (summary.json, steps_worker*.csv, task_cpu.csv). InvalidArgument naming the directory and what is missing
// or unusable (not a finished run of `pstrain launch`, too few steps, an
// update mode other than sync and async); `default_host_cores` when the
// summary does not say how many cores its host had.
absl::StatusOr<CalibrationRun> ReadCalibrationRun(const std::string& run_dir, int default_host_cores);

// The ps's share of a 1-worker run's push/pull time where the costs come
// from step logs (runs without task_cpu.csv): CURVE encrypts each byte at
// one end of the connection and decrypts it at the other, at the same
// cost; the 2-core host's task_cpu.csv measured the ps's and a worker's
// CPU per MB of a step within 12% of each other (docs/planning.md).
inline constexpr double kDefaultPsShare = 0.5;

// The calibration for planning `model` (its compute) with `insecure`'s
// security (the costs), from `runs`. The costs come from the runs with
// that security that recorded their tasks' CPU (task_cpu.csv); where none
// did, from the step logs of its 1-worker runs without a link limit,
// `ps_share` (in (0, 1]) of their push/pull time the ps's
// (launcher/plan/plan_model.h). InvalidArgument when no run is of `model`, or
// none has the security asked for with either. `notes` gets one sentence
// for each thing taken for want of a better run.
absl::StatusOr<PlanCalibration> Calibrate(const std::vector<CalibrationRun>& runs, const std::string& model,
                                          bool insecure, double ps_share, std::vector<std::string>* notes);

}  // namespace pstrain

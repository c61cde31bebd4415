#pragma once

// `pstrain plan`: images/s of cluster shapes, predicted before any of them
// runs, from runs that already did (launcher/plan/plan_calibration.h) and the
// model of launcher/plan/plan_model.h:
//
//   pstrain plan --calibrate=RUN_DIR [--calibrate=RUN_DIR ...] --workers=1,2,4,...,64
//       --ps=1,2,4,8 [--mode=sync,async] [--link_rate=10gbit] [--link_kind=nic|netns]
//       [--placement=one_host|host_per_task] [--host_cores=N] [--model=NAME | --params=N]
//       [--compute_ms=X] [--wire=f32|bf16|fp16|topk:R] [--insecure] --out=DIR
//
// writes
//   DIR/plan.md    the question, the calibration, a table per mode (images/s,
//                  the step's split, the binding resource, each ps's core
//                  and link utilisation, async staleness, the time to
//                  --target_accuracy), where another ps pays, which mode
//                  and ps count reach the target first, and the plot
//   DIR/plan.json  proto/plan.proto's PlanRecord: one object per cell in
//                  "cells"
//   DIR/plots/     images/s against workers, one line per ps count, the
//                  cells bound by a ps (core or link) or by the host's CPU
//                  or a worker's link marked (gnuplot)
//
// With --check=RUN_DIR[,...] it predicts instead the cells that those runs
// measured (each run's own workers, ps, mode, link, host, model and wire)
// and writes DIR/check.md, a table of cell, predicted, measured and error
// that it also prints: how benchmarks/plan_check.sh validates the model.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "launcher/plan/plan_calibration.h"
#include "launcher/plan/plan_model.h"
#include "proto/plan.pb.h"

namespace pstrain {

struct PlanOptions {
  std::vector<std::string> calibrate;        // run directories, at least one
  std::vector<int> workers = {1, 2, 4, 8, 16, 32, 64};
  std::vector<int> ps = {1, 2, 4, 8};
  std::vector<bool> modes = {true, false};   // sync (true) and/or async
  std::string link_rate;                     // "10gbit"; "": no link limit
  LinkKind link = LinkKind::kNic;
  Placement placement = Placement::kOneHost;
  int host_cores = 0;                        // 0: the calibration host's
  std::string model;                         // "": the calibration runs' (one model)
  int64_t params = 0;                        // > 0: a model of this many floats, the compute of `model`
  double compute_ms = 0;                     // > 0: the compute per step (mean), the measured spread scaled
  std::string wire;                          // "": the calibration runs'
  std::optional<bool> insecure;              // unset: the calibration runs' security (CURVE if mixed)
  double ps_share = kDefaultPsShare;         // of a 1-worker push/pull, the ps's (runs without task_cpu.csv)
  double target_accuracy = 0.97;             // time to it, where a calibration run reached it
  std::vector<std::string> check;            // held-out run directories (--check)
  std::string out;
  std::string gnuplot = "gnuplot";
  std::string command_line;                  // for the report
  int default_host_cores = 1;                // for runs that do not record theirs: --runs_host_cores, or this machine's
};

// "sync,async" -> {true, false}, in the order given, duplicates dropped.
// InvalidArgument naming --mode for anything else (ssp included).
absl::StatusOr<std::vector<bool>> ParsePlanModes(const std::string& text);
absl::StatusOr<LinkKind> ParseLinkKind(const std::string& text);    // nic | netns
absl::StatusOr<Placement> ParsePlacement(const std::string& text);  // one_host | host_per_task
const char* LinkKindName(LinkKind kind);
const char* PlacementName(Placement placement);

// Every value of --NAME on the command line, in order, each split at
// commas: "--calibrate=a --calibrate b,c" -> {a, b, c}. (A repeated flag
// keeps only its last value in Abseil's parsing.)
std::vector<std::string> RepeatedFlagValues(int argc, char** argv, const std::string& name);

// InvalidArgument naming the flag for options `pstrain plan` cannot
// answer: no --calibrate, a directory that does not exist, no --out, a
// rate tc would refuse, --params below 1 or with tensor_aligned shards,
// --host_cores, --runs_host_cores, --compute_ms or --ps_share out of
// range, an unknown --model or --wire.
absl::Status ValidatePlanOptions(const PlanOptions& options);

// What the plan says, before it is written out.
struct Plan {
  proto::PlanRecord record;
  PlanCalibration calibration;
  std::vector<std::string> notes;
};

// Reads the calibration runs and predicts every cell (modes x ps x
// workers). InvalidArgument for options or runs it cannot use (see
// ValidatePlanOptions, Calibrate).
absl::StatusOr<Plan> MakePlan(const PlanOptions& options);

// A run's measured images/s against the plan's prediction for its cell.
struct CheckRow {
  std::string run_dir;
  std::string cell;             // "cnn_large sync 1 ps 2 w 1gbit netns"
  bool calibration = false;     // the run is one of the calibration runs
  double predicted = 0;         // images/s
  double measured = 0;          // steady images/s (SteadyImagesPerSecond)
  double error = 0;             // predicted / measured - 1
  std::string bound;
  // A worker's CPU per step in the run over what the calibration expects
  // of it (with the sharing of cores): above 1, the host ran slower than
  // when it calibrated (other load, a busy neighbour). A run without
  // task_cpu.csv gives its compute time per step (the step log's) over the
  // calibration's instead. 0: neither recorded.
  double cpu_ratio = 0;
  // The prediction with every CPU time of the calibration scaled by
  // cpu_ratio: what the model says at the speed the host ran this run at,
  // which tells a slow (or fast) host from a wrong model. 0: no cpu_ratio.
  double predicted_at_run_speed = 0;
};

// Predicts each run of `runs` in its own cell from `calibration`
// (Calibrate's `ps_share`). InvalidArgument when a run's model or security
// has no calibration.
absl::StatusOr<std::vector<CheckRow>> CheckRuns(const std::vector<CalibrationRun>& calibration,
                                                const std::vector<CalibrationRun>& runs, double ps_share,
                                                std::vector<std::string>* notes);

// The rows as a markdown table, one line per cell (the runs of the same
// cell together: the error of their mean, and each run's), and a line
// counting the held-out cells within `tolerance`, as predicted and at
// each run's own speed (where the runs recorded it).
std::string CheckTable(const std::vector<CheckRow>& rows, double tolerance);

// Runs MakePlan (or, with --check, CheckRuns) and writes OUT/plan.md,
// OUT/plan.json and OUT/plots/ (OUT/check.md).
// Errors name the file; a missing gnuplot is a note in plan.md, not an
// error.
absl::Status RunPlan(const PlanOptions& options);

}  // namespace pstrain

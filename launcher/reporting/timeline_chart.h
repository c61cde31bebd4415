#pragma once

// `pstrain timeline`: chosen steps of a run's timeline (RUN_DIR/timeline.json,
// written with --timeline) drawn as a Gantt chart by gnuplot, one row per
// thread of each worker (its training loop, and one per ps it waits on), so
// a person sees where the steps went (waiting in sync, a slow shard)
// without a trace viewer.
//
//   pstrain timeline RUN_DIR --steps=100:103 --out=steps.png
//
// The window runs from the start of the first chosen step to the end of
// the last, over all workers; every span in it is drawn (compute,
// push_pull, each ps's reply, evaluate, checkpoint, rejoin), coloured by
// kind, x in milliseconds from the window's start.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pstrain {

struct TimelineChartOptions {
  std::string run_dir;
  int64_t first_step = 0;
  int64_t last_step = 0;  // inclusive
  std::string out;        // FILE.png; NAME.gp and NAME.dat are written beside it
  std::string gnuplot = "gnuplot";
};

// "A:B" (or "A") into first and last step. InvalidArgument otherwise.
absl::Status ParseStepRange(const std::string& text, TimelineChartOptions* options);

// Draws the chart. NotFound naming timeline.json when the run has none;
// InvalidArgument when no step of the range is in it (naming the steps it
// has) or `out` does not end in .png.
absl::Status DrawTimelineChart(const TimelineChartOptions& options);

}  // namespace pstrain

#pragma once

// The chief's books of one epoch, for every client of the worker runtime
// (the C++ Trainer, a script's ScriptWorker): where the epoch began on the
// runtime's clock, the examples this worker trained on and its losses, and
// how the epoch ends: its row of epochs.csv and the line that says it.
//
//   meter.Begin(runtime->Mark());
//   ... each step: meter.AddStep(examples, loss);
//   const ClosedEpoch closed = meter.End(epoch, epochs, workers, runtime->Mark(), eval, images);
//   LOG(INFO) << closed.line;                   // "epoch 1/3 done: test accuracy ..."
//   RETURN_IF_ERROR(runtime->RecordEpoch(closed.record));
//
// End begins the next epoch where this one ended. Thread safety: none.

#include <cstdint>
#include <optional>
#include <string>

#include "worker/metrics_recorder.h"
#include "worker/run_summary.h"

namespace pstrain {

// A point on the runtime's clock: the global step, the shards' (lowest)
// version and the training seconds (evaluations excluded).
struct EpochMark {
  int64_t step = 0;
  int64_t version = 0;
  double train_seconds = 0;
};

struct ClosedEpoch {
  EpochRecord record;
  std::string line;
};

class EpochMeter {
 public:
  // Starts an epoch at `start` with nothing counted.
  void Begin(const EpochMark& start);

  // A step of this worker: its examples, and its loss, which the epoch's
  // mean train loss counts when the step had examples (nullopt: the step
  // has none to count, as a script that passes no loss).
  void AddStep(int64_t examples, std::optional<double> loss);

  const EpochMark& start() const { return start_; }
  // Examples of this worker's steps since Begin.
  int64_t examples() const { return examples_; }

  // Ends epoch `epoch` (1-based, of `epochs`) at `end`, with `eval` its
  // evaluation and `images` the examples every worker trained on in it:
  // its row and the line "epoch E/N done: ..." (`workers`: the job's
  // worker count, 0 when it changes: dynamic workers). Begins the next
  // epoch at `end`.
  ClosedEpoch End(int epoch, int epochs, int workers, const EpochMark& end,
                  const EvalPoint& eval, double images);

 private:
  EpochMark start_;
  int64_t examples_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
};

}  // namespace pstrain

#pragma once

// Every metrics sink of a worker behind one recorder, so that the training
// loop says what happened (a step, an evaluation, an epoch) and not where
// it goes:
//  - RUN_DIR/steps_worker<rank>.csv, and for the chief evals.csv and
//    epochs.csv (their columns: docs/formats.md, "The run directory");
//  - TensorBoard event files in RUN_DIR/tb/worker<rank>/ (one directory per
//    worker, so TensorBoard shows each as a run with the same tags):
//      train/loss, train/staleness, train/images_per_sec,
//      train/compute_ms, train/comm_ms       every step
//      train/learning_rate                   when opened
//      test/accuracy, test/loss              every evaluation (chief)
//      epoch/images_per_sec, epoch/train_loss  every epoch (chief; all workers)
//    x axis: the global step; each event carries its wall time, so
//    TensorBoard's relative-time axis gives accuracy against time.
//  - with `timeline`, RUN_DIR/timeline/worker<rank>[.<time>].json (Chrome
//    trace events, common/trace_writer.h): per step a "step" span on the
//    "train" thread holding "compute" (batch, forward, backward) and
//    "push_pull" (to the reply of the last shard), which add up to it
//    exactly; inside "compute", "forward <layer>" and "backward <layer>"
//    per layer (CPU model); and per shard a "push_pull ps:k" span on thread "ps:k" (to
//    that shard's reply); spans for evaluations, checkpoints and rejoins
//    (RecordSpan). A restarted worker writes a file of its own.
//  - with a MetricsServer (--metrics_port), Prometheus families, each with
//    the task's identity labels (common/metrics_server.h):
//      pstrain_step_seconds{phase}   histogram: compute (batch, forward,
//                                    backward), communication (push/pull:
//                                    the wire and the ps's work), waiting
//                                    (the ps held the push back for a sync
//                                    version or the SSP bound)
//      pstrain_steps_total, pstrain_images_total, pstrain_pushes_dropped_total,
//      pstrain_sent_bytes_total, pstrain_received_bytes_total   counters
//      pstrain_push_staleness        histogram of each push's staleness
//      pstrain_images_per_second (over the last second or more),
//      pstrain_training_loss, pstrain_global_step, pstrain_epoch,
//      pstrain_learning_rate         gauges
//      pstrain_test_accuracy, pstrain_test_loss, pstrain_evaluations_total
//                                    the chief's evaluations
//    These are recorded with or without a run_dir.
//  - the progress line (glog, every log_every_steps global steps): "epoch
//    E/N step S/M loss L  R img/s (this worker)", which `pstrain launch`'s
//    progress view reads (launcher/supervisor/progress.h).
// With an empty run_dir nothing is written. Errors name the file; a full
// disk fails the call that hit it (the run's metrics are part of its
// result).
//
// Thread safety: none; the training thread owns it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/csv.h"
#include "common/event_file_writer.h"
#include "common/trace_writer.h"
#include "models/layer_span.h"

namespace pstrain {

class MetricsServer;

struct MetricsOptions {
  std::string run_dir;  // '' = record nothing
  int rank = 0;
  bool chief = false;   // also evals.csv, epochs.csv and the test scalars
  bool append = false;  // add to the CSVs of the run this one continues
  double learning_rate = 0;
  bool timeline = false;
  std::string task_name;  // "chief:0", "worker:1": the timeline's process name
  // Where the Prometheus families live (null: none). Must outlive the
  // recorder.
  MetricsServer* server = nullptr;
  int log_every_steps = 0;  // the progress line; 0: none
  int epochs = 0;           // of the job, for the progress line
};

struct StepRecord {
  int64_t step = 0;      // the global step this push was for
  int epoch = 0;         // 0-based
  int64_t step_in_epoch = 0;    // 0-based, of steps_per_epoch
  int64_t steps_per_epoch = 0;
  double worker_images_per_sec = 0;  // this worker's since its first step
  int64_t unix_us = 0;   // when the step ended
  double elapsed_s = 0;  // since the worker started
  double loss = 0;
  int examples = 0;
  int64_t version = 0;  // of the parameters the gradient was computed on
  int64_t min_clock = 0;
  int64_t staleness = 0;
  bool dropped = false;
  // The step's wall time, split: computing (compute_ms) and waiting for
  // the ps (comm_ms). Forward ahead (--forward_ahead) runs the next step's
  // forward inside this step's push/pull: it counts in compute_ms, and
  // ahead_ms says how much of compute_ms it was.
  double compute_ms = 0;
  double comm_ms = 0;
  double wait_ms = 0;                        // of comm_ms: the longest a shard held the push back
  double ahead_ms = 0;                       // of compute_ms: run while the push/pull was under way
  std::vector<int64_t> shard_reply_unix_us;  // [shard] when its reply came (timeline)
  // With a timeline: the model's forward and backward spans per layer
  // (models::Model::set_layer_spans); null or empty: none.
  const std::vector<models::LayerSpan>* layers = nullptr;
  int64_t sent_bytes = 0;      // this worker's requests so far (PsClient)
  int64_t received_bytes = 0;  // and replies
};

struct EvalRecord {
  int64_t step = 0;
  int epoch = 0;
  double train_seconds = 0;
  double loss = 0;
  double accuracy = 0;
  bool epoch_end = false;
};

struct EpochRecord {
  int epoch = 0;     // 1-based, as printed
  int64_t step = 0;  // the global step at its end
  int64_t steps = 0;
  double train_seconds = 0;
  double train_loss = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double images_per_sec = 0;  // all workers
};

class MetricsRecorder {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsRecorder>> Open(const MetricsOptions& options);
  ~MetricsRecorder();

  absl::Status RecordStep(const StepRecord& r);
  absl::Status RecordEval(const EvalRecord& r);
  absl::Status RecordEpoch(const EpochRecord& r);
  // A span of the timeline ("evaluate", "checkpoint", "rejoin") on the
  // train thread; nothing without a timeline.
  absl::Status RecordSpan(const std::string& name, int64_t start_unix_us, int64_t end_unix_us,
                          const std::string& args_json = "");
  // Everything so far reaches the files.
  absl::Status Flush();

 private:
  struct Prometheus;  // the instruments (metrics_recorder.cc)

  MetricsRecorder();
  absl::Status TraceStep(const StepRecord& r);

  std::unique_ptr<CsvWriter> steps_csv_;
  std::unique_ptr<CsvWriter> evals_csv_;
  std::unique_ptr<CsvWriter> epochs_csv_;
  std::unique_ptr<EventFileWriter> events_;
  std::unique_ptr<TraceWriter> trace_;
  std::unique_ptr<Prometheus> prometheus_;
  int num_shard_threads_ = 0;  // "ps:k" threads named so far
  int log_every_steps_ = 0;
  int epochs_ = 0;
  int64_t last_flush_us_ = 0;
};

}  // namespace pstrain

#include "worker/metrics_recorder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// TensorBoard is read while the run goes on: its files are flushed at
// least this often, and at every evaluation.
constexpr int64_t kEventFlushUs = 5'000'000;
// The timeline's threads: the training loop, and one per shard's replies.
constexpr int kTrainTid = 1;
constexpr int kShardTid0 = 100;

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsRecorder>> MetricsRecorder::Open(const MetricsOptions& o) {
  std::unique_ptr<MetricsRecorder> m(new MetricsRecorder());
  if (o.run_dir.empty()) return m;
  ASSIGN_OR_RETURN(
      m->steps_csv_,
      CsvWriter::Open(absl::StrCat(o.run_dir, "/steps_worker", o.rank, ".csv"),
                      {"step", "epoch", "unix_time", "elapsed_s", "loss", "examples", "version",
                       "min_clock", "staleness", "dropped", "compute_ms", "comm_ms"},
                      o.append));
  const std::string task = absl::StrCat("worker", o.rank);
  ASSIGN_OR_RETURN(m->events_, EventFileWriter::Open(absl::StrCat(o.run_dir, "/tb/", task), task));
  RETURN_IF_ERROR(m->events_->AddScalar("train/learning_rate", 0, o.learning_rate));
  m->last_flush_us_ = MonotonicMicros();
  if (o.timeline) {
    // A worker that continues a run (restarted, resumed) keeps the file of
    // its earlier process: a name of its own.
    const std::string name =
        o.append ? absl::StrCat(task, ".", UnixMicros(), ".json") : absl::StrCat(task, ".json");
    ASSIGN_OR_RETURN(m->trace_,
                     TraceWriter::Open(absl::StrCat(o.run_dir, "/timeline/", name), o.rank + 1,
                                       o.task_name.empty() ? task : o.task_name));
    RETURN_IF_ERROR(m->trace_->NameThread(kTrainTid, "train"));
  }
  if (!o.chief) return m;
  ASSIGN_OR_RETURN(m->evals_csv_, CsvWriter::Open(absl::StrCat(o.run_dir, "/evals.csv"),
                                                  {"step", "epoch", "train_seconds", "test_loss",
                                                   "test_accuracy", "epoch_end"},
                                                  o.append));
  ASSIGN_OR_RETURN(m->epochs_csv_, CsvWriter::Open(absl::StrCat(o.run_dir, "/epochs.csv"),
                                                   {"epoch", "steps", "train_seconds", "train_loss",
                                                    "test_loss", "test_accuracy", "images_per_sec"},
                                                   o.append));
  return m;
}

absl::Status MetricsRecorder::RecordStep(const StepRecord& r) {
  if (steps_csv_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(steps_csv_->Row(
      {absl::StrCat(r.step), absl::StrCat(r.epoch), absl::StrFormat("%.6f", r.unix_us * 1e-6),
       CsvNumber(r.elapsed_s), CsvNumber(r.loss), absl::StrCat(r.examples), absl::StrCat(r.version),
       absl::StrCat(r.min_clock), absl::StrCat(r.staleness), r.dropped ? "1" : "0",
       CsvNumber(r.compute_ms), CsvNumber(r.comm_ms)}));
  const double wall = r.unix_us * 1e-6;
  const double step_ms = r.compute_ms + r.comm_ms;
  RETURN_IF_ERROR(events_->AddScalar("train/loss", r.step, r.loss, wall));
  RETURN_IF_ERROR(
      events_->AddScalar("train/staleness", r.step, static_cast<double>(r.staleness), wall));
  if (step_ms > 0) {
    RETURN_IF_ERROR(
        events_->AddScalar("train/images_per_sec", r.step, r.examples * 1e3 / step_ms, wall));
  }
  RETURN_IF_ERROR(events_->AddScalar("train/compute_ms", r.step, r.compute_ms, wall));
  RETURN_IF_ERROR(events_->AddScalar("train/comm_ms", r.step, r.comm_ms, wall));
  RETURN_IF_ERROR(TraceStep(r));
  if (MonotonicMicros() - last_flush_us_ > kEventFlushUs) RETURN_IF_ERROR(Flush());
  return absl::OkStatus();
}

absl::Status MetricsRecorder::TraceStep(const StepRecord& r) {
  if (trace_ == nullptr) return absl::OkStatus();
  const int64_t compute_us = std::llround(r.compute_ms * 1e3);
  const int64_t comm_us = std::llround(r.comm_ms * 1e3);
  const int64_t start = r.unix_us - compute_us - comm_us;
  const int64_t pushed = start + compute_us;
  RETURN_IF_ERROR(trace_->Complete(
      "step", "train", kTrainTid, start, compute_us + comm_us,
      absl::StrFormat("\"step\": %d, \"epoch\": %d, \"loss\": %.6g, \"staleness\": %d", r.step,
                      r.epoch, r.loss, r.staleness)));
  RETURN_IF_ERROR(trace_->Complete("compute", "train", kTrainTid, start, compute_us));
  RETURN_IF_ERROR(trace_->Complete("push_pull", "comm", kTrainTid, pushed, comm_us));
  for (size_t k = 0; k < r.shard_reply_unix_us.size(); ++k) {
    const int tid = kShardTid0 + static_cast<int>(k);
    if (static_cast<int>(k) >= num_shard_threads_) {
      RETURN_IF_ERROR(trace_->NameThread(tid, absl::StrCat("ps:", k)));
      num_shard_threads_ = static_cast<int>(k) + 1;
    }
    const int64_t reply = std::clamp(r.shard_reply_unix_us[k], pushed, r.unix_us);
    RETURN_IF_ERROR(
        trace_->Complete(absl::StrCat("push_pull ps:", k), "comm", tid, pushed, reply - pushed));
  }
  return absl::OkStatus();
}

absl::Status MetricsRecorder::RecordSpan(const std::string& name, int64_t start_unix_us,
                                         int64_t end_unix_us, const std::string& args_json) {
  if (trace_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(trace_->Complete(name, name, kTrainTid, start_unix_us,
                                   end_unix_us - start_unix_us, args_json));
  return trace_->Flush();
}

absl::Status MetricsRecorder::RecordEval(const EvalRecord& r) {
  if (evals_csv_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(
      evals_csv_->Row({absl::StrCat(r.step), absl::StrCat(r.epoch), CsvNumber(r.train_seconds),
                       CsvNumber(r.loss), CsvNumber(r.accuracy), r.epoch_end ? "1" : "0"}));
  RETURN_IF_ERROR(events_->AddScalar("test/accuracy", r.step, r.accuracy));
  RETURN_IF_ERROR(events_->AddScalar("test/loss", r.step, r.loss));
  RETURN_IF_ERROR(evals_csv_->Flush());
  return Flush();
}

absl::Status MetricsRecorder::RecordEpoch(const EpochRecord& r) {
  if (epochs_csv_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(
      epochs_csv_->Row({absl::StrCat(r.epoch), absl::StrCat(r.steps), CsvNumber(r.train_seconds),
                        CsvNumber(r.train_loss), CsvNumber(r.test_loss), CsvNumber(r.test_accuracy),
                        CsvNumber(r.images_per_sec)}));
  RETURN_IF_ERROR(events_->AddScalar("epoch/images_per_sec", r.step, r.images_per_sec));
  RETURN_IF_ERROR(events_->AddScalar("epoch/train_loss", r.step, r.train_loss));
  RETURN_IF_ERROR(epochs_csv_->Flush());
  return Flush();
}

absl::Status MetricsRecorder::Flush() {
  if (steps_csv_ == nullptr) return absl::OkStatus();
  last_flush_us_ = MonotonicMicros();
  RETURN_IF_ERROR(steps_csv_->Flush());
  if (trace_ != nullptr) RETURN_IF_ERROR(trace_->Flush());
  return events_->Flush();
}

}  // namespace pstrain

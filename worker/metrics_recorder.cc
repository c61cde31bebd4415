#include "worker/metrics_recorder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/metrics_server.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"

namespace pstrain {
namespace {

// TensorBoard is read while the run goes on: its files are flushed at
// least this often, and at every evaluation.
constexpr int64_t kEventFlushUs = 5'000'000;
// The timeline's threads: the training loop, and one per shard's replies.
constexpr int kTrainTid = 1;
constexpr int kShardTid0 = 100;

// pstrain_images_per_second is the rate over at least this long.
constexpr int64_t kRateWindowUs = 1'000'000;

}  // namespace

struct MetricsRecorder::Prometheus {
  explicit Prometheus(MetricsServer& server, bool chief, double learning_rate) {
    prometheus::Registry& r = server.registry();
    const auto& id = server.identity();
    auto& step_seconds =
        prometheus::BuildHistogram()
            .Name("pstrain_step_seconds")
            .Help("Step time by phase: compute (batch, forward, backward), communication "
                  "(push/pull on the wire and in the ps), waiting (held back by the ps for a "
                  "sync version or the SSP bound)")
            .Labels(id)
            .Register(r);
    const prometheus::Histogram::BucketBoundaries seconds = {
        0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};
    compute = &step_seconds.Add({{"phase", "compute"}}, seconds);
    communication = &step_seconds.Add({{"phase", "communication"}}, seconds);
    waiting = &step_seconds.Add({{"phase", "waiting"}}, seconds);
    auto counter = [&](const char* name, const char* help) -> prometheus::Counter& {
      return prometheus::BuildCounter().Name(name).Help(help).Labels(id).Register(r).Add({});
    };
    auto gauge = [&](const char* name, const char* help) -> prometheus::Gauge& {
      return prometheus::BuildGauge().Name(name).Help(help).Labels(id).Register(r).Add({});
    };
    steps = &counter("pstrain_steps_total", "Training steps this worker has pushed");
    images = &counter("pstrain_images_total", "Training images this worker computed gradients on");
    pushes_dropped = &counter("pstrain_pushes_dropped_total",
                              "Pushes of this worker a shard did not apply (stale, late)");
    sent_bytes = &counter("pstrain_sent_bytes_total", "Bytes of requests this worker sent");
    received_bytes = &counter("pstrain_received_bytes_total", "Bytes of replies this worker received");
    staleness = &prometheus::BuildHistogram()
                     .Name("pstrain_push_staleness")
                     .Help("Staleness of this worker's pushes on arrival (the largest over shards)")
                     .Labels(id)
                     .Register(r)
                     .Add({}, prometheus::Histogram::BucketBoundaries{0, 1, 2, 4, 8, 16, 32});
    images_per_second = &gauge("pstrain_images_per_second",
                               "Training images per second of this worker, over the last second");
    loss = &gauge("pstrain_training_loss", "Mean loss of this worker's last batch");
    global_step = &gauge("pstrain_global_step", "The global step of this worker's last push");
    epoch = &gauge("pstrain_epoch", "The epoch this worker is in (0-based)");
    gauge("pstrain_learning_rate", "The learning rate the job's shards apply").Set(learning_rate);
    if (!chief) return;
    test_accuracy = &gauge("pstrain_test_accuracy", "Accuracy on the test set at the last evaluation");
    test_loss = &gauge("pstrain_test_loss", "Mean loss on the test set at the last evaluation");
    evaluations = &counter("pstrain_evaluations_total", "Evaluations on the test set");
  }

  void Step(const StepRecord& rec) {
    const double wait_s = std::clamp(rec.wait_ms, 0.0, rec.comm_ms) * 1e-3;
    compute->Observe(rec.compute_ms * 1e-3);
    communication->Observe(rec.comm_ms * 1e-3 - wait_s);
    waiting->Observe(wait_s);
    steps->Increment();
    images->Increment(rec.examples);
    if (rec.dropped) pushes_dropped->Increment();
    // PsClient's totals: a restarted client starts again from 0.
    sent_bytes->Increment(static_cast<double>(Delta(rec.sent_bytes, last_sent)));
    received_bytes->Increment(static_cast<double>(Delta(rec.received_bytes, last_received)));
    last_sent = rec.sent_bytes;
    last_received = rec.received_bytes;
    staleness->Observe(static_cast<double>(rec.staleness));
    loss->Set(rec.loss);
    global_step->Set(static_cast<double>(rec.step));
    epoch->Set(rec.epoch);
    const int64_t now = MonotonicMicros();
    if (window_start_us == 0) window_start_us = now;
    window_images += rec.examples;
    if (now - window_start_us >= kRateWindowUs) {
      images_per_second->Set(window_images * 1e6 / static_cast<double>(now - window_start_us));
      window_start_us = now;
      window_images = 0;
    }
  }

  // What a running total added since `last`; a total below it is a new
  // PsClient's (a rejoin), counting from 0.
  static int64_t Delta(int64_t total, int64_t last) { return total >= last ? total - last : total; }

  prometheus::Histogram* compute;
  prometheus::Histogram* communication;
  prometheus::Histogram* waiting;
  prometheus::Histogram* staleness;
  prometheus::Counter* steps;
  prometheus::Counter* images;
  prometheus::Counter* pushes_dropped;
  prometheus::Counter* sent_bytes;
  prometheus::Counter* received_bytes;
  prometheus::Gauge* images_per_second;
  prometheus::Gauge* loss;
  prometheus::Gauge* global_step;
  prometheus::Gauge* epoch;
  prometheus::Gauge* test_accuracy = nullptr;
  prometheus::Gauge* test_loss = nullptr;
  prometheus::Counter* evaluations = nullptr;
  int64_t last_sent = 0;
  int64_t last_received = 0;
  int64_t window_start_us = 0;
  int64_t window_images = 0;
};

MetricsRecorder::MetricsRecorder() = default;
MetricsRecorder::~MetricsRecorder() = default;

absl::StatusOr<std::unique_ptr<MetricsRecorder>> MetricsRecorder::Open(const MetricsOptions& o) {
  std::unique_ptr<MetricsRecorder> m(new MetricsRecorder());
  m->log_every_steps_ = o.log_every_steps;
  m->epochs_ = o.epochs;
  if (o.server != nullptr) {
    m->prometheus_ = std::make_unique<Prometheus>(*o.server, o.chief, o.learning_rate);
  }
  if (o.run_dir.empty()) return m;
  ASSIGN_OR_RETURN(m->steps_csv_,
                   CsvWriter::Open(absl::StrCat(o.run_dir, "/steps_worker", o.rank, ".csv"),
                                   {"step", "epoch", "unix_time", "elapsed_s", "loss", "examples",
                                    "version", "min_clock", "staleness", "dropped", "compute_ms",
                                    "comm_ms", "wait_ms", "ahead_ms"},
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
  if (prometheus_ != nullptr) prometheus_->Step(r);
  if (log_every_steps_ > 0 && (r.step + 1) % log_every_steps_ == 0) {
    LOG(INFO) << absl::StrFormat("epoch %d/%d step %d/%d loss %.4f  %.0f img/s (this worker)",
                                 r.epoch + 1, epochs_, r.step_in_epoch + 1, r.steps_per_epoch,
                                 r.loss, r.worker_images_per_sec);
  }
  if (steps_csv_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(steps_csv_->Row(
      {absl::StrCat(r.step), absl::StrCat(r.epoch), absl::StrFormat("%.6f", r.unix_us * 1e-6),
       CsvNumber(r.elapsed_s), CsvNumber(r.loss), absl::StrCat(r.examples), absl::StrCat(r.version),
       absl::StrCat(r.min_clock), absl::StrCat(r.staleness), r.dropped ? "1" : "0",
       CsvNumber(r.compute_ms), CsvNumber(r.comm_ms), CsvNumber(r.wait_ms),
       CsvNumber(r.ahead_ms)}));
  // Each row reaches the file at once: a killed worker's log ends at its
  // last step (one write a step, against a step's milliseconds).
  RETURN_IF_ERROR(steps_csv_->Flush());
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
  // The phases as they ran: a forward ahead ran inside the push/pull.
  const int64_t ahead_us = std::llround(r.ahead_ms * 1e3);
  const int64_t compute_us = std::llround(r.compute_ms * 1e3) - ahead_us;
  const int64_t comm_us = std::llround(r.comm_ms * 1e3) + ahead_us;
  const int64_t start = r.unix_us - compute_us - comm_us;
  const int64_t pushed = start + compute_us;
  RETURN_IF_ERROR(trace_->Complete(
      "step", "train", kTrainTid, start, compute_us + comm_us,
      absl::StrFormat("\"step\": %d, \"epoch\": %d, \"loss\": %s, \"staleness\": %d", r.step,
                      r.epoch, JsonNumberOrNull(r.loss), r.staleness)));
  RETURN_IF_ERROR(trace_->Complete("compute", "train", kTrainTid, start, compute_us));
  if (r.layers != nullptr) {
    // The layers read the Unix clock themselves; the step's spans derive
    // from one Unix reading and monotonic durations. A microsecond apart at
    // most (more if the wall clock is slewed meanwhile): clamped into their
    // compute span (a forward ahead: into the push/pull), so the trace nests.
    for (const models::LayerSpan& l : *r.layers) {
      const int64_t from = l.ahead ? pushed : start, to = l.ahead ? r.unix_us : pushed;
      const int64_t begin = std::clamp(l.start_unix_us, from, to);
      const int64_t end = std::clamp(l.start_unix_us + l.duration_us, begin, to);
      RETURN_IF_ERROR(trace_->Complete(absl::StrCat(l.backward ? "backward " : "forward ", *l.layer),
                                       "layer", kTrainTid, begin, end - begin));
    }
  }
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
  if (prometheus_ != nullptr && prometheus_->test_accuracy != nullptr) {
    prometheus_->test_accuracy->Set(r.accuracy);
    prometheus_->test_loss->Set(r.loss);
    prometheus_->evaluations->Increment();
  }
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

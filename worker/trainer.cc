#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/dropout_mask.h"
#include "worker/evaluation.h"

namespace pstrain {
namespace {

constexpr int kMinEvalBatch = 256;

std::vector<TensorSlot> Slots(const std::vector<models::ParamSpec>& specs) {
  std::vector<TensorSlot> slots;
  for (const auto& s : specs) slots.push_back({s.name, s.size});
  return slots;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const ClusterSpec& cluster,
                                                         const TrainOptions& options,
                                                         const TransportSecurity& security,
                                                         const Cancellation* cancel) {
  RETURN_IF_ERROR(WorkerRuntime::CheckOptions(cluster, options));
  std::unique_ptr<Trainer> trainer(new Trainer(cluster, options, security, cancel));
  RETURN_IF_ERROR(trainer->Setup());
  return trainer;
}

Trainer::Trainer(const ClusterSpec& cluster, const TrainOptions& options,
                 const TransportSecurity& security, const Cancellation* cancel)
    : cluster_(cluster),
      task_(*cluster.task()),
      options_(options),
      security_(security),
      cancel_(cancel),
      rank_(cluster.WorkerRank(*cluster.task())),
      num_workers_(cluster.num_workers()),
      dynamic_(cluster.sparse()),
      is_chief_(rank_ == 0) {
  norm_ = NormalizationFor(options.dataset);
}

absl::Status Trainer::Setup() {
  ASSIGN_OR_RETURN(train_, LoadMnist(options_.data_dir, Split::kTrain));
  if (is_chief_) {
    ASSIGN_OR_RETURN(test_, LoadMnist(options_.data_dir, Split::kTest));
  }
  models::ModelOptions mo;
  mo.name = options_.model;
  mo.device = options_.device;
  mo.max_batch = is_chief_ ? std::max(options_.batch_size, kMinEvalBatch) : options_.batch_size;
  mo.seed = options_.seed;
  mo.local_rank = rank_;
  ASSIGN_OR_RETURN(model_, models::CreateModel(mo));
  if (options_.timeline) model_->set_layer_spans(&layer_spans_);
  const models::Shape in = model_->net().input;
  for (const Dataset* data : {&train_, &test_}) {
    if ((data == &train_ || data->size > 0) && (in.h != data->rows || in.w != data->cols || in.c != 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model ", options_.model, " takes ", in.h, "x", in.w, " images; the ",
                       data == &train_ ? "training" : "test", " data has ", data->rows, "x",
                       data->cols));
    }
  }
  // The runtime sends the shards backward has finished (with one ps, the
  // plan's one shard, there is nothing to overlap). Either way each step
  // records when, for summary.json's backward_leads: what `pstrain plan`
  // needs to plan more ps than a run had.
  backward_done_ = [this](int64_t begin) {
    backward_final_.emplace_back(begin, MonotonicMicros());
    if (overlap_) runtime_->ReadyFrom(begin);
  };
  const bool progress = options_.overlap && model_->set_backward_progress(&backward_done_);
  overlap_ = progress && cluster_.num_ps() > 1;
  forward_ahead_ = options_.overlap && options_.forward_ahead && model_->supports_forward_ahead();
  // Dynamic workers: nobody knows the others, so nobody splits the set;
  // each worker draws its own order of all of it (its rank in the seed).
  sharder_ = dynamic_ ? std::make_unique<DataSharder>(
                            train_.size, 1, 0, options_.batch_size,
                            options_.seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(rank_ + 1)))
                      : std::make_unique<DataSharder>(train_.size, num_workers_, rank_,
                                                      options_.batch_size, options_.seed);
  WorkerRuntimeOptions ro;
  ro.train = options_;
  ro.tensors = Slots(model_->param_specs());
  ro.steps_per_epoch = sharder_->steps_per_epoch();
  ro.device_description = model_->device_description();
  ro.initial_params = [this](absl::Span<float> params) {
    models::InitParams(model_->param_specs(), options_.seed, params.data());
  };
  ro.overlap = overlap_;
  ro.cancel = cancel_;
  ASSIGN_OR_RETURN(runtime_, WorkerRuntime::Create(cluster_, std::move(ro), security_));
  return absl::OkStatus();
}

absl::Status Trainer::Run() {
  RETURN_IF_ERROR(runtime_->Connect());
  absl::Status s = runtime_->Start();
  for (;;) {
    if (s.ok()) s = TrainToEnd();
    if (IsJobFinished(s) && !is_chief_) {
      LOG(WARNING) << "the job finished without this worker (" << s.message()
                   << "): it was frozen or declared dead meanwhile; nothing left to do";
      return absl::OkStatus();
    }
    if (s.ok() || !IsRejoin(s)) return s;
    s = runtime_->Rejoin(s);
  }
}

absl::Status Trainer::TrainToEnd() {
  ahead_step_ = -1;  // the parameters are pulled anew
  RETURN_IF_ERROR(runtime_->Resume());
  const int64_t global_step = runtime_->global_step();
  if (global_step > 0) {
    LOG(INFO) << "continuing from step " << global_step << " (epoch "
              << global_step / sharder_->steps_per_epoch() + 1 << ", step "
              << global_step % sharder_->steps_per_epoch() + 1 << ") at version "
              << runtime_->MinVersion();
  }
  RETURN_IF_ERROR(TrainLoop());
  if (overlap_) {
    LOG(INFO) << "overlap: " << runtime_->early_pushes() << " shard pushes left while backward "
              << "was still running (of " << runtime_->plan().num_shards() << " a step)";
  }
  if (forward_ahead_) {
    LOG(INFO) << "forward ahead: " << forwards_ahead_
              << " steps' forward ran while their parameters came in (replies in pieces: "
              << runtime_->pieces_received() << " pieces)";
  }
  RETURN_IF_ERROR(runtime_->ReportDone());
  if (!is_chief_) {
    LOG(INFO) << "training done: " << runtime_->global_step() << " steps, " << runtime_->images()
              << " images";
    return absl::OkStatus();
  }
  // Only now, with every worker's last gradient in (async and ssp workers
  // may finish long after the chief), is the model final.
  if (!final_evaluated_) RETURN_IF_ERROR(EndEpoch(last_epoch_));
  final_evaluated_ = true;
  return runtime_->FinishChief();
}

absl::Status Trainer::TrainLoop() {
  // Driven by the runtime's position, not by counters of its own: a rejoin
  // or a skip ahead (sync) moves it, and the loop follows.
  const int64_t per_epoch = sharder_->steps_per_epoch();
  epoch_.Begin(runtime_->Mark());
  last_epoch_ = std::min(runtime_->JobEpoch(), options_.epochs - 1);
  while (!runtime_->TrainingDone()) {
    // The data's epoch is this worker's; the job's (evaluations, the epoch
    // log) differs from it only with dynamic workers.
    const int epoch = runtime_->JobEpoch();
    const int64_t step = runtime_->global_step();
    RETURN_IF_ERROR(Step(static_cast<int>(step / per_epoch), step % per_epoch));
    RETURN_IF_ERROR(runtime_->CheckShardsHome());
    runtime_->MaybeCheckpoint();
    last_epoch_ = std::min(epoch, options_.epochs - 1);
    const bool epoch_end = runtime_->JobEpoch() != epoch || runtime_->TrainingDone();
    if (is_chief_ && !epoch_end && options_.eval_every_steps > 0 &&
        runtime_->global_step() % options_.eval_every_steps == 0) {
      RETURN_IF_ERROR(Evaluate(epoch, /*epoch_end=*/false));
    }
    if (!epoch_end) continue;
    // The last epoch is closed by TrainToEnd once every worker is done,
    // with this epoch's counters (not reset ones: its row would say 0 steps).
    if (runtime_->TrainingDone()) break;
    if (is_chief_) RETURN_IF_ERROR(EndEpoch(epoch));
    epoch_.Begin(runtime_->Mark());
  }
  return absl::OkStatus();
}

absl::Status Trainer::Step(int epoch, int64_t step_in_epoch) {
  StepInfo info;
  info.start_us = runtime_->BeginStep();
  info.epoch = epoch;
  info.step_in_epoch = step_in_epoch;
  layer_spans_.clear();
  backward_final_.clear();
  RETURN_IF_ERROR(ComputeGradients(epoch, step_in_epoch, &info.loss));
  info.examples = static_cast<int>(indices_.size());
  info.layers = &layer_spans_;
  info.backward_final = &backward_final_;
  BetweenFn ahead;
  if (forward_ahead_) {
    ahead = [this](const WaitParamsFn& wait, int64_t* us) { return ForwardAhead(wait, us); };
  }
  if (absl::Status s = runtime_->EndStep(info, ahead); !s.ok()) {
    ahead_step_ = -1;  // the forward that ran is the next step's only if every reply is whole
    return s;
  }
  epoch_.AddStep(info.examples, info.loss);
  return absl::OkStatus();
}

absl::Status Trainer::ComputeGradients(int epoch, int64_t step_in_epoch, float* loss) {
  sharder_->BatchIndices(epoch, step_in_epoch, &indices_);
  const int n = static_cast<int>(indices_.size());
  // Its forward ran already, while the last step's replies came in.
  const bool ahead = ahead_step_ == runtime_->global_step() && ahead_indices_ == indices_;
  ahead_step_ = -1;
  forwards_ahead_ += ahead ? 1 : 0;
  const absl::Span<float> grads = runtime_->grads();
  if (n == 0) {
    // The last global batch had fewer examples than workers: push a zero
    // gradient of weight 0 so that the version still completes.
    std::fill(grads.begin(), grads.end(), 0.0f);
    *loss = std::nanf("");
    return absl::OkStatus();
  }
  models::Batch batch;
  if (!ahead) {
    ASSIGN_OR_RETURN(batch, LoadBatch(epoch, indices_));
    RETURN_IF_ERROR(model_->SetParams(runtime_->params()));
  }
  // A slow worker's compute (--straggler_delay_ms): before any of its
  // gradient goes out.
  if (options_.straggler_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(
        static_cast<int64_t>(options_.straggler_delay_ms * 1000)));
  }
  if (overlap_) runtime_->StartPush(n);
  if (ahead) {
    ASSIGN_OR_RETURN(*loss, model_->BackwardAfterAhead(grads));
  } else {
    ASSIGN_OR_RETURN(*loss, model_->ForwardBackward(batch, grads));
  }
  if (!std::isfinite(*loss)) {
    return absl::InternalError(absl::StrCat("loss is ", *loss, " at step ", runtime_->global_step(),
                                            ": training diverged (try a smaller --lr)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<models::Batch> Trainer::LoadBatch(int epoch, const std::vector<int64_t>& indices) {
  // Gathered straight into the model's input buffer (page-locked memory the
  // GPU copies from, for the CUDA model).
  ASSIGN_OR_RETURN(const models::BatchBuffer in, model_->InputBuffer());
  GatherBatch(train_, indices, norm_, in.images.data(), in.labels.data());
  const int n = static_cast<int>(indices.size());
  for (int i = 0; i < n; ++i) {
    in.example_keys[i] =
        models::MakeExampleKey(static_cast<uint32_t>(epoch), static_cast<uint32_t>(indices[i]));
  }
  return models::Batch{n, in.images.data(), in.labels.data(), in.example_keys.data()};
}

absl::Status Trainer::ForwardAhead(const WaitParamsFn& wait_params, int64_t* compute_us) {
  // Only where TrainLoop goes straight on to the next step: not at the
  // end, nor where an epoch ends or the chief evaluates first (either
  // would throw the forward away).
  const int64_t next = runtime_->global_step() + 1;
  const int64_t per_epoch = sharder_->steps_per_epoch();
  const bool evaluates =
      is_chief_ && options_.eval_every_steps > 0 && next % options_.eval_every_steps == 0;
  if (next >= runtime_->total_steps() || next % per_epoch == 0 || evaluates) return absl::OkStatus();
  const int epoch = static_cast<int>(next / per_epoch);
  sharder_->BatchIndices(epoch, next % per_epoch, &ahead_indices_);
  if (ahead_indices_.empty()) return absl::OkStatus();
  // Its compute runs within the step's --rpc_timeout_s, counted from the
  // first push; replies that come meanwhile are read in each wait, so the
  // deadline is judged on what the ps did, not on the forward.
  const int64_t t0 = MonotonicMicros();
  int64_t waited_us = 0;
  absl::Status wait_error;
  absl::StatusOr<models::Batch> batch = LoadBatch(epoch, ahead_indices_);
  absl::Status s = batch.status();
  if (s.ok()) {
    s = model_->ForwardAhead(*batch, runtime_->params(), [&](int64_t end) {
      const int64_t w0 = MonotonicMicros();
      wait_error = wait_params(end);
      waited_us += MonotonicMicros() - w0;
      return wait_error;
    });
  }
  *compute_us = MonotonicMicros() - t0 - waited_us;
  // A failed wait is the step's own failure, FinishPushPull's error. Any
  // other costs only the forward ahead: the next step runs it itself.
  RETURN_IF_ERROR(wait_error);
  if (!s.ok()) {
    LOG(ERROR) << "forward ahead of step " << next << " failed (" << s.message()
               << "); that step runs its own";
    return absl::OkStatus();
  }
  ahead_step_ = next;
  return absl::OkStatus();
}

absl::Status Trainer::Evaluate(int epoch, bool epoch_end) {
  ahead_step_ = -1;  // the model is used, and the parameters may be pulled anew
  const int64_t t0 = MonotonicMicros();
  const int64_t start_unix = UnixMicros();
  const bool last = runtime_->TrainingDone() && epoch_end;
  if (options_.mode != proto::SYNC || last) {
    // Others kept training: evaluate the newest parameters, not ours (and
    // the final ones at the end).
    RETURN_IF_ERROR(runtime_->PullLatest());
  }
  RETURN_IF_ERROR(model_->SetParams(runtime_->params()));
  ASSIGN_OR_RETURN(
      const models::EvalResult total,
      EvaluateDataset(*model_, test_, norm_, std::max(options_.batch_size, kMinEvalBatch)));
  return runtime_->RecordEvaluation(
      epoch, epoch_end, last, static_cast<double>(total.correct) / std::max<int64_t>(1, total.count),
      total.loss_sum / std::max<int64_t>(1, total.count), t0, start_unix);
}

absl::Status Trainer::EndEpoch(int epoch) {
  const EpochMark end = runtime_->Mark();
  RETURN_IF_ERROR(Evaluate(epoch, /*epoch_end=*/true));
  const double images =
      dynamic_ ? static_cast<double>(end.version - epoch_.start().version) * options_.batch_size
               : static_cast<double>(sharder_->ImagesInSteps(end.step - epoch_.start().step));
  const ClosedEpoch closed = epoch_.End(epoch + 1, options_.epochs, dynamic_ ? 0 : num_workers_,
                                        end, runtime_->evaluations().back(), images);
  LOG(INFO) << closed.line;
  return runtime_->RecordEpoch(closed.record);
}

}  // namespace pstrain

// The chief's end of a run: the shards' counters, the workers' reports and
// the evaluations into summary.json, the final parameters, SHUTDOWN.

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/lr_schedule.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/worker_runtime.h"

namespace pstrain {

// summary.json's configuration: what the job was (mode, sizes, optimizer,
// schedule, wire, the run's length and start), the results aside.
void WorkerRuntime::SetSummaryConfiguration(const std::vector<proto::ShardStats>& stats) {
  const TrainOptions& o = options_.train;
  summary_.set_mode(UpdateModeName(o.mode));
  summary_.set_num_ps(cluster_.num_ps());
  summary_.set_num_workers(num_workers_);
  summary_.set_epochs(o.epochs);
  int batch = o.batch_size;
  const int64_t steps_here = global_step_ - start_step_;
  if (options_.batch_from_steps && steps_here > 0 && images_ > 0) {
    batch = static_cast<int>(std::llround(static_cast<double>(images_) / steps_here));
  }
  summary_.set_batch_size(batch);
  summary_.set_global_batch(batch * num_workers_);
  if (dynamic_) {
    // The ranks that took part: those that pushed to shard 0 (every push
    // goes to every shard). An update is one worker's batch.
    summary_.set_dynamic_workers(true);
    const auto& pushes = stats.front().pushes_by_rank();
    for (int rank = 0; rank < pushes.size(); ++rank) {
      if (pushes[rank] > 0) summary_.add_worker_ranks(rank);
    }
    summary_.set_num_workers(summary_.worker_ranks_size());
    summary_.set_global_batch(batch);
  }
  summary_.set_learning_rate(EffectiveLearningRate(o, lr_workers_));
  summary_.set_momentum(o.optimizer == proto::SGD ? EffectiveMomentum(o, lr_workers_) : 0.0);
  if (auto optimizer = OptimizerFromJob(MakeJobConfig()); optimizer.ok()) {
    summary_.set_optimizer(DescribeOptimizer(*optimizer));
  }
  if (auto schedule = LrSchedule::FromJob(MakeJobConfig()); schedule.ok()) {
    summary_.set_lr_schedule(schedule->Describe());
  }
  summary_.set_model(o.model);
  summary_.set_device(options_.device_description);
  summary_.set_seed(static_cast<uint32_t>(o.seed));
  summary_.set_staleness_bound(o.mode == proto::SSP ? o.staleness : -1);
  summary_.set_backup_workers(o.backup_workers);
  summary_.set_staleness_lr(o.staleness_lr);
  summary_.set_shard_strategy(o.shard_strategy);
  summary_.set_wire(step_->encoder().encoding().ToString());
  summary_.set_push_bytes_per_step(static_cast<double>(step_->encoder().bytes_per_step()));
  summary_.set_resumed_from(resumed_from_);
  proto::StepPhases& mean = *summary_.mutable_chief_step_ms();
  mean = phases_;
  if (const double n = phases_.steps(); n > 0) {
    mean.set_compute_ms(phases_.compute_ms() / n);
    mean.set_comm_ms(phases_.comm_ms() / n);
    mean.set_wait_ms(phases_.wait_ms() / n);
    mean.set_ahead_ms(phases_.ahead_ms() / n);
  }
  for (const auto& [begin, lead] : backward_leads_) {
    proto::BackwardLead* l = mean.add_backward_leads();
    l->set_begin(static_cast<double>(begin));
    l->set_lead_ms(lead.first / static_cast<double>(lead.second));
  }
  summary_.set_steps_per_worker(static_cast<int32_t>(global_step_));
  summary_.set_steps_per_epoch(static_cast<int32_t>(options_.steps_per_epoch));
  summary_.set_wall_seconds(SecondsSince(start_us_));
  summary_.set_started_at(absl::FormatTime(absl::RFC3339_sec,
                                           absl::Now() - absl::Seconds(SecondsSince(start_us_)),
                                           absl::UTCTimeZone()));
}

absl::Status WorkerRuntime::FinishChief() {
  const TrainOptions& o = options_.train;
  ASSIGN_OR_RETURN(const std::vector<proto::ShardStats> stats, client_->Stats());
  SetSummaryConfiguration(stats);
  // Only in sync mode (and ssp, where the bound soon stops the others) does
  // everybody wait while the chief evaluates.
  const double stopped_s = o.mode == proto::ASYNC ? 0.0 : eval_seconds_;
  FillSummaryResults(evals_, stats, stopped_s, &summary_);
  for (const proto::ShardStats& s : stats) {
    summary_.set_workers_declared_dead(summary_.workers_declared_dead() +
                                       static_cast<int32_t>(s.workers_declared_dead()));
    summary_.set_workers_rejoined(summary_.workers_rejoined() + static_cast<int32_t>(s.workers_rejoined()));
  }
  RETURN_IF_ERROR(AddRecoveries(&summary_));
  if (!o.run_dir.empty()) {
    RETURN_IF_ERROR(WriteFileAtomic(
        absl::StrCat(o.run_dir, "/final_params.f32"),
        absl::string_view(reinterpret_cast<const char*>(params_.data()), params_.size() * sizeof(float))));
    RETURN_IF_ERROR(WriteFileAtomic(absl::StrCat(o.run_dir, "/summary.json"), ToJson(summary_)));
  }
  LOG(INFO) << absl::StrFormat(
      "training done: test accuracy %.4f, %.0f images/s, %d updates, %d stale dropped, "
      "mean staleness %.2f",
      summary_.final_test_accuracy(), summary_.train_images_per_sec(), summary_.updates_applied(),
      summary_.stale_gradients_dropped(), summary_.mean_staleness());
  return client_->Shutdown(checkpointer_ != nullptr ? checkpointer_->KeepFrom() : 0);
}

}  // namespace pstrain

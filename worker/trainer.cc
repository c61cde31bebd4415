#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/lr_schedule.h"
#include "common/optimizer.h"
#include "common/rejoin.h"
#include "common/run_dir.h"
#include "common/status_macros.h"
#include "common/wire_codec.h"
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

absl::Status Mismatch(absl::string_view flag, absl::string_view mine, absl::string_view chiefs) {
  return absl::FailedPreconditionError(absl::StrCat(
      "--", flag, "=", mine, " but the chief started the job with ", chiefs,
      "; start every worker with the same training flags"));
}

// When each shard's reply arrived, for the timeline.
// The longest any shard held this step's push back (a sync version, the
// SSP bound): the step's waiting, the rest of its push/pull is the wire and
// the ps's work. Shards are waited on in parallel, hence the longest.
int64_t LongestParkedUs(const std::vector<ShardReply>& replies) {
  int64_t longest = 0;
  for (const ShardReply& r : replies) longest = std::max(longest, r.parked_us);
  return longest;
}

std::vector<int64_t> ReplyTimes(const std::vector<ShardReply>& replies) {
  std::vector<int64_t> times;
  for (const ShardReply& r : replies) times.push_back(r.received_unix_us);
  return times;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const ClusterSpec& cluster,
                                                         const TrainOptions& options,
                                                         const TransportSecurity& security) {
  RETURN_IF_ERROR(ValidateTrainOptions(options));
  CHECK(cluster.task().has_value());
  const TaskType type = cluster.task()->type;
  if (type != TaskType::kChief && type != TaskType::kWorker) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the worker binary runs chief and worker tasks, not ", cluster.task()->ToString()));
  }
  const bool checkpoints = options.checkpoint_every_steps > 0 || options.checkpoint_every_s > 0 ||
                           (options.restore && cluster.WorkerRank(*cluster.task()) == 0);
  if (checkpoints && options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.restore ? "--restore" : "--checkpoint_every_steps/--checkpoint_every_s",
        " needs --checkpoint_dir"));
  }
  if (cluster.sparse() && options.mode == proto::SYNC) {
    return absl::InvalidArgumentError(
        "--mode=sync needs every worker known in advance (each version waits for all of them), "
        "and a sparse TF_CONFIG (TFJob enableDynamicWorker) lists only this task: use --mode=async "
        "or --mode=ssp, or a full TF_CONFIG");
  }
  if (cluster.sparse() && options.ps_replicas > 0) {
    return absl::InvalidArgumentError(
        "--ps_replicas needs every ps to know the next one, and a sparse TF_CONFIG shows a ps only "
        "itself: use a full TF_CONFIG");
  }
  if (options.ps_replicas > 0 && cluster.num_ps() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_replicas=", options.ps_replicas, " needs 2 or more ps tasks (a standby lives on "
        "another ps); the spec has ", cluster.num_ps()));
  }
  std::unique_ptr<Trainer> trainer(new Trainer(cluster, options, security));
  RETURN_IF_ERROR(trainer->Setup());
  return trainer;
}

Trainer::Trainer(const ClusterSpec& cluster, const TrainOptions& options,
                 const TransportSecurity& security)
    : cluster_(cluster),
      task_(*cluster.task()),
      options_(options),
      security_(security),
      rank_(cluster.WorkerRank(*cluster.task())),
      num_workers_(cluster.num_workers()),
      dynamic_(cluster.sparse()),
      lr_workers_(cluster.sparse() ? 1 : cluster.num_workers()),
      is_chief_(rank_ == 0),
      start_us_(MonotonicMicros()) {
  norm_ = NormalizationFor(options.dataset);
}

absl::Status Trainer::Setup() {
  // The endpoint first, so that a task waiting for its ps can be seen.
  if (options_.metrics_port != 0) {
    ASSIGN_OR_RETURN(metrics_server_,
                     MetricsServer::Start({options_.metrics_host, options_.metrics_port},
                                          TaskIdentityLabels(cluster_)));
    LOG(INFO) << task_.ToString() << ": metrics for Prometheus on " << metrics_server_->Describe();
  }
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
  ASSIGN_OR_RETURN(const ShardStrategy strategy, ParseShardStrategy(options_.shard_strategy));
  ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Create(options_.model, Slots(model_->param_specs()),
                                                     cluster_.num_ps(), strategy));
  plan_ = std::make_unique<ShardPlan>(std::move(plan));
  ASSIGN_OR_RETURN(const WireEncoding wire, ParseWireEncoding(options_.wire));
  encoder_ = std::make_unique<GradientEncoder>(wire, *plan_);
  backward_done_ = [this](int64_t begin) { SendReadyShards(begin); };
  overlap_ = options_.overlap && plan_->num_shards() > 1 && model_->set_backward_progress(&backward_done_);
  shard_encoded_.assign(plan_->num_shards(), false);
  forward_ahead_ = options_.overlap && options_.forward_ahead && model_->supports_forward_ahead();
  // Dynamic workers: nobody knows the others, so nobody splits the set;
  // each worker draws its own order of all of it (its rank in the seed).
  sharder_ = dynamic_ ? std::make_unique<DataSharder>(
                            train_.size, 1, 0, options_.batch_size,
                            options_.seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(rank_ + 1)))
                      : std::make_unique<DataSharder>(train_.size, num_workers_, rank_,
                                                      options_.batch_size, options_.seed);
  const int64_t per_run = options_.epochs * sharder_->steps_per_epoch();
  total_steps_ = options_.max_steps > 0 ? std::min(options_.max_steps, per_run) : per_run;
  params_.assign(model_->num_params(), 0.0f);
  grads_.assign(model_->num_params(), 0.0f);
  versions_.assign(plan_->num_shards(), 0);
  pull_versions_.assign(plan_->num_shards(), 0);
  client_options_.connect_timeout_s = options_.connect_timeout_s;
  client_options_.peer_timeout_s = options_.peer_timeout_s;
  client_options_.heartbeat_interval_s = options_.heartbeat_interval_s;
  client_options_.rpc_timeout_s = options_.rpc_timeout_s;
  client_options_.security = security_;
  RETURN_IF_ERROR(MakeClient(options_.connect_timeout_s));
  if (is_chief_ && !options_.checkpoint_dir.empty()) MakeCheckpointer();
  LOG(INFO) << task_.ToString() << " (rank " << rank_
            << (dynamic_ ? ", dynamic workers" : absl::StrCat(" of ", num_workers_)) << ", "
            << (is_chief_ ? "chief, " : "") << model_->device_description() << "): "
            << options_.model << " " << model_->num_params() << " params over "
            << plan_->num_shards() << " ps, " << UpdateModeName(options_.mode) << ", batch "
            << options_.batch_size << ", " << sharder_->steps_per_epoch() << " steps/epoch, "
            << total_steps_ << (dynamic_ ? " updates by all workers together" : " steps");
  if (wire.lossy()) {
    LOG(INFO) << "pushing gradients as " << wire.ToString() << " with error feedback: "
              << encoder_->bytes_per_step() << " payload bytes a step instead of "
              << plan_->total_size() * sizeof(float);
  }
  return absl::OkStatus();
}

absl::Status Trainer::MakeClient(double connect_timeout_s) {
  client_.reset();  // its sockets and heartbeat thread go first
  PsClientOptions co = client_options_;
  co.connect_timeout_s = connect_timeout_s;
  ASSIGN_OR_RETURN(client_, PsClient::Create(cluster_, task_, *plan_, co));
  if (checkpointer_ != nullptr) checkpointer_->set_client(client_.get());
  return absl::OkStatus();
}

void Trainer::MakeCheckpointer() {
  CheckpointerOptions c;
  c.dir = options_.checkpoint_dir;
  c.every_steps = options_.checkpoint_every_steps;
  c.every_s = options_.checkpoint_every_s;
  c.keep = options_.keep_checkpoints;
  c.job = MakeJobConfig();
  c.flags = options_.ToArgs();
  c.plan_fingerprint = plan_->fingerprint();
  c.num_params = plan_->total_size();
  c.num_shards = plan_->num_shards();
  checkpointer_ = std::make_unique<Checkpointer>(std::move(c), client_.get());
}

absl::Status Trainer::CleanRunDir() {
  // The other workers of a run started by hand may have opened their steps
  // CSVs already (each truncates its own): only theirs are kept.
  std::set<int> others;
  for (int rank = 1; rank < num_workers_; ++rank) others.insert(rank);
  ASSIGN_OR_RETURN(const std::vector<std::string> removed,
                   RemoveStaleRunOutputs(options_.run_dir, others));
  if (!removed.empty()) LOG(INFO) << DescribeRemoved(options_.run_dir, removed);
  return absl::OkStatus();
}

absl::Status Trainer::OpenMetrics() {
  if (options_.run_dir.empty()) {
    MetricsOptions m;
    m.chief = is_chief_;
    m.learning_rate = EffectiveLearningRate(options_, lr_workers_);
    m.server = metrics_server_.get();
    m.log_every_steps = options_.log_every_steps;
    m.epochs = options_.epochs;
    ASSIGN_OR_RETURN(metrics_, MetricsRecorder::Open(m));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(MakeDirs(options_.run_dir));
  // A resumed run, and a task restarted into a running job, add to the
  // metrics of the run they continue.
  const bool append = options_.restore || (!fresh_init_ && (is_chief_ || start_step_ > 0));
  if (is_chief_ && options_.clean_run_dir && !append) RETURN_IF_ERROR(CleanRunDir());
  MetricsOptions m;
  m.run_dir = options_.run_dir;
  m.rank = rank_;
  m.chief = is_chief_;
  m.append = append;
  m.learning_rate = EffectiveLearningRate(options_, lr_workers_);
  m.timeline = options_.timeline;
  m.task_name = task_.ToString();
  m.server = metrics_server_.get();
  m.log_every_steps = options_.log_every_steps;
  m.epochs = options_.epochs;
  ASSIGN_OR_RETURN(metrics_, MetricsRecorder::Open(m));
  return absl::OkStatus();
}

proto::JobConfig Trainer::MakeJobConfig() const {
  proto::JobConfig job;
  job.set_mode(options_.mode);
  job.set_num_workers(num_workers_);
  job.set_learning_rate(EffectiveLearningRate(options_, lr_workers_));
  SetJobOptimizer(options_, &job);
  job.set_staleness(options_.staleness);
  job.set_backup_workers(options_.backup_workers);
  job.set_staleness_lr(options_.staleness_lr);
  job.set_seed(options_.seed);
  job.set_steps_per_epoch(sharder_->steps_per_epoch());
  job.set_epochs(options_.epochs);
  job.set_batch_size(options_.batch_size);
  job.set_model(options_.model);
  job.set_total_steps(total_steps_);
  job.set_ps_replicas(options_.ps_replicas);
  job.set_dynamic_workers(dynamic_);
  job.set_lr_schedule(options_.lr_schedule);
  job.set_warmup_steps(options_.warmup_steps);
  job.set_lr_step_size(options_.lr_step_size);
  job.set_lr_gamma(options_.lr_gamma);
  job.set_min_lr(options_.min_lr);
  // The job's updates: one per version in sync; one per push in async and
  // ssp (every worker's total_steps), or total_steps with dynamic workers.
  const bool per_push = options_.mode != proto::SYNC && !dynamic_;
  job.set_schedule_updates(per_push ? total_steps_ * num_workers_ : total_steps_);
  return job;
}

absl::Status Trainer::CheckJobMatches(const proto::JobConfig& job) const {
  const proto::JobConfig mine = MakeJobConfig();
  if (job.mode() != mine.mode()) {
    return Mismatch("mode", UpdateModeName(mine.mode()), UpdateModeName(job.mode()));
  }
  if (job.model() != mine.model()) return Mismatch("model", mine.model(), job.model());
  if (job.optimizer() != mine.optimizer()) {
    return Mismatch("optimizer", OptimizerName(mine.optimizer()), OptimizerName(job.optimizer()));
  }
  if (job.batch_size() != mine.batch_size()) {
    return Mismatch("batch_size", absl::StrCat(mine.batch_size()), absl::StrCat(job.batch_size()));
  }
  if (job.total_steps() != mine.total_steps()) {
    return Mismatch("epochs/max_steps", absl::StrCat(mine.total_steps(), " steps"),
                    absl::StrCat(job.total_steps(), " steps"));
  }
  if (job.seed() != mine.seed()) {
    return Mismatch("seed", absl::StrCat(mine.seed()), absl::StrCat(job.seed()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Join(bool first) {
  fresh_init_ = false;
  if (is_chief_) RETURN_IF_ERROR(RecoverShards(first));
  if (!fresh_init_) RETURN_IF_ERROR(RegisterAndPosition(first));
  global_step_ = start_step_;
  return absl::OkStatus();
}

absl::Status Trainer::InitFresh() {
  models::InitParams(model_->param_specs(), options_.seed, params_.data());
  RETURN_IF_ERROR(client_->Init(MakeJobConfig(), params_));
  LOG(INFO) << "initialised " << plan_->num_shards() << " shards: " << plan_->Summary();
  fresh_init_ = true;
  start_step_ = 0;
  pull_versions_.assign(plan_->num_shards(), 0);
  // Checkpoint 0: a ps that dies before the first periodic checkpoint can
  // still be restored.
  if (checkpointer_ != nullptr) {
    if (absl::Status s = checkpointer_->Save(0); !s.ok()) LOG(ERROR) << s.message();
  }
  return absl::OkStatus();
}

absl::Status Trainer::RegisterAndPosition(bool first) {
  const std::string chief = cluster_.ChiefTask().ToString();
  if (!first || !is_chief_) {
    LOG(INFO) << "registering"
              << (first ? absl::StrCat("; waiting for the chief (", chief,
                                       ") to initialise the parameters (up to ",
                                       options_.register_timeout_s, " s, --register_timeout_s)")
                        : "");
  }
  const int64_t start = MonotonicMicros();
  const bool sync = options_.mode == proto::SYNC;
  for (;;) {
    absl::StatusOr<Registration> registered =
        client_->Register(first ? options_.register_timeout_s : options_.recovery_timeout_s);
    if (first && absl::IsDeadlineExceeded(registered.status())) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the chief (", chief, ") did not initialise the parameters within ",
          options_.register_timeout_s, " s (--register_timeout_s): is it running?",
          dynamic_ ? " In a dynamic-worker job the chief is worker 0: keep at least one Worker "
                     "replica, and worker 0 with it"
                   : ""));
    }
    ASSIGN_OR_RETURN(const Registration r, std::move(registered));
    RETURN_IF_ERROR(CheckJobMatches(r.job));
    if (!sync || r.same_generation()) {
      // Sync: the version (every rank is there); async/ssp: this process's
      // own step when it has one (a worker that only lost a connection).
      start_step_ = sync || first ? r.min_clock() : global_step_;
      for (size_t k = 0; k < r.clocks.size(); ++k) pull_versions_[k] = sync ? r.clocks[k] : 0;
      return absl::OkStatus();
    }
    if (SecondsSince(start) > options_.recovery_timeout_s) {
      return absl::UnavailableError(absl::StrCat(
          "the shards stayed at different generations for ", options_.recovery_timeout_s,
          " s: the chief did not finish restoring them"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the chief is restoring
  }
}

absl::Status Trainer::Rejoin(const absl::Status& cause) {
  constexpr int kMaxRejoinsWithoutProgress = 20;
  if (++rejoins_without_progress_ > kMaxRejoinsWithoutProgress) {
    return absl::Status(cause.code(), absl::StrCat(cause.message(), " (", kMaxRejoinsWithoutProgress,
                                                   " rejoins without a step in between: giving up)"));
  }
  LOG(WARNING) << "rejoining the job: " << cause.message() << " (waiting up to "
               << options_.recovery_timeout_s << " s for every ps)";
  const int64_t t0 = MonotonicMicros();
  const int64_t start_unix = UnixMicros();
  RETURN_IF_ERROR(MakeClient(options_.recovery_timeout_s));
  RETURN_IF_ERROR(WaitForShards());
  RETURN_IF_ERROR(Join(/*first=*/false));
  LOG(WARNING) << absl::StrFormat("rejoined after %.1f s; continuing at step %d", SecondsSince(t0),
                                  global_step_);
  if (metrics_ == nullptr) return absl::OkStatus();
  return metrics_->RecordSpan("rejoin", start_unix, UnixMicros(),
                              absl::StrCat("\"step\": ", global_step_));
}

absl::Status Trainer::Run() {
  RETURN_IF_ERROR(WaitForShards());
  absl::Status s = Join(/*first=*/true);
  if (s.ok()) s = OpenMetrics();
  for (;;) {
    if (s.ok()) s = TrainToEnd();
    if (IsJobFinished(s) && !is_chief_) {
      LOG(WARNING) << "the job finished without this worker (" << s.message()
                   << "): it was frozen or declared dead meanwhile; nothing left to do";
      return absl::OkStatus();
    }
    if (s.ok() || !IsRejoin(s)) return s;
    s = Rejoin(s);
  }
}

bool Trainer::CanFinishPushedStep() const {
  if (options_.mode != proto::SYNC || options_.backup_workers > 0 || pushed_step_ < 0 ||
      global_step_ != pushed_step_) {
    return false;
  }
  bool behind = false, ahead = false;
  for (size_t k = 0; k < pull_versions_.size(); ++k) {
    if (pushed_on_[k] != pushed_step_) return false;
    behind = behind || pull_versions_[k] == pushed_step_;
    ahead = ahead || pull_versions_[k] == pushed_step_ + 1;
  }
  return behind && ahead;
}

absl::Status Trainer::FinishPushedStep() {
  std::vector<bool> push_to(pull_versions_.size());
  for (size_t k = 0; k < push_to.size(); ++k) push_to[k] = pull_versions_[k] == pushed_step_;
  LOG(INFO) << "sending step " << pushed_step_ << "'s gradient again to the shards that lost it";
  // The step's payloads as they went out first (the encoder keeps them
  // until the next step): the residual already counts them as sent once.
  RETURN_IF_ERROR(client_->FinishStep(pushed_step_, pushed_on_, pushed_examples_,
                                      encoder_->payloads(), push_to, absl::MakeSpan(params_),
                                      &replies_));
  UpdateVersions(replies_);
  ++global_step_;
  return absl::OkStatus();
}

bool Trainer::StepPartlyPushed() const {
  if (options_.mode != proto::SYNC) return false;
  bool in_somewhere = false;
  for (const int64_t clock : pull_versions_) {
    if (clock != global_step_ && clock != global_step_ + 1) return false;
    in_somewhere = in_somewhere || clock == global_step_ + 1;
  }
  return in_somewhere;
}

absl::Status Trainer::PullForPartlyPushedStep() {
  LOG(WARNING) << "step " << global_step_ << "'s gradient of this rank is in on some shards only "
               << "(clocks " << absl::StrJoin(pull_versions_, ", ")
               << "): the process before this one died while pushing it; computing it again on "
               << "version " << global_step_ << " of every shard";
  RETURN_IF_ERROR(
      client_->PullVersion(global_step_, global_step_, absl::MakeSpan(params_), &replies_));
  UpdateVersions(replies_);
  std::vector<int> moved_on;
  for (int k = 0; k < static_cast<int>(versions_.size()); ++k) {
    if (versions_[k] == global_step_) continue;
    moved_on.push_back(k);
    // Pushed as the step's gradient all the same: the shard counts it
    // once (a duplicate), and the next replies are one version again.
    versions_[k] = global_step_;
  }
  if (!moved_on.empty()) {
    LOG(WARNING) << "shard(s) " << absl::StrJoin(moved_on, ", ") << " no longer hold version "
                 << global_step_ << "'s parameters (restored since): step " << global_step_
                 << "'s gradient is computed on their newer ones, and differs from the one the "
                 << "uninterrupted run pushed";
  }
  return absl::OkStatus();
}

absl::Status Trainer::TrainToEnd() {
  ahead_step_ = -1;  // params_ are pulled anew
  if (CanFinishPushedStep()) {
    // The other shards have this step's gradient: recomputing it on their
    // newer parameters would not give the same one.
    RETURN_IF_ERROR(FinishPushedStep());
  } else if (StepPartlyPushed()) {
    RETURN_IF_ERROR(PullForPartlyPushedStep());
  } else {
    RETURN_IF_ERROR(client_->Pull(global_step_, pull_versions_, absl::MakeSpan(params_), &replies_));
    UpdateVersions(replies_);
  }
  if (global_step_ > 0) {
    LOG(INFO) << "continuing from step " << global_step_ << " (epoch "
              << global_step_ / sharder_->steps_per_epoch() + 1 << ", step "
              << global_step_ % sharder_->steps_per_epoch() + 1 << ") at version "
              << *std::min_element(versions_.begin(), versions_.end());
  }
  RETURN_IF_ERROR(TrainLoop());
  if (overlap_) {
    LOG(INFO) << "overlap: " << early_pushes_ << " shard pushes left while backward was still "
              << "running (of " << plan_->num_shards() << " a step)";
  }
  if (forward_ahead_) {
    LOG(INFO) << "forward ahead: " << forwards_ahead_
              << " steps' forward ran while their parameters came in (replies in pieces: "
              << client_->pieces_received() << " pieces)";
  }
  RETURN_IF_ERROR(ReportDone());
  if (!is_chief_) {
    // Every worker reached the barrier: the chief shuts the ps tasks down.
    client_->StopWatchingPs();
    LOG(INFO) << "training done: " << global_step_ << " steps, " << images_ << " images";
    return absl::OkStatus();
  }
  // Only now, with every worker's last gradient in (async and ssp workers
  // may finish long after the chief), is the model final.
  if (!final_evaluated_) RETURN_IF_ERROR(EndEpoch(last_epoch_));
  final_evaluated_ = true;
  return FinishChief();
}

void Trainer::UpdateVersions(const std::vector<ShardReply>& replies) {
  for (size_t k = 0; k < replies.size(); ++k) versions_[k] = replies[k].version;
}

double Trainer::TrainSeconds() const {
  if (first_step_us_ == 0) return 0.0;
  return SecondsSince(first_step_us_) - eval_seconds_;
}

int64_t Trainer::MinVersion() const { return *std::min_element(versions_.begin(), versions_.end()); }

int Trainer::JobEpoch() const {
  const int64_t per_epoch = sharder_->steps_per_epoch();
  return static_cast<int>((dynamic_ ? MinVersion() : global_step_) / per_epoch);
}

bool Trainer::TrainingDone() const {
  // Dynamic workers: the job's length is the shards' updates, whoever made them.
  if (dynamic_) return MinVersion() >= total_steps_;
  if (global_step_ >= total_steps_) return true;
  // Sync with backup workers: the job is done once every shard applied its
  // last version. A straggler whose gradients were dropped has run fewer
  // steps; finishing its own count would make everybody wait for it in the
  // final barrier, which is what backup workers are there to avoid.
  // (And in sync, a worker that skipped ahead: nothing is left to push.)
  return options_.mode == proto::SYNC &&
         *std::min_element(versions_.begin(), versions_.end()) >= total_steps_;
}

absl::Status Trainer::TrainLoop() {
  // Driven by the position, not by counters of its own: a rejoin or a skip
  // ahead (sync) moves global_step_, and the loop follows.
  const int64_t per_epoch = sharder_->steps_per_epoch();
  auto begin_epoch = [&] {
    epoch_start_step_ = global_step_;
    epoch_start_version_ = MinVersion();
    epoch_start_train_s_ = TrainSeconds();
    epoch_loss_sum_ = 0;
    epoch_loss_count_ = 0;
  };
  begin_epoch();
  last_epoch_ = std::min(JobEpoch(), options_.epochs - 1);
  while (!TrainingDone()) {
    // The data's epoch is this worker's; the job's (evaluations, the epoch
    // log) differs from it only with dynamic workers.
    const int epoch = JobEpoch();
    RETURN_IF_ERROR(Step(static_cast<int>(global_step_ / per_epoch), global_step_ % per_epoch));
    rejoins_without_progress_ = 0;
    if (is_chief_ && options_.ps_replicas > 0) {
      const std::vector<int> back = client_->ShardsWhoseHomeIsBack();
      if (!back.empty()) {
        return RejoinError(absl::StrCat("ps:", back.front(), " is back: shard ", back.front(),
                                        " goes back to it"));
      }
    }
    MaybeCheckpoint();
    last_epoch_ = std::min(epoch, options_.epochs - 1);
    const bool epoch_end = JobEpoch() != epoch || TrainingDone();
    if (is_chief_ && !epoch_end && options_.eval_every_steps > 0 &&
        global_step_ % options_.eval_every_steps == 0) {
      RETURN_IF_ERROR(Evaluate(epoch, /*epoch_end=*/false));
    }
    if (!epoch_end) continue;
    // The last epoch is closed by TrainToEnd once every worker is done,
    // with this epoch's counters (not reset ones: its row would say 0 steps).
    if (TrainingDone()) break;
    if (is_chief_) RETURN_IF_ERROR(EndEpoch(epoch));
    begin_epoch();
  }
  return absl::OkStatus();
}

void Trainer::MaybeCheckpoint() {
  if (checkpointer_ == nullptr || !checkpointer_->Due(global_step_, TrainingDone())) return;
  // A checkpoint that cannot be written costs the run nothing but that
  // checkpoint: the previous ones stay, and a dead ps fails the next step.
  const int64_t start = UnixMicros();
  if (absl::Status s = checkpointer_->Save(global_step_); !s.ok()) {
    LOG(ERROR) << s.message() << "; training goes on";
  }
  if (absl::Status s = metrics_->RecordSpan("checkpoint", start, UnixMicros(),
                                            absl::StrCat("\"step\": ", global_step_));
      !s.ok()) {
    LOG(ERROR) << s.message();
  }
}

absl::Status Trainer::ComputeGradients(int epoch, int64_t step_in_epoch, float* loss) {
  sharder_->BatchIndices(epoch, step_in_epoch, &indices_);
  const int n = static_cast<int>(indices_.size());
  // Its forward ran already, while the last step's replies came in.
  const bool ahead = ahead_step_ == global_step_ && ahead_indices_ == indices_;
  ahead_step_ = -1;
  forwards_ahead_ += ahead ? 1 : 0;
  if (n == 0) {
    // The last global batch had fewer examples than workers: push a zero
    // gradient of weight 0 so that the version still completes.
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    *loss = std::nanf("");
    return absl::OkStatus();
  }
  models::Batch batch;
  if (!ahead) {
    ASSIGN_OR_RETURN(batch, LoadBatch(epoch, indices_));
    RETURN_IF_ERROR(model_->SetParams(params_));
  }
  // A slow worker's compute (--straggler_delay_ms): before any of its
  // gradient goes out.
  if (options_.straggler_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(
        static_cast<int64_t>(options_.straggler_delay_ms * 1000)));
  }
  if (overlap_) StartOverlappedPush(n);
  if (ahead) {
    ASSIGN_OR_RETURN(*loss, model_->BackwardAfterAhead(absl::MakeSpan(grads_)));
  } else {
    ASSIGN_OR_RETURN(*loss, model_->ForwardBackward(batch, absl::MakeSpan(grads_)));
  }
  if (!std::isfinite(*loss)) {
    return absl::InternalError(absl::StrCat("loss is ", *loss, " at step ", global_step_,
                                            ": training diverged (try a smaller --lr)"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Step(int epoch, int64_t step_in_epoch) {
  const int64_t t0 = MonotonicMicros();
  if (first_step_us_ == 0) {
    first_step_us_ = t0;
    first_step_unix_us_ = UnixMicros();
  }
  float loss = 0;
  layer_spans_.clear();
  std::fill(shard_encoded_.begin(), shard_encoded_.end(), false);
  pushed_step_ = global_step_;
  pushed_on_ = versions_;
  RETURN_IF_ERROR(ComputeGradients(epoch, step_in_epoch, &loss));
  const int64_t t1 = MonotonicMicros();
  const int n = static_cast<int>(indices_.size());
  const std::vector<int64_t> computed_on = versions_;
  RETURN_IF_ERROR(PushAndPull(n, computed_on));
  const int64_t t2 = MonotonicMicros();
  last_step_unix_us_ = UnixMicros();
  UpdateVersions(replies_);
  images_ += n;
  const StepRecord record =
      MakeStepRecord(epoch, step_in_epoch, loss, n, computed_on,
                     (t1 - t0 + ahead_compute_us_) * 1e-3, (t2 - t1 - ahead_compute_us_) * 1e-3);
  RETURN_IF_ERROR(metrics_->RecordStep(record));
  ++global_step_;
  if (options_.mode == proto::SYNC && options_.backup_workers == 0) {
    // The shards went on without this worker (it was frozen, or declared
    // dead): its steps in between are the versions it missed.
    const int64_t version = *std::min_element(versions_.begin(), versions_.end());
    if (version > global_step_) {
      LOG(WARNING) << "the shards are at version " << version << ", this worker at step "
                   << global_step_ << ": skipping ahead";
      global_step_ = version;
    }
  }
  if (n > 0) {
    epoch_loss_sum_ += loss;
    ++epoch_loss_count_;
  }
  return absl::OkStatus();
}

void Trainer::StartOverlappedPush(int num_examples) {
  encoder_->Begin(global_step_);
  client_->StartPushPull(global_step_, versions_, num_examples, absl::MakeSpan(params_));
}

void Trainer::SendReadyShards(int64_t begin) {
  // Backward runs last layer first: the last shards are complete first.
  for (int k = plan_->num_shards() - 1; k >= 0; --k) {
    if (shard_encoded_[k] || plan_->range(k).begin < begin) continue;
    shard_encoded_[k] = true;
    if (begin > 0) ++early_pushes_;  // layers before the shard are still in backward
    client_->SendShard(k, encoder_->EncodeShard(k, grads_, /*weighted=*/true));
  }
}

absl::Status Trainer::PushAndPull(int num_examples, const std::vector<int64_t>& computed_on) {
  pushed_examples_ = num_examples;
  ahead_compute_us_ = 0;
  if (overlap_ && num_examples > 0) {
    // Started before backward (StartOverlappedPush); some shards are out.
    for (int k = 0; k < plan_->num_shards(); ++k) {
      if (!shard_encoded_[k]) encoder_->EncodeShard(k, grads_, /*weighted=*/true);
    }
  } else {
    encoder_->Encode(global_step_, grads_, /*weighted=*/num_examples > 0);
    client_->StartPushPull(global_step_, computed_on, num_examples, absl::MakeSpan(params_));
  }
  const absl::Span<const EncodedShard> payloads = encoder_->payloads();
  if (forward_ahead_) {
    for (int k = 0; k < plan_->num_shards(); ++k) client_->SendShard(k, payloads[k]);
    RETURN_IF_ERROR(ForwardAhead());
  }
  // Sends what is not out yet, and waits for every reply.
  const absl::Status s = client_->FinishPushPull(payloads, &replies_);
  // The forward that ran is the next step's only if every reply is whole.
  if (!s.ok()) ahead_step_ = -1;
  return s;
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

absl::Status Trainer::ForwardAhead() {
  // Only where TrainLoop goes straight on to the next step: not at the
  // end, nor where an epoch ends or the chief evaluates first (either
  // would throw the forward away).
  const int64_t next = global_step_ + 1;
  const int64_t per_epoch = sharder_->steps_per_epoch();
  const bool evaluates =
      is_chief_ && options_.eval_every_steps > 0 && next % options_.eval_every_steps == 0;
  if (next >= total_steps_ || next % per_epoch == 0 || evaluates) return absl::OkStatus();
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
    s = model_->ForwardAhead(*batch, params_, [&](int64_t end) {
      const int64_t w0 = MonotonicMicros();
      wait_error = client_->WaitParams(end);
      waited_us += MonotonicMicros() - w0;
      return wait_error;
    });
  }
  ahead_compute_us_ = MonotonicMicros() - t0 - waited_us;
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

StepRecord Trainer::MakeStepRecord(int epoch, int64_t step_in_epoch, float loss, int examples,
                                   const std::vector<int64_t>& computed_on, double compute_ms,
                                   double comm_ms) const {
  StepRecord r;
  r.step = global_step_;
  r.epoch = epoch;
  r.step_in_epoch = step_in_epoch;
  r.steps_per_epoch = sharder_->steps_per_epoch();
  r.unix_us = last_step_unix_us_;
  r.elapsed_s = SecondsSince(start_us_);
  r.loss = loss;
  r.examples = examples;
  r.version = computed_on.front();
  r.min_clock = replies_.front().min_clock;
  for (const ShardReply& reply : replies_) {
    r.staleness = std::max(r.staleness, reply.staleness);
    r.dropped = r.dropped || reply.dropped;
  }
  r.compute_ms = compute_ms;
  r.comm_ms = comm_ms;
  r.wait_ms = std::min(comm_ms, LongestParkedUs(replies_) * 1e-3);
  r.ahead_ms = ahead_compute_us_ * 1e-3;
  r.shard_reply_unix_us = ReplyTimes(replies_);
  r.layers = &layer_spans_;
  r.sent_bytes = client_->sent_bytes();
  r.received_bytes = client_->received_bytes();
  const double seconds = TrainSeconds();
  r.worker_images_per_sec = seconds > 0 ? images_ / seconds : 0.0;
  return r;
}

absl::Status Trainer::Evaluate(int epoch, bool epoch_end) {
  ahead_step_ = -1;  // the model is used, and params_ may be pulled anew
  const int64_t t0 = MonotonicMicros();
  const int64_t start_unix = UnixMicros();
  const bool last = TrainingDone() && epoch_end;
  if (options_.mode != proto::SYNC || last) {
    // Others kept training: evaluate the newest parameters, not ours (and
    // the final ones at the end).
    RETURN_IF_ERROR(client_->Pull(global_step_, versions_, absl::MakeSpan(params_), &replies_));
    UpdateVersions(replies_);
  }
  RETURN_IF_ERROR(model_->SetParams(params_));
  ASSIGN_OR_RETURN(
      const models::EvalResult total,
      EvaluateDataset(*model_, test_, norm_, std::max(options_.batch_size, kMinEvalBatch)));
  if (!last) eval_seconds_ += SecondsSince(t0);  // inside the training window
  const EvalPoint point{global_step_, TrainSeconds() - (last ? SecondsSince(t0) : 0.0),
                        static_cast<double>(total.correct) / std::max<int64_t>(1, total.count),
                        total.loss_sum / std::max<int64_t>(1, total.count)};
  evals_.push_back(point);
  RETURN_IF_ERROR(metrics_->RecordSpan("evaluate", start_unix, UnixMicros(),
                                       absl::StrCat("\"step\": ", point.step)));
  RETURN_IF_ERROR(metrics_->RecordEval(
      {point.step, epoch, point.train_seconds, point.loss, point.accuracy, epoch_end}));
  return absl::OkStatus();
}

absl::Status Trainer::EndEpoch(int epoch) {
  const double epoch_seconds = TrainSeconds() - epoch_start_train_s_;
  const int64_t steps = global_step_ - epoch_start_step_;
  RETURN_IF_ERROR(Evaluate(epoch, /*epoch_end=*/true));
  const EvalPoint& e = evals_.back();
  const double images =
      dynamic_ ? static_cast<double>(MinVersion() - epoch_start_version_) * options_.batch_size
               : static_cast<double>(sharder_->ImagesInSteps(steps));
  const double rate = epoch_seconds > 0 ? images / epoch_seconds : 0.0;
  const double train_loss = epoch_loss_count_ > 0 ? epoch_loss_sum_ / epoch_loss_count_ : 0.0;
  LOG(INFO) << absl::StrFormat(
      "epoch %d/%d done: test accuracy %.4f, test loss %.4f, train loss %.4f, %.0f images/s "
      "(all %s workers), %.1f s",
      epoch + 1, options_.epochs, e.accuracy, e.loss, train_loss, rate,
      dynamic_ ? "the" : absl::StrCat(num_workers_), epoch_seconds);
  RETURN_IF_ERROR(metrics_->RecordEpoch({epoch + 1, global_step_, steps, e.train_seconds,
                                          train_loss, e.loss, e.accuracy, rate}));
  return absl::OkStatus();
}

absl::Status Trainer::ReportDone() {
  RETURN_IF_ERROR(metrics_->Flush());
  proto::WorkerReport report;
  report.set_rank(rank_);
  report.set_steps(global_step_);
  report.set_images(images_);
  report.set_first_step_unix_us(first_step_unix_us_);
  report.set_last_step_unix_us(last_step_unix_us_);
  report.set_eval_seconds(eval_seconds_);
  return client_->Barrier("done", &report);
}

absl::Status Trainer::FinishChief() {
  ASSIGN_OR_RETURN(const std::vector<proto::ShardStats> stats, client_->Stats());
  summary_.set_mode(UpdateModeName(options_.mode));
  summary_.set_num_ps(cluster_.num_ps());
  summary_.set_num_workers(num_workers_);
  summary_.set_epochs(options_.epochs);
  summary_.set_batch_size(options_.batch_size);
  summary_.set_global_batch(options_.batch_size * num_workers_);
  if (dynamic_) {
    // The ranks that took part: those that pushed to shard 0 (every push
    // goes to every shard). An update is one worker's batch.
    summary_.set_dynamic_workers(true);
    const auto& pushes = stats.front().pushes_by_rank();
    for (int rank = 0; rank < pushes.size(); ++rank) {
      if (pushes[rank] > 0) summary_.add_worker_ranks(rank);
    }
    summary_.set_num_workers(summary_.worker_ranks_size());
    summary_.set_global_batch(options_.batch_size);
  }
  summary_.set_learning_rate(EffectiveLearningRate(options_, lr_workers_));
  summary_.set_momentum(options_.optimizer == proto::SGD ? options_.momentum : 0.0);
  if (auto optimizer = OptimizerFromJob(MakeJobConfig()); optimizer.ok()) {
    summary_.set_optimizer(DescribeOptimizer(*optimizer));
  }
  if (auto schedule = LrSchedule::FromJob(MakeJobConfig()); schedule.ok()) {
    summary_.set_lr_schedule(schedule->Describe());
  }
  summary_.set_model(options_.model);
  summary_.set_device(model_->device_description());
  summary_.set_seed(static_cast<uint32_t>(options_.seed));
  summary_.set_staleness_bound(options_.mode == proto::SSP ? options_.staleness : -1);
  summary_.set_backup_workers(options_.backup_workers);
  summary_.set_staleness_lr(options_.staleness_lr);
  summary_.set_shard_strategy(options_.shard_strategy);
  summary_.set_wire(encoder_->encoding().ToString());
  summary_.set_push_bytes_per_step(static_cast<double>(encoder_->bytes_per_step()));
  summary_.set_resumed_from(resumed_from_);
  summary_.set_steps_per_worker(static_cast<int32_t>(global_step_));
  summary_.set_steps_per_epoch(static_cast<int32_t>(sharder_->steps_per_epoch()));
  summary_.set_wall_seconds(SecondsSince(start_us_));
  summary_.set_started_at(absl::FormatTime(absl::RFC3339_sec,
                                           absl::Now() - absl::Seconds(SecondsSince(start_us_)),
                                           absl::UTCTimeZone()));
  // Only in sync mode (and ssp, where the bound soon stops the others) does
  // everybody wait while the chief evaluates.
  const double stopped_s = options_.mode == proto::ASYNC ? 0.0 : eval_seconds_;
  FillSummaryResults(evals_, stats, stopped_s, &summary_);
  for (const proto::ShardStats& s : stats) {
    summary_.set_workers_declared_dead(summary_.workers_declared_dead() +
                                       static_cast<int32_t>(s.workers_declared_dead()));
    summary_.set_workers_rejoined(summary_.workers_rejoined() + static_cast<int32_t>(s.workers_rejoined()));
  }
  RETURN_IF_ERROR(AddRecoveries(&summary_));
  if (!options_.run_dir.empty()) {
    RETURN_IF_ERROR(WriteFileAtomic(
        absl::StrCat(options_.run_dir, "/final_params.f32"),
        absl::string_view(reinterpret_cast<const char*>(params_.data()), params_.size() * sizeof(float))));
    RETURN_IF_ERROR(WriteFileAtomic(absl::StrCat(options_.run_dir, "/summary.json"), ToJson(summary_)));
  }
  LOG(INFO) << absl::StrFormat(
      "training done: test accuracy %.4f, %.0f images/s, %d updates, %d stale dropped, "
      "mean staleness %.2f",
      summary_.final_test_accuracy(), summary_.train_images_per_sec(), summary_.updates_applied(),
      summary_.stale_gradients_dropped(), summary_.mean_staleness());
  return client_->Shutdown();
}

}  // namespace pstrain

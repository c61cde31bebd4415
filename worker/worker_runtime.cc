#include "worker/worker_runtime.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/optimizer.h"
#include "common/param_groups.h"
#include "common/rejoin.h"
#include "common/run_dir.h"
#include "common/status_macros.h"
#include "common/wire_codec.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

absl::Status Mismatch(absl::string_view flag, absl::string_view mine, absl::string_view chiefs) {
  return absl::FailedPreconditionError(absl::StrCat(
      "--", flag, "=", mine, " but the chief started the job with ", chiefs,
      "; start every worker with the same training flags"));
}

std::string DescribeTensor(const proto::TensorLayout& t) {
  return absl::StrCat(t.name(), " (", t.size(), " floats)");
}

// The longest any shard held this step's push back (a sync version, the
// SSP bound): the step's waiting, the rest of its push/pull is the wire and
// the ps's work. Shards are waited on in parallel, hence the longest.
int64_t LongestParkedUs(const std::vector<ShardReply>& replies) {
  int64_t longest = 0;
  for (const ShardReply& r : replies) longest = std::max(longest, r.parked_us);
  return longest;
}

// When each shard's reply arrived, for the timeline.
std::vector<int64_t> ReplyTimes(const std::vector<ShardReply>& replies) {
  std::vector<int64_t> times;
  for (const ShardReply& r : replies) times.push_back(r.received_unix_us);
  return times;
}

}  // namespace

absl::Status WorkerRuntime::CheckOptions(const ClusterSpec& cluster, const TrainOptions& options) {
  RETURN_IF_ERROR(ValidateTrainOptions(options));
  CHECK(cluster.task().has_value());
  const TaskType type = cluster.task()->type;
  if (type != TaskType::kChief && type != TaskType::kWorker) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a worker runs chief and worker tasks, not ", cluster.task()->ToString()));
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
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerRuntime>> WorkerRuntime::Create(
    const ClusterSpec& cluster, WorkerRuntimeOptions options, const TransportSecurity& security) {
  RETURN_IF_ERROR(CheckOptions(cluster, options.train));
  if (options.steps_per_epoch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps per epoch must be >= 1, got ", options.steps_per_epoch));
  }
  if (options.total_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("total steps must be >= 0, got ", options.total_steps));
  }
  RETURN_IF_ERROR(CheckTables(options));
  std::unique_ptr<WorkerRuntime> runtime(new WorkerRuntime(cluster, std::move(options), security));
  if (runtime->is_chief() && !runtime->options_.initial_params) {
    return absl::InvalidArgumentError("the chief needs the job's initial parameters");
  }
  RETURN_IF_ERROR(runtime->Setup());
  return runtime;
}

WorkerRuntime::WorkerRuntime(const ClusterSpec& cluster, WorkerRuntimeOptions options,
                             const TransportSecurity& security)
    : cluster_(cluster),
      task_(*cluster.task()),
      options_(std::move(options)),
      security_(security),
      rank_(cluster.WorkerRank(*cluster.task())),
      num_workers_(cluster.num_workers()),
      dynamic_(cluster.sparse()),
      lr_workers_(cluster.sparse() ? 0 : cluster.num_workers()),
      is_chief_(rank_ == 0),
      start_us_(MonotonicMicros()) {}

WorkerRuntime::~WorkerRuntime() = default;

absl::Status WorkerRuntime::Setup() {
  const TrainOptions& o = options_.train;
  // The endpoint first, so that a task waiting for its ps can be seen.
  if (o.metrics_port != 0) {
    ASSIGN_OR_RETURN(metrics_server_, MetricsServer::Start({o.metrics_host, o.metrics_port},
                                                           TaskIdentityLabels(cluster_)));
    LOG(INFO) << task_.ToString() << ": metrics for Prometheus on " << metrics_server_->Describe();
  }
  ASSIGN_OR_RETURN(const ShardStrategy strategy, ParseShardStrategy(o.shard_strategy));
  ASSIGN_OR_RETURN(ShardPlan plan,
                   ShardPlan::Create(o.model, options_.tensors, cluster_.num_ps(), strategy));
  plan_ = std::make_unique<ShardPlan>(std::move(plan));
  RETURN_IF_ERROR(SetUpBuffers());
  RETURN_IF_ERROR(CheckInitialState());
  ASSIGN_OR_RETURN(const WireEncoding wire, ParseWireEncoding(o.wire));
  step_ = std::make_unique<StepInFlight>(wire, *plan_, options_.tensors, grads_);
  overlap_ = options_.overlap && plan_->num_shards() > 1;
  const int64_t per_run = o.epochs * options_.steps_per_epoch;
  total_steps_ = options_.total_steps > 0 ? options_.total_steps : per_run;
  if (o.max_steps > 0) total_steps_ = std::min(o.max_steps, total_steps_);
  versions_.assign(plan_->num_shards(), 0);
  pull_versions_.assign(plan_->num_shards(), 0);
  client_options_.connect_timeout_s = o.connect_timeout_s;
  client_options_.peer_timeout_s = o.peer_timeout_s;
  client_options_.heartbeat_interval_s = o.heartbeat_interval_s;
  client_options_.rpc_timeout_s = o.rpc_timeout_s;
  client_options_.colocated_ipc = o.colocated_ipc;
  client_options_.max_message_bytes = o.max_message_mb << 20;
  client_options_.busy_poll_us = o.busy_poll_us;
  client_options_.security = security_;
  client_options_.cancel = options_.cancel;
  RETURN_IF_ERROR(MakeClient(o.connect_timeout_s));
  if (is_chief_ && !o.checkpoint_dir.empty()) MakeCheckpointer();
  LogSetup(wire);
  return absl::OkStatus();
}

// The flat buffers: the caller's, or the runtime's own when none is given.
absl::Status WorkerRuntime::SetUpBuffers() {
  const size_t n = static_cast<size_t>(plan_->total_size());
  for (auto [given, own, span, what] :
       {std::make_tuple(options_.params, &own_params_, &params_, "parameter"),
        std::make_tuple(options_.grads, &own_grads_, &grads_, "gradient")}) {
    if (given.empty()) {
      own->assign(n, 0.0f);
      *span = absl::MakeSpan(*own);
    } else if (given.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("the ", what, " buffer holds ", given.size(),
                                                     " floats; the layout has ", n));
    } else {
      *span = given;
    }
  }
  return absl::OkStatus();
}

// A given initial optimizer state must fit the optimizer and the layout.
absl::Status WorkerRuntime::CheckInitialState() const {
  if (options_.initial_slots.empty() && options_.initial_tensor_updates.empty()) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const OptimizerConfig optimizer, OptimizerFromJob(MakeJobConfig()));
  const size_t slots =
      static_cast<size_t>(NumSlots(optimizer)) * static_cast<size_t>(plan_->total_size());
  if (options_.initial_slots.size() != slots ||
      options_.initial_tensor_updates.size() != options_.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an initial optimizer state of ", options_.initial_slots.size(), " floats and ",
        options_.initial_tensor_updates.size(), " step counts: ", OptimizerName(optimizer.kind),
        " over this layout takes ", slots, " and ", options_.tensors.size()));
  }
  for (int64_t u : options_.initial_tensor_updates) {
    if (u < 0 || u > (int64_t{1} << 48)) {
      return absl::InvalidArgumentError(absl::StrCat("an initial step count of ", u));
    }
  }
  return absl::OkStatus();
}

void WorkerRuntime::LogSetup(const WireEncoding& wire) const {
  const TrainOptions& o = options_.train;
  LOG(INFO) << task_.ToString() << " (rank " << rank_
            << (dynamic_ ? ", dynamic workers" : absl::StrCat(" of ", num_workers_)) << ", "
            << (is_chief_ ? "chief, " : "") << options_.device_description << "): " << o.model
            << " " << plan_->total_size() << " params over " << plan_->num_shards() << " ps, "
            << UpdateModeName(o.mode) << ", batch " << o.batch_size << ", "
            << options_.steps_per_epoch << " steps/epoch, " << total_steps_
            << (dynamic_ ? " updates by all workers together" : " steps");
  if (wire.lossy()) {
    LOG(INFO) << "pushing gradients as " << wire.ToString() << " with error feedback: "
              << step_->encoder().bytes_per_step() << " payload bytes a step instead of "
              << plan_->total_size() * sizeof(float);
  }
}

absl::Status WorkerRuntime::MakeClient(double connect_timeout_s) {
  if (client_ != nullptr) prefetched_before_ += client_->prefetched_tables();
  client_.reset();  // its sockets and heartbeat thread go first
  PsClientOptions co = client_options_;
  co.connect_timeout_s = connect_timeout_s;
  ASSIGN_OR_RETURN(client_, PsClient::Create(cluster_, task_, *plan_, co));
  client_->SetStepSettings(step_settings_);
  if (checkpointer_ != nullptr) checkpointer_->set_client(client_.get());
  return absl::OkStatus();
}

void WorkerRuntime::SetStepSettings(std::optional<proto::StepSettings> settings) {
  step_settings_ = std::move(settings);
  client_->SetStepSettings(step_settings_);
}

absl::Status WorkerRuntime::ReduceGradients(uint32_t round, int num_examples,
                                            const std::vector<int32_t>& absent,
                                            std::vector<int32_t>* absent_everywhere,
                                            bool* stale) {
  reduced_.resize(grads_.size());
  RETURN_IF_ERROR(client_->Reduce(global_step_, versions_, round, num_examples, grads_, absent,
                                  absl::MakeSpan(reduced_), absent_everywhere, stale));
  if (!*stale) std::copy(reduced_.begin(), reduced_.end(), grads_.begin());
  return absl::OkStatus();
}

absl::Status WorkerRuntime::ReadOptimizerState(std::vector<float>* slots,
                                               std::vector<int64_t>* tensor_updates) {
  const proto::JobConfig job = MakeJobConfig();
  ASSIGN_OR_RETURN(const OptimizerConfig optimizer, OptimizerFromJob(job));
  slots->assign(static_cast<size_t>(NumSlots(optimizer) * plan_->total_size()), 0.0f);
  std::vector<std::vector<int64_t>> counts;
  RETURN_IF_ERROR(client_->OptimizerState(absl::MakeSpan(*slots), &counts));
  tensor_updates->assign(options_.tensors.size(), -1);
  for (int k = 0; k < plan_->num_shards(); ++k) {
    const std::vector<TensorSegment> segments = SegmentsOf(job, plan_->range(k));
    const std::vector<int64_t>& shard_counts = counts[static_cast<size_t>(k)];
    if (shard_counts.size() != segments.size()) {
      return absl::DataLossError(absl::StrCat("ps ", k, " gave step counts of ",
                                              shard_counts.size(), " tensor segments for ",
                                              segments.size()));
    }
    for (size_t i = 0; i < segments.size(); ++i) {
      const int t = segments[i].tensor;
      if (t >= 0 && (*tensor_updates)[static_cast<size_t>(t)] < 0) {
        (*tensor_updates)[static_cast<size_t>(t)] = shard_counts[i];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status WorkerRuntime::InitialShardState(int shard, std::vector<float>* state,
                                              std::vector<int64_t>* segment_updates) const {
  const proto::JobConfig job = MakeJobConfig();
  ASSIGN_OR_RETURN(const OptimizerConfig optimizer, OptimizerFromJob(job));
  const ShardRange range = plan_->range(shard);
  const auto begin = static_cast<size_t>(range.begin), n = static_cast<size_t>(range.size());
  const absl::Span<const float> params = absl::Span<const float>(params_).subspan(begin, n);
  segment_updates->clear();
  if (options_.initial_slots.empty()) {
    *state = InitialState(optimizer, params);
    return absl::OkStatus();
  }
  const auto total = static_cast<size_t>(plan_->total_size());
  state->assign(params.begin(), params.end());
  for (int k = 0; k < NumSlots(optimizer); ++k) {
    const auto* slot = options_.initial_slots.data() + static_cast<size_t>(k) * total + begin;
    state->insert(state->end(), slot, slot + n);
  }
  for (const TensorSegment& seg : SegmentsOf(job, range)) {
    segment_updates->push_back(
        seg.tensor >= 0 ? options_.initial_tensor_updates[static_cast<size_t>(seg.tensor)] : 0);
  }
  return absl::OkStatus();
}

void WorkerRuntime::MakeCheckpointer() {
  const TrainOptions& o = options_.train;
  CheckpointerOptions c;
  c.dir = o.checkpoint_dir;
  c.every_steps = o.checkpoint_every_steps;
  c.every_s = o.checkpoint_every_s;
  c.keep = o.keep_checkpoints;
  c.job.config = MakeJobConfig();
  c.job.flags = o.ToArgs();
  c.job.plan_fingerprint = plan_->fingerprint();
  c.job.num_params = plan_->total_size();
  c.job.num_shards = plan_->num_shards();
  checkpointer_ = std::make_unique<Checkpointer>(std::move(c), client_.get());
}

absl::Status WorkerRuntime::CleanRunDir() {
  // The other workers of a run started by hand may have opened their steps
  // CSVs already (each truncates its own): only theirs are kept.
  std::set<int> others;
  for (int rank = 1; rank < num_workers_; ++rank) others.insert(rank);
  ASSIGN_OR_RETURN(const std::vector<std::string> removed,
                   RemoveStaleRunOutputs(options_.train.run_dir, others));
  if (!removed.empty()) LOG(INFO) << DescribeRemoved(options_.train.run_dir, removed);
  return absl::OkStatus();
}

absl::Status WorkerRuntime::OpenMetrics() {
  const TrainOptions& o = options_.train;
  MetricsOptions m;
  m.chief = is_chief_;
  m.learning_rate = EffectiveLearningRate(o, lr_workers_);
  m.server = metrics_server_.get();
  m.log_every_steps = o.log_every_steps;
  m.epochs = o.epochs;
  if (o.run_dir.empty()) {
    ASSIGN_OR_RETURN(metrics_, MetricsRecorder::Open(m));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(MakeDirs(o.run_dir));
  // A resumed run, and a task restarted into a running job, add to the
  // metrics of the run they continue.
  const bool append = o.restore || (!fresh_init_ && (is_chief_ || start_step_ > 0));
  if (is_chief_ && o.clean_run_dir && !append) RETURN_IF_ERROR(CleanRunDir());
  m.run_dir = o.run_dir;
  m.rank = rank_;
  m.append = append;
  m.timeline = o.timeline;
  m.task_name = task_.ToString();
  ASSIGN_OR_RETURN(metrics_, MetricsRecorder::Open(m));
  return absl::OkStatus();
}

proto::JobConfig WorkerRuntime::MakeJobConfig() const {
  const TrainOptions& o = options_.train;
  proto::JobConfig job;
  job.set_mode(o.mode);
  job.set_num_workers(num_workers_);
  job.set_learning_rate(EffectiveLearningRate(o, lr_workers_));
  SetJobOptimizer(o, lr_workers_, &job);
  job.set_staleness(o.staleness);
  job.set_backup_workers(o.backup_workers);
  job.set_staleness_lr(o.staleness_lr);
  job.set_seed(o.seed);
  job.set_steps_per_epoch(options_.steps_per_epoch);
  job.set_epochs(o.epochs);
  job.set_batch_size(o.batch_size);
  job.set_model(o.model);
  job.set_total_steps(total_steps_);
  job.set_ps_replicas(o.ps_replicas);
  job.set_dynamic_workers(dynamic_);
  job.set_lr_schedule(o.lr_schedule);
  job.set_warmup_steps(o.warmup_steps);
  job.set_lr_step_size(o.lr_step_size);
  job.set_lr_gamma(o.lr_gamma);
  job.set_min_lr(o.min_lr);
  // The job's updates: one per version in sync; one per push in async and
  // ssp (every worker's total_steps), or total_steps with dynamic workers.
  const bool per_push = o.mode != proto::SYNC && !dynamic_;
  job.set_schedule_updates(per_push ? total_steps_ * num_workers_ : total_steps_);
  for (const proto::EmbeddingTableConfig& t : options_.tables) *job.add_tables() = t;
  if (!options_.tables.empty()) {
    job.set_embedding_memory_per_ps(std::llround(o.embedding_memory_mb * (1 << 20)));
  }
  for (const TensorSlot& t : options_.tensors) {
    proto::TensorLayout* l = job.add_layout();
    l->set_name(t.name);
    l->set_size(t.size);
    l->set_group(t.group);
  }
  return job;
}

std::string WorkerRuntime::LayoutDifference(const proto::JobConfig& job) const {
  const proto::JobConfig mine = MakeJobConfig();
  const int n = std::max(job.layout_size(), mine.layout_size());
  for (int i = 0; i < n; ++i) {
    const bool chiefs = i < job.layout_size(), ours = i < mine.layout_size();
    if (chiefs && ours && job.layout(i).name() == mine.layout(i).name() &&
        job.layout(i).size() == mine.layout(i).size()) {
      if (job.layout(i).group() == mine.layout(i).group()) continue;
      return absl::StrCat("tensor ", i, " (", mine.layout(i).name(), ") is in parameter group ",
                          mine.layout(i).group(), " here and in group ", job.layout(i).group(),
                          " at the chief; every worker must make the same parameter groups");
    }
    return absl::StrCat("this worker's parameters differ from the chief's at tensor ", i, ": ",
                        ours ? DescribeTensor(mine.layout(i)) : "none", " here, ",
                        chiefs ? DescribeTensor(job.layout(i)) : "none",
                        " at the chief; every worker must build the same model");
  }
  return "";
}

absl::Status WorkerRuntime::CheckJobMatches(const proto::JobConfig& job) const {
  const proto::JobConfig mine = MakeJobConfig();
  if (job.model() != mine.model()) return Mismatch("model", mine.model(), job.model());
  // A job started by an older chief carries no layout: its plan
  // fingerprint alone vouches for it.
  if (job.layout_size() > 0) {
    if (const std::string d = LayoutDifference(job); !d.empty()) {
      return absl::FailedPreconditionError(d);
    }
  }
  if (const std::string d = TableDifference(job, mine); !d.empty()) {
    return absl::FailedPreconditionError(d);
  }
  if (job.mode() != mine.mode()) {
    return Mismatch("mode", UpdateModeName(mine.mode()), UpdateModeName(job.mode()));
  }
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

absl::Status WorkerRuntime::Connect() { return WaitForShards(); }

absl::Status WorkerRuntime::Start() {
  RETURN_IF_ERROR(Join(/*first=*/true));
  return OpenMetrics();
}

absl::Status WorkerRuntime::Join(bool first) {
  fresh_init_ = false;
  if (is_chief_) RETURN_IF_ERROR(RecoverShards(first));
  if (!fresh_init_) RETURN_IF_ERROR(RegisterAndPosition(first));
  global_step_ = start_step_;
  return absl::OkStatus();
}

absl::Status WorkerRuntime::InitFresh() {
  options_.initial_params(params_);
  if (options_.initial_slots.empty()) {
    RETURN_IF_ERROR(client_->Init(MakeJobConfig(), params_));
  } else {
    const auto shards = static_cast<size_t>(plan_->num_shards());
    std::vector<std::vector<float>> states(shards);
    std::vector<std::vector<int64_t>> counts(shards);
    for (size_t k = 0; k < shards; ++k) {
      RETURN_IF_ERROR(InitialShardState(static_cast<int>(k), &states[k], &counts[k]));
    }
    RETURN_IF_ERROR(client_->InitWithState(MakeJobConfig(), states, counts));
    LOG(INFO) << "the optimizer's state is the script's (its loaded state_dict)";
  }
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

absl::Status WorkerRuntime::RegisterAndPosition(bool first) {
  const std::string chief = cluster_.ChiefTask().ToString();
  const double register_timeout_s = options_.train.register_timeout_s;
  if (!first || !is_chief_) {
    LOG(INFO) << "registering"
              << (first ? absl::StrCat("; waiting for the chief (", chief,
                                       ") to initialise the parameters (up to ",
                                       register_timeout_s, " s, --register_timeout_s)")
                        : "");
  }
  const int64_t start = MonotonicMicros();
  const bool sync = options_.train.mode == proto::SYNC;
  const double recovery_timeout_s = options_.train.recovery_timeout_s;
  for (;;) {
    proto::JobConfig refused_job;
    absl::StatusOr<Registration> r =
        client_->Register(first ? register_timeout_s : recovery_timeout_s, &refused_job);
    if (first && absl::IsDeadlineExceeded(r.status())) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the chief (", chief, ") did not initialise the parameters within ",
          register_timeout_s, " s (--register_timeout_s): is it running?",
          dynamic_ ? " In a dynamic-worker job the chief is worker 0: keep at least one Worker "
                     "replica, and worker 0 with it"
                   : ""));
    }
    if (!r.ok()) {
      // Refused for its plan: the chief's job says which tensor differs.
      const std::string d = refused_job.layout_size() > 0 ? LayoutDifference(refused_job) : "";
      if (d.empty()) return r.status();
      return absl::Status(r.status().code(), absl::StrCat(r.status().message(), "; ", d));
    }
    RETURN_IF_ERROR(CheckJobMatches(r->job));
    if (!sync || r->same_generation()) {
      // Sync: the version (every rank is there); async/ssp: this process's
      // own step when it has one (a worker that only lost a connection).
      start_step_ = sync || first ? r->min_clock() : global_step_;
      for (size_t k = 0; k < r->clocks.size(); ++k) pull_versions_[k] = sync ? r->clocks[k] : 0;
      return absl::OkStatus();
    }
    if (SecondsSince(start) > recovery_timeout_s) {
      return absl::UnavailableError(absl::StrCat(
          "the shards stayed at different generations for ", recovery_timeout_s,
          " s: the chief did not finish restoring them"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the chief is restoring
  }
}

absl::Status WorkerRuntime::Rejoin(const absl::Status& cause) {
  constexpr int kMaxRejoinsWithoutProgress = 20;
  if (++rejoins_without_progress_ > kMaxRejoinsWithoutProgress) {
    return absl::Status(cause.code(), absl::StrCat(cause.message(), " (", kMaxRejoinsWithoutProgress,
                                                   " rejoins without a step in between: giving up)"));
  }
  const double recovery_timeout_s = options_.train.recovery_timeout_s;
  LOG(WARNING) << "rejoining the job: " << cause.message() << " (waiting up to "
               << recovery_timeout_s << " s for every ps)";
  const int64_t t0 = MonotonicMicros();
  const int64_t start_unix = UnixMicros();
  RETURN_IF_ERROR(MakeClient(recovery_timeout_s));
  RETURN_IF_ERROR(WaitForShards());
  RETURN_IF_ERROR(Join(/*first=*/false));
  LOG(WARNING) << absl::StrFormat("rejoined after %.1f s; continuing at step %d", SecondsSince(t0),
                                  global_step_);
  if (metrics_ == nullptr) return absl::OkStatus();
  return metrics_->RecordSpan("rejoin", start_unix, UnixMicros(),
                              absl::StrCat("\"step\": ", global_step_));
}

bool WorkerRuntime::CanFinishPushedStep() const {
  const int64_t pushed = step_->step();
  if (options_.train.mode != proto::SYNC || options_.train.backup_workers > 0 || pushed < 0 ||
      global_step_ != pushed) {
    return false;
  }
  bool behind = false, ahead = false;
  for (size_t k = 0; k < pull_versions_.size(); ++k) {
    if (step_->computed_on()[k] != pushed) return false;
    behind = behind || pull_versions_[k] == pushed;
    ahead = ahead || pull_versions_[k] == pushed + 1;
  }
  return behind && ahead;
}

absl::Status WorkerRuntime::FinishPushedStep() {
  std::vector<bool> push_to(pull_versions_.size());
  for (size_t k = 0; k < push_to.size(); ++k) push_to[k] = pull_versions_[k] == step_->step();
  LOG(INFO) << "sending step " << step_->step() << "'s gradient again to the shards that lost it";
  // Its rows first, as EndStep's pushes follow the step's EmbeddingPush.
  RETURN_IF_ERROR(ResendRows(push_to));
  RETURN_IF_ERROR(step_->Resend(client_.get(), push_to, params_, &replies_));
  UpdateVersions(replies_);
  ++global_step_;
  return absl::OkStatus();
}

bool WorkerRuntime::StepPartlyPushed() const {
  if (options_.train.mode != proto::SYNC) return false;
  bool in_somewhere = false;
  for (const int64_t clock : pull_versions_) {
    if (clock != global_step_ && clock != global_step_ + 1) return false;
    in_somewhere = in_somewhere || clock == global_step_ + 1;
  }
  return in_somewhere;
}

absl::Status WorkerRuntime::PullForPartlyPushedStep() {
  LOG(WARNING) << "step " << global_step_ << "'s gradient of this rank is in on some shards only "
               << "(clocks " << absl::StrJoin(pull_versions_, ", ")
               << "): the process before this one died while pushing it; computing it again on "
               << "version " << global_step_ << " of every shard";
  RETURN_IF_ERROR(client_->PullVersion(global_step_, global_step_, params_, &replies_));
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

absl::Status WorkerRuntime::Resume() {
  if (CanFinishPushedStep()) {
    // The other shards have this step's gradient: recomputing it on their
    // newer parameters would not give the same one.
    return FinishPushedStep();
  }
  // The process before this one died between its pushes of this step.
  if (StepPartlyPushed()) return PullForPartlyPushedStep();
  RETURN_IF_ERROR(client_->Pull(global_step_, pull_versions_, params_, &replies_));
  UpdateVersions(replies_);
  return absl::OkStatus();
}

void WorkerRuntime::UpdateVersions(const std::vector<ShardReply>& replies) {
  for (size_t k = 0; k < replies.size(); ++k) versions_[k] = replies[k].version;
}

double WorkerRuntime::TrainSeconds() const {
  if (first_step_us_ == 0) return 0.0;
  return SecondsSince(first_step_us_) - eval_seconds_;
}

int64_t WorkerRuntime::MinVersion() const {
  return *std::min_element(versions_.begin(), versions_.end());
}

int WorkerRuntime::JobEpoch() const {
  const int64_t per_epoch = options_.steps_per_epoch;
  return static_cast<int>((dynamic_ ? MinVersion() : global_step_) / per_epoch);
}

bool WorkerRuntime::TrainingDone() const {
  // Dynamic workers: the job's length is the shards' updates, whoever made them.
  if (dynamic_) return MinVersion() >= total_steps_;
  if (global_step_ >= total_steps_) return true;
  // Sync with backup workers: the job is done once every shard applied its
  // last version. A straggler whose gradients were dropped has run fewer
  // steps; finishing its own count would make everybody wait for it in the
  // final barrier, which is what backup workers are there to avoid.
  // (And in sync, a worker that skipped ahead: nothing is left to push.)
  return options_.train.mode == proto::SYNC && MinVersion() >= total_steps_;
}

int64_t WorkerRuntime::BeginStep(absl::Span<const int64_t> computed_on) {
  const int64_t t0 = MonotonicMicros();
  if (first_step_us_ == 0) {
    first_step_us_ = t0;
    first_step_unix_us_ = UnixMicros();
  }
  CHECK(computed_on.empty() || computed_on.size() == versions_.size());
  step_->Reset(global_step_, computed_on.empty() ? absl::MakeConstSpan(versions_) : computed_on);
  return t0;
}

void WorkerRuntime::StartPush(int num_examples) {
  if (!overlap_) return;
  step_->Start(client_.get(), num_examples, params_);
}

void WorkerRuntime::RestartPush(int num_examples) {
  if (!overlap_) return;
  if (num_examples > 0) {
    StartPush(num_examples);
  } else {
    step_->Unstart();
  }
}

absl::Status WorkerRuntime::EndStep(const StepInfo& info, const BetweenFn& between) {
  const int64_t t1 = MonotonicMicros();
  int64_t ahead_us = 0;
  RETURN_IF_ERROR(
      step_->Finish(client_.get(), info.examples, params_, between, &ahead_us, &replies_));
  const int64_t t2 = MonotonicMicros();
  last_step_unix_us_ = UnixMicros();
  UpdateVersions(replies_);
  images_ += info.examples;
  const StepRecord record = MakeStepRecord(info, step_->computed_on(), (t1 - info.start_us + ahead_us) * 1e-3,
                                           (t2 - t1 - ahead_us) * 1e-3, ahead_us);
  RETURN_IF_ERROR(metrics_->RecordStep(record));
  phases_.set_steps(phases_.steps() + 1);
  phases_.set_compute_ms(phases_.compute_ms() + record.compute_ms);
  phases_.set_comm_ms(phases_.comm_ms() + record.comm_ms);
  phases_.set_wait_ms(phases_.wait_ms() + record.wait_ms);
  phases_.set_ahead_ms(phases_.ahead_ms() + record.ahead_ms);
  if (info.backward_final != nullptr) {
    // Each offset's first report: a layer without parameters (a ReLU, a
    // pool) reports the offset of the layer above it again, later.
    std::set<int64_t> seen;
    for (const auto& [begin, at_us] : *info.backward_final) {
      if (!seen.insert(begin).second) continue;
      auto& [ms, steps] = backward_leads_[begin];
      ms += static_cast<double>(std::max<int64_t>(0, t1 - at_us)) * 1e-3;
      ++steps;
    }
  }
  ++global_step_;
  rejoins_without_progress_ = 0;
  if (options_.train.mode == proto::SYNC && options_.train.backup_workers == 0) {
    // The shards went on without this worker (it was frozen, or declared
    // dead): its steps in between are the versions it missed.
    const int64_t version = MinVersion();
    if (version > global_step_) {
      LOG(WARNING) << "the shards are at version " << version << ", this worker at step "
                   << global_step_ << ": skipping ahead";
      global_step_ = version;
    }
  }
  return absl::OkStatus();
}

StepRecord WorkerRuntime::MakeStepRecord(const StepInfo& info,
                                         const std::vector<int64_t>& computed_on,
                                         double compute_ms, double comm_ms, int64_t ahead_us) const {
  StepRecord r;
  r.step = global_step_;
  r.epoch = info.epoch;
  r.step_in_epoch = info.step_in_epoch;
  r.steps_per_epoch = options_.steps_per_epoch;
  r.unix_us = last_step_unix_us_;
  r.elapsed_s = SecondsSince(start_us_);
  r.loss = info.loss;
  r.examples = info.examples;
  r.version = computed_on.front();
  r.min_clock = replies_.front().min_clock;
  for (const ShardReply& reply : replies_) {
    r.staleness = std::max(r.staleness, reply.staleness);
    r.dropped = r.dropped || reply.dropped;
  }
  r.compute_ms = compute_ms;
  r.comm_ms = comm_ms;
  r.wait_ms = std::min(comm_ms, LongestParkedUs(replies_) * 1e-3);
  r.ahead_ms = ahead_us * 1e-3;
  r.shard_reply_unix_us = ReplyTimes(replies_);
  r.layers = info.layers;
  r.sent_bytes = client_->sent_bytes();
  r.received_bytes = client_->received_bytes();
  const double seconds = TrainSeconds();
  r.worker_images_per_sec = seconds > 0 ? images_ / seconds : 0.0;
  return r;
}

void WorkerRuntime::MaybeCheckpoint() {
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

absl::Status WorkerRuntime::CheckShardsHome() {
  if (!is_chief_ || options_.train.ps_replicas == 0) return absl::OkStatus();
  const std::vector<int> back = client_->ShardsWhoseHomeIsBack();
  if (back.empty()) return absl::OkStatus();
  return RejoinError(absl::StrCat("ps:", back.front(), " is back: shard ", back.front(),
                                  " goes back to it"));
}

absl::Status WorkerRuntime::PullLatest() {
  RETURN_IF_ERROR(client_->Pull(global_step_, versions_, params_, &replies_));
  UpdateVersions(replies_);
  return absl::OkStatus();
}

absl::Status WorkerRuntime::RecordEvaluation(int epoch, bool epoch_end, bool last, double accuracy,
                                             double loss, int64_t t0_us, int64_t start_unix_us) {
  if (!last) eval_seconds_ += SecondsSince(t0_us);  // inside the training window
  const EvalPoint point{global_step_, TrainSeconds() - (last ? SecondsSince(t0_us) : 0.0), accuracy,
                        loss};
  evals_.push_back(point);
  RETURN_IF_ERROR(metrics_->RecordSpan("evaluate", start_unix_us, UnixMicros(),
                                       absl::StrCat("\"step\": ", point.step)));
  return metrics_->RecordEval(
      {point.step, epoch, point.train_seconds, point.loss, point.accuracy, epoch_end});
}

absl::Status WorkerRuntime::ReportDone() {
  RETURN_IF_ERROR(metrics_->Flush());
  proto::WorkerReport report;
  report.set_rank(rank_);
  report.set_steps(global_step_);
  report.set_images(images_);
  report.set_first_step_unix_us(first_step_unix_us_);
  report.set_last_step_unix_us(last_step_unix_us_);
  report.set_eval_seconds(eval_seconds_);
  RETURN_IF_ERROR(client_->Barrier("done", &report));
  // Every worker reached the barrier: the chief shuts the ps tasks down, and
  // a ps that closes its connection from now on is no failure.
  if (!is_chief_) client_->StopWatchingPs();
  return absl::OkStatus();
}

}  // namespace pstrain

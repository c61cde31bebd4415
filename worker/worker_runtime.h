#pragma once

// A worker apart from its model: everything between a model's gradient and
// the ps tasks, for any model in any language. The C++ worker (Trainer,
// worker/trainer.h) and the C API (include/pstrain/c_api.h, the door for
// Python and pstrain.torch) are its two clients.
//
// The caller describes its parameters as a layout: ordered named tensors
// laid end to end in one flat float buffer (the ShardPlan cuts that buffer
// into one contiguous range per ps). The runtime then
//  - joins the job (Connect, Start, Resume): the chief INITs the shards
//    with the caller's initial values (or, with --restore, RESTOREs them
//    from the newest usable checkpoint; after a restart it recovers the
//    shards, never re-INITs a live job); every other worker REGISTERs,
//    and a layout that differs from the chief's is refused naming the
//    first differing tensor; then pulls the parameters into params();
//  - runs one step at a time (BeginStep, StartPush, ReadyFrom/TensorReady,
//    EndStep): each shard's gradient goes out as soon as it is final (so
//    pushes overlap backward), encoded per --wire, and EndStep returns with
//    params() holding the parameters that follow; it writes the step log
//    (steps_worker<rank>.csv, TensorBoard, Prometheus, the timeline);
//  - keeps every behaviour of a worker: update modes (sync, async, ssp,
//    backup workers), heartbeats, rejoin after a ps restarted or a
//    connection broke (Rejoin, Resume), failover with --ps_replicas,
//    checkpoints (MaybeCheckpoint) and resume, the chief's evaluations
//    (RecordEvaluation: evals.csv, the last one is summary.json's
//    final_test_accuracy), the final BARRIER (ReportDone) and the chief's
//    summary.json and SHUTDOWN (FinishChief).
//
// One object owns the step in flight (StepInFlight): the runtime.
//
// Recovery (docs/decisions/0013-recovery-by-rejoin.md). A rejoin status from any
// call (common/rejoin.h: a ps restarted, died or was rolled back) is
// answered by Rejoin(status), which makes a new client and joins again,
// then Resume(), which finishes a sync step that some shards already have
// (FinishStep) or pulls the parameters at the position the shards give:
// global_step() may then have moved back (a rollback to a checkpoint) or
// ahead (the shards went on without this worker). A caller drives its data
// by global_step(), not by counters of its own.
//
//  - the chief never re-INITs a live job. It asks every shard for STATS:
//    when some are empty (a restarted ps) it RESTOREs them from the newest
//    usable checkpoint, in sync rolling every live shard back with them
//    (one consistent model), in async/ssp restoring the empty ones alone;
//    each recovery is logged and appended to RUN_DIR/recoveries.json with
//    the updates it lost. Every shard empty at the chief's first start is
//    a fresh job (INIT; --restore: RESTORE).
//  - every worker (the chief too) then REGISTERs and continues from the
//    position the shards give: sync, the version (and only once every
//    shard has the same generation, i.e. the chief's recovery is
//    complete); async/ssp, its own step, or the shards' clock for it in a
//    restarted process.
//  - a sync worker that finds the shards ahead of it (it was frozen, or
//    declared dead meanwhile) skips to their version.
//
// Thread safety: none. One thread at a time drives a runtime (calls may
// come from different threads one after another, as autograd's hooks do).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/cancellation.h"
#include "common/cluster_spec.h"
#include "common/metrics_server.h"
#include "common/shard_plan.h"
#include "transport/security.h"
#include "worker/checkpointer.h"
#include "worker/epoch_meter.h"
#include "worker/metrics_recorder.h"
#include "worker/ps_client.h"
#include "worker/run_summary.h"
#include "worker/step_in_flight.h"
#include "worker/train_options.h"

namespace pstrain {

struct WorkerRuntimeOptions {
  // The job's flags (what `worker` takes, train_options.h): the update
  // mode, --wire, checkpoints, metrics, timeline, timeouts, the optimizer
  // and its schedule, batch_size, epochs, max_steps, seed. `train.model`
  // names the layout in the job and in its plan fingerprint ("mnist_cnn";
  // a Python model: "pytorch").
  TrainOptions train;
  // The parameter layout, in order; the flat buffers are these tensors
  // laid end to end. REQUIRES: not empty, every size > 0.
  std::vector<TensorSlot> tensors;
  // Embedding tables on the ps (common/embedding.h), in the job's order:
  // their rows by id through EmbeddingPull and EmbeddingPush; checkpoints
  // and a hot standby (--ps_replicas) hold them.
  std::vector<proto::EmbeddingTableConfig> tables;
  // Steps of every worker per epoch (the data's), and of the whole run
  // (0: train.epochs x steps_per_epoch, capped by train.max_steps).
  // REQUIRES: steps_per_epoch >= 1.
  int64_t steps_per_epoch = 1;
  int64_t total_steps = 0;
  // The summary's device ("cpu", "cuda:0 (...)").
  std::string device_description = "cpu";
  // The summary's batch is the examples a step of this process took on
  // average (a script's, whose batch the flags do not give), not
  // train.batch_size.
  bool batch_from_steps = false;
  // The chief's initial parameters: fills the whole flat vector (a fresh
  // job, and a restore when no checkpoint is usable). REQUIRES: set on the
  // chief; deterministic (called again on recovery).
  std::function<void(absl::Span<float>)> initial_params;
  // The chief's initial optimizer state (a script's loaded optimizer):
  // the slots, slot k of flat position i at initial_slots[k * total + i]
  // (common/optimizer.h's order), and each tensor's step count. Empty: a
  // fresh optimizer. REQUIRES: empty, or NumSlots x total floats and one
  // count per tensor.
  std::vector<float> initial_slots;
  std::vector<int64_t> initial_tensor_updates;
  // The flat buffers, borrowed (they must outlive the runtime): params gets
  // every pull, grads holds the caller's gradient of the step. Empty: the
  // runtime owns them (params(), grads()). params is written only inside
  // InitFresh's initial_params, Resume, EndStep, PullLatest and
  // RestoreInitialState, never while the caller's backward runs (replies
  // are read in EndStep), so it may be the model's own weights.
  absl::Span<float> params;
  absl::Span<float> grads;
  // Whether shards go out as their gradient becomes final (ReadyFrom,
  // TensorReady). With one ps there is nothing to overlap.
  bool overlap = true;
  // Stops every wait on the ps tasks (they return Cancelled): the worker's
  // SIGINT/SIGTERM. Borrowed, must outlive the runtime; null: never.
  const Cancellation* cancel = nullptr;
};

// InvalidArgument for embedding tables that cannot run (common/embedding.h)
// or options their rows do not work with yet (worker_runtime_embedding.cc).
absl::Status CheckTables(const WorkerRuntimeOptions& options);
// Where the chief's tables (`chiefs`) differ from this worker's, as a
// sentence; "" when they do not.
std::string TableDifference(const proto::JobConfig& chiefs, const proto::JobConfig& mine);

// What the caller tells EndStep about the step it computed.
struct StepInfo {
  int epoch = 0;               // the data's epoch (0-based)
  int64_t step_in_epoch = 0;
  float loss = 0;              // NaN: none (an empty batch)
  int examples = 0;            // this worker's batch (0: a zero gradient of weight 0)
  // Monotonic microseconds the step began (BeginStep's), and what ran
  // before EndStep: compute (batch, forward, backward).
  int64_t start_us = 0;
  // With a timeline: the model's spans per layer (null: none).
  const std::vector<models::LayerSpan>* layers = nullptr;
  // Where the model reports its backward's progress: each flat offset
  // from which the gradient was final, and the monotonic microseconds it
  // was (summary.json's backward_leads; null: none).
  const std::vector<std::pair<int64_t, int64_t>>* backward_final = nullptr;
};

class WorkerRuntime {
 public:
  // InvalidArgument naming the flag for options that cannot work together
  // (checkpoints without a directory, sync on a sparse spec, replicas
  // without 2 ps, ...), before anything is loaded. REQUIRES:
  // cluster.task() is set.
  static absl::Status CheckOptions(const ClusterSpec& cluster, const TrainOptions& options);

  // Starts the metrics endpoint, builds the shard plan and the client
  // (sockets only; nothing is waited for). InvalidArgument for a bad
  // layout or flags. `security` says how the sockets authenticate.
  static absl::StatusOr<std::unique_ptr<WorkerRuntime>> Create(const ClusterSpec& cluster,
                                                               WorkerRuntimeOptions options,
                                                               const TransportSecurity& security);
  ~WorkerRuntime();

  // Waits until every shard has a ps to serve it (Unavailable naming the
  // ps that cannot be reached after connect_timeout_s; the chief fails a
  // shard over to its standby with --ps_replicas).
  absl::Status Connect();
  // After Connect: joins the job (above) and opens the metrics in run_dir;
  // Resume() then pulls the parameters. FailedPrecondition naming the
  // first differing tensor when this worker's layout is not the chief's,
  // or naming the flag when its job flags differ.
  absl::Status Start();

  // Who this worker is.
  int rank() const { return rank_; }
  int num_workers() const { return num_workers_; }
  bool is_chief() const { return is_chief_; }
  bool dynamic() const { return dynamic_; }
  const TaskId& task() const { return task_; }
  const TrainOptions& options() const { return options_.train; }
  // The job this worker would start (the chief's INIT): mode, optimizer,
  // layout with its parameter groups.
  proto::JobConfig job_config() const { return MakeJobConfig(); }
  const ShardPlan& plan() const { return *plan_; }

  // The buffers (the caller's when it gave them).
  absl::Span<float> params() { return params_; }
  absl::Span<float> grads() { return grads_; }

  // The position: the next step this worker computes, of total_steps().
  int64_t global_step() const { return global_step_; }
  int64_t total_steps() const { return total_steps_; }
  int64_t steps_per_epoch() const { return options_.steps_per_epoch; }
  // Whether this worker has no step left (dynamic workers: the shards
  // applied the job's updates; sync: the shards are past the last version).
  bool TrainingDone() const;
  // The lowest version the shards answered with.
  int64_t MinVersion() const;
  // The epoch the job is in: this worker's (its steps), or, with dynamic
  // workers, the shards' (their updates).
  int JobEpoch() const;
  // Seconds of training since the first step, the chief's evaluations left
  // out.
  double TrainSeconds() const;
  // Where the job stands now: global_step(), MinVersion(), TrainSeconds().
  EpochMark Mark() const { return {global_step_, MinVersion(), TrainSeconds()}; }

  // The step global_step(): from now its compute is timed. Returns the
  // monotonic microseconds it began (StepInfo::start_us). `computed_on`:
  // the shards' versions of the parameters its gradient is computed on
  // (one per shard); empty: those of params() now. A script computing
  // ahead (capi/script_worker.h) computes on earlier ones.
  int64_t BeginStep(absl::Span<const int64_t> computed_on = {});
  // The shards' versions of params(), one per shard.
  const std::vector<int64_t>& versions() const { return versions_; }
  // Overlap: before backward, prepares the push/pull so that each shard
  // goes out as soon as it is final. No-op without overlap. REQUIRES:
  // num_examples > 0.
  void StartPush(int num_examples);
  // The step's examples are `num_examples` after all (0: its push is made
  // at EndStep). REQUIRES: no gradient of the step is final yet.
  void RestartPush(int num_examples);
  bool overlap() const { return overlap_; }
  // The gradient of flat positions [begin, total) / of tensor `tensor` is
  // final: the shards it completes go out now (after StartPush).
  void ReadyFrom(int64_t begin) { step_->ReadyFrom(begin); }
  void TensorReady(int tensor) { step_->TensorReady(tensor); }
  // Pushes the rest of grads(), runs `between` (may be empty; the forward
  // ahead) once every push is out, waits for the parameters that follow
  // (into params()), records the step and moves global_step() on (a sync
  // worker the shards left behind skips to their version). A rejoin status
  // when a ps went away (then: Rejoin, Resume).
  absl::Status EndStep(const StepInfo& info, const BetweenFn& between = {});

  // Embedding tables: the rows of `tables`' ids (any time after Start);
  // with `prefetched`, from the prefetch answered with the last step where
  // it holds a table's ids (a step's forward: StageEmbeddingPrefetch).
  absl::Status EmbeddingPull(absl::Span<const EmbeddingRows> tables, bool prefetched = false);
  // Inside a step, before EndStep (whose pushes must follow it): the
  // step's row gradients of every table, to every ps. A rejoin status
  // when a ps went away (then: Rejoin, Resume; the step is void).
  absl::Status EmbeddingPush(int num_examples, absl::Span<const EmbeddingRows> tables);
  // Async: the next forward's rows of `tables` (table, dim, ids) asked for
  // behind this step's dense push and answered with it
  // (PsClient::StageEmbeddingPrefetch); the next step's EmbeddingPull
  // with `prefetched` takes them. Sync and SSP: nothing. A ps answers a
  // pull at once: in sync before the version that the step's push joins
  // is made (every worker's push is in), and in SSP the rows would be
  // answered while the step's reply, and with it the parameters, is held
  // back for the slowest worker.
  absl::Status StageEmbeddingPrefetch(absl::Span<const EmbeddingRows> tables);
  // Table reads a prefetch answered (every client of this process's).
  int64_t prefetched_tables() const;

  // A script's optimizer settings for the pushes from now on (its
  // param_groups, and the tensors without a gradient: proto
  // StepSettings); nullopt: none, the job's optimizer and schedule apply.
  void SetStepSettings(std::optional<proto::StepSettings> settings);
  // Sync, inside a step, before EndStep: the workers' averaged gradient of
  // this step (ps_client.h, Reduce; `round`: 0, 1, ... within the step)
  // replaces grads(). `absent`: the
  // tensors without a gradient here; *absent_everywhere: those no worker
  // had. *stale: the job went past this step without this worker (grads()
  // is as it was; EndStep's push is dropped and the worker skips ahead).
  // A rejoin status when a ps went away (then: Rejoin, Resume).
  absl::Status ReduceGradients(uint32_t round, int num_examples,
                               const std::vector<int32_t>& absent,
                               std::vector<int32_t>* absent_everywhere, bool* stale);
  // The optimizer's state on the shards: the slots, as initial_slots
  // above, and each tensor's step count (the first segment's of a tensor
  // cut between shards). Between steps.
  absl::Status ReadOptimizerState(std::vector<float>* slots, std::vector<int64_t>* tensor_updates);

  // Chief, after a step: checkpoints when due (a failure is logged, not
  // returned: the previous checkpoints stay).
  void MaybeCheckpoint();
  // Chief with --ps_replicas, after a step: a rejoin status when a shard's
  // own ps is back (the next join gives the shard back to it).
  absl::Status CheckShardsHome();

  // Pulls the newest parameters into params() (at least those of the
  // versions it has seen).
  absl::Status PullLatest();
  // The chief's evaluation of the model on the test set, which ran from
  // monotonic `t0_us` (unix `start_unix_us`) to now: evals.csv,
  // TensorBoard, Prometheus, the timeline; the last one is the summary's
  // final accuracy. `last`: of the final parameters (not counted as time
  // inside training).
  absl::Status RecordEvaluation(int epoch, bool epoch_end, bool last, double accuracy, double loss,
                                int64_t t0_us, int64_t start_unix_us);
  const std::vector<EvalPoint>& evaluations() const { return evals_; }
  // The chief's epochs.csv row.
  absl::Status RecordEpoch(const EpochRecord& record) { return metrics_->RecordEpoch(record); }

  // After a rejoin status (common/rejoin.h): a new client, then the join
  // again (above). Gives up after 20 rejoins without a step in between.
  absl::Status Rejoin(const absl::Status& cause);
  // After Start or Rejoin, before the next step: finishes the sync step
  // whose gradient some shards already have, or pulls the parameters at
  // the position the shards gave.
  absl::Status Resume();

  // Every worker, once it has no step left: the final BARRIER, carrying
  // its report (steps, images, times).
  absl::Status ReportDone();
  // The chief, after the final evaluation: STATS, summary.json,
  // final_params.f32 and SHUTDOWN of every ps.
  absl::Status FinishChief();
  const proto::RunSummary& summary() const { return summary_; }

  // One line for the log at the end: overlap's early pushes, the replies'
  // pieces.
  int64_t early_pushes() const { return step_->early_pushes(); }
  int64_t pieces_received() const { return client_->pieces_received(); }
  // Examples this process has trained on.
  int64_t images() const { return images_; }

 private:
  WorkerRuntime(const ClusterSpec& cluster, WorkerRuntimeOptions options,
                const TransportSecurity& security);

  absl::Status Setup();
  absl::Status SetUpBuffers();
  absl::Status CheckInitialState() const;
  void LogSetup(const WireEncoding& wire) const;
  absl::Status CleanRunDir();
  absl::Status OpenMetrics();
  proto::JobConfig MakeJobConfig() const;
  absl::Status MakeClient(double connect_timeout_s);
  void MakeCheckpointer();
  // Joins the job: the chief recovers the shards (or INITs a fresh job),
  // then every worker registers. `first`: this process's first join.
  absl::Status Join(bool first);
  // What STATS says of the shards: which are empty (their ps restarted),
  // the live ones' highest generation and version, and how many
  // generations the live ones are at (sync: more than one is a torn
  // rollback, to be done again).
  struct ShardCensus {
    std::vector<int> empty;
    std::vector<std::string> names;  // of the empty shards' ps tasks
    int64_t max_generation = 0;
    int64_t max_version = 0;
    int64_t min_version = 0;
    int generations = 0;
    // [shard] the highest term any ps gave it: serving it, or holding
    // its replica
    std::vector<int64_t> max_term;
    static ShardCensus Of(const std::vector<proto::ShardStats>& stats);
  };
  absl::Status RecoverShards(bool first);
  // After a restore from checkpoint `m`: what was restored and lost, into
  // recoveries.json and the summary.
  void RecordCheckpointRecovery(const proto::CheckpointManifest& m,
                                const std::vector<proto::ShardStats>& stats,
                                const ShardCensus& census, int64_t t0);
  absl::Status InitFresh();
  // Shard `shard`'s initial state (parameters from params(), then the
  // slots: options' initial_slots, or fresh ones) and its segments' step
  // counts (empty: fresh).
  absl::Status InitialShardState(int shard, std::vector<float>* state,
                                 std::vector<int64_t>* segment_updates) const;
  // No usable checkpoint: the shards of `scope` go back to the job's
  // initial parameters (sync: every shard, rolled back together).
  absl::Status RestoreInitialState(const RestoreScope& scope, const std::vector<int>& empty,
                                   int64_t max_version, int64_t t0);
  // --ps_replicas: restores each of the `empty` shards from its standby
  // (the next ps), at `generation`; nothing is rolled back. `max_version`:
  // the live shards' newest (CheckReplicaUsable).
  absl::Status RestoreFromStandbys(const std::vector<int>& empty, int64_t generation,
                                   int64_t max_version, int64_t t0);
  // Sync: FailedPrecondition when a replica at `replica_version` is more
  // than one version behind `max_version` (no step joins them up).
  absl::Status CheckReplicaUsable(int shard, int64_t replica_version, int64_t max_version) const;
  // Failover (--ps_replicas, --failover_after_s;
  // docs/decisions/0016-failover-terms-and-failback.md). Waits for a ps to
  // serve every shard; the chief has the standby of a shard whose ps stays
  // away failover_after_s serve it.
  absl::Status WaitForShards();
  // Chief: each of `shards` (no ps serves them) is adopted by its standby
  // when that standby holds a usable replica of it; recorded.
  void FailOver(const std::vector<int>& shards);
  // Chief: each of `shards` (adopted, and its own ps answers again) goes
  // back to its own ps: RELEASE, then RESTORE from the released state.
  absl::Status FailBack(const std::vector<int>& shards);
  // Chief: a shard served at an older term than its standby's replica (a
  // give-back cut short by the chief's death) is restored from it.
  absl::Status RestoreStaleFromStandbys(const std::vector<proto::ShardStats>& stats, int64_t t0);
  absl::Status RegisterAndPosition(bool first);
  // The job the chief started differs from this worker's: FailedPrecondition
  // naming the flag, or the first tensor of the layout that differs.
  absl::Status CheckJobMatches(const proto::JobConfig& job) const;
  // Where this worker's layout differs from the one of `job` (the chief's):
  // the first tensor that does, named; "" when they are the same.
  std::string LayoutDifference(const proto::JobConfig& job) const;
  // Sync, after a rejoin: whether the shards are split between the step
  // whose gradient this worker still holds and the next (a shard restored
  // from its standby lost that gradient), and if so, sends it to those.
  bool CanFinishPushedStep() const;
  absl::Status FinishPushedStep();
  // With a standby (--ps_replicas), the step's row gradients as
  // EmbeddingPush sent them: a shard restored from its standby lost them
  // with the step's dense gradient, and FinishPushedStep sends both again.
  struct SentRows {
    int64_t step = -1;
    int num_examples = 0;
    struct Table {
      EmbeddingRows rows;  // ids and grads point into the vectors below
      std::vector<int64_t> ids;
      std::vector<float> grads;
    };
    std::vector<Table> tables;
  };
  SentRows sent_rows_;
  // Sends sent_rows_ again to the shards `to`, when they are of the step
  // in flight.
  absl::Status ResendRows(const std::vector<bool>& to);
  // Sync, after joining: whether this rank's gradient of global_step_ is
  // in on some shards (their clock is one past it) and not on others: the
  // process before this one died between its pushes. If so, pulls that
  // version's parameters from every shard (those past it keep them), so
  // that the step's gradient is computed again exactly; the shards that
  // have it count the repeat once (PushResult::kDuplicate).
  bool StepPartlyPushed() const;
  absl::Status PullForPartlyPushedStep();
  void RecordRecovery(proto::Recovery recovery);
  absl::Status AddRecoveries(proto::RunSummary* summary) const;
  void SetSummaryConfiguration(const std::vector<proto::ShardStats>& stats);
  void UpdateVersions(const std::vector<ShardReply>& replies);
  // What the step that just pushed tells the metrics (global_step_ is still
  // its step).
  StepRecord MakeStepRecord(const StepInfo& info, const std::vector<int64_t>& computed_on,
                            double compute_ms, double comm_ms, int64_t ahead_us) const;

  ClusterSpec cluster_;
  TaskId task_;
  WorkerRuntimeOptions options_;
  TransportSecurity security_;
  int rank_ = 0;
  int num_workers_ = 1;  // a sparse spec's rank slots (ClusterSpec::kDynamicWorkerSlots)
  // A sparse spec (TFJob enableDynamicWorker): workers join and leave. Each
  // trains on the whole set in an order of its own, and the job ends when
  // the shards have applied total_steps_ updates
  // (docs/decisions/0036-dynamic-workers.md).
  bool dynamic_ = false;
  // The worker count the defaults of lr and momentum follow (0 when
  // dynamic: not known; EffectiveLearningRate).
  int lr_workers_ = 1;
  bool is_chief_ = false;

  std::unique_ptr<ShardPlan> plan_;
  // Flat buffers (the caller's, or own_*). Declared before client_ so that
  // they outlive it: the client sends the gradient (f32) or the encoder's
  // payloads without copying.
  std::vector<float> own_params_;
  std::vector<float> own_grads_;
  absl::Span<float> params_;
  absl::Span<float> grads_;
  std::unique_ptr<StepInFlight> step_;
  bool overlap_ = false;
  std::vector<int64_t> versions_;
  std::vector<ShardReply> replies_;
  std::vector<float> reduced_;  // REDUCE's average, before it goes into grads_
  std::optional<proto::StepSettings> step_settings_;  // SetStepSettings
  std::unique_ptr<PsClient> client_;
  PsClientOptions client_options_;
  int64_t prefetched_before_ = 0;               // prefetched_tables() of the clients replaced
  std::unique_ptr<Checkpointer> checkpointer_;  // chief with a checkpoint_dir

  // --metrics_port: the /metrics endpoint (before metrics_, which holds
  // instruments of its registry).
  std::unique_ptr<MetricsServer> metrics_server_;
  // CSVs, TensorBoard, timeline and Prometheus (set by OpenMetrics)
  std::unique_ptr<MetricsRecorder> metrics_;

  int64_t total_steps_ = 0;
  int64_t global_step_ = 0;
  int64_t start_step_ = 0;           // where this process began (a checkpoint's step on resume)
  std::vector<int64_t> pull_versions_;  // [shard] the version to pull after joining
  bool fresh_init_ = false;          // the chief INITed the job (not a rejoin or restore)
  std::string resumed_from_;         // chief: the checkpoint --restore continued from
  int rejoins_without_progress_ = 0;
  int64_t images_ = 0;
  proto::StepPhases phases_;  // the step log's columns, summed over this process's steps
  // StepInfo::backward_final's leads, summed per offset: {ms, steps}.
  absl::btree_map<int64_t, std::pair<double, int64_t>> backward_leads_;
  int64_t start_us_ = 0;             // monotonic, Create
  int64_t first_step_us_ = 0;        // monotonic
  int64_t first_step_unix_us_ = 0;
  int64_t last_step_unix_us_ = 0;
  double eval_seconds_ = 0;          // chief: evaluation inside the training window
  std::vector<EvalPoint> evals_;
  proto::RunSummary summary_;
};

}  // namespace pstrain

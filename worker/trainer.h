#pragma once

// A worker's training run, top to bottom:
//
//   wait for every ps -> chief: INIT the shards (or, with --resume, RESTORE
//                        them from the newest usable checkpoint)
//                      / others: REGISTER (which says where to start)
//   params = PULL(version 0)
//   for each epoch, for each step from the start position:
//     batch = this worker's slice of global batch s (DataSharder)
//     grads = model.ForwardBackward(batch, params)
//     params = PUSH_PULL(grads, computed on the versions of params)
//     chief: every N steps (and at the end), SAVE + manifest (Checkpointer)
//   chief: evaluate on the test set after each epoch but the last
//   BARRIER "done" (every worker has pushed its last gradient)
//   chief: evaluate the final parameters, STATS, summary.json,
//          final_params.f32, SHUTDOWN
//
// The chief is rank 0 (the spec's chief task, or worker 0 without one, as
// always in a sparse spec). A worker's first REGISTER waits at most
// register_timeout_s for the chief's INIT, then fails naming the chief.
//
// Recovery (issue 8; docs/design_notes.md, "Recovery"). A task restarted
// with the same command line rejoins the running job, and a running task
// whose ps restarted, died or was rolled back (a rejoin status,
// common/rejoin.h) makes a new client and joins again, waiting up to
// recovery_timeout_s for the ps to be back:
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

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"
#include "common/security.h"
#include "common/shard_plan.h"
#include "models/model.h"
#include "worker/checkpointer.h"
#include "worker/data_sharder.h"
#include "worker/gradient_encoder.h"
#include "worker/mnist_dataset.h"
#include "common/metrics_server.h"
#include "worker/metrics_recorder.h"
#include "worker/ps_client.h"
#include "worker/run_summary.h"
#include "worker/train_options.h"

namespace pstrain {

class Trainer {
 public:
  // Loads the data, builds the model and the shard plan, connects to the
  // ps tasks, opens the metrics CSVs in options.run_dir; before that the
  // chief (with options.clean_run_dir) removes the outputs an earlier run
  // left there (RemoveStaleRunOutputs, one log line). NotFound for missing
  // data, InvalidArgument for corrupt data or bad options. REQUIRES:
  // cluster.task() is a chief or worker task.
  // `security` says how the sockets to the ps tasks authenticate.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const ClusterSpec& cluster,
                                                         const TrainOptions& options,
                                                         const TransportSecurity& security);

  // Trains to the end. OK only if training finished (and, on the chief, the
  // summary was written and the ps tasks were shut down).
  absl::Status Run();

  // After Run: the chief's summary of the run.
  const proto::RunSummary& summary() const { return summary_; }

 private:
  Trainer(const ClusterSpec& cluster, const TrainOptions& options,
          const TransportSecurity& security);

  absl::Status Setup();
  absl::Status CleanRunDir();
  absl::Status OpenMetrics();
  proto::JobConfig MakeJobConfig() const;
  absl::Status MakeClient(double connect_timeout_s);
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
    static ShardCensus Of(const std::vector<proto::ShardStats>& stats);
  };
  absl::Status RecoverShards(bool first);
  // After a restore from checkpoint `m`: what was restored and lost, into
  // recoveries.json and the summary.
  void RecordCheckpointRecovery(const proto::CheckpointManifest& m,
                                const std::vector<proto::ShardStats>& stats,
                                const ShardCensus& census, int64_t t0);
  absl::Status InitFresh();
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
  // Failover (--ps_replicas, --failover_after_s; docs/design_notes.md,
  // "Failover"). Waits for a ps to serve every shard; the chief has the
  // standby of a shard whose ps stays away failover_after_s serve it.
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
  // After a rejoin status: a new client, then Join(false).
  absl::Status Rejoin(const absl::Status& cause);
  absl::Status TrainToEnd();
  // Sync, after a rejoin: whether the shards are split between the step
  // whose gradient this worker still holds and the next (a shard restored
  // from its standby lost that gradient), and if so, sends it to those.
  bool CanFinishPushedStep() const;
  absl::Status FinishPushedStep();
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
  absl::Status CheckJobMatches(const proto::JobConfig& job) const;
  void MakeCheckpointer();
  absl::Status TrainLoop();
  void MaybeCheckpoint();
  bool TrainingDone() const;
  // The lowest version the shards answered with.
  int64_t MinVersion() const;
  // The epoch the job is in: this worker's (its steps), or, with dynamic
  // workers, the shards' (their updates).
  int JobEpoch() const;
  absl::Status Step(int epoch, int64_t step_in_epoch);
  absl::Status ComputeGradients(int epoch, int64_t step_in_epoch, float* loss);
  // Overlap: the step's push/pull is prepared before backward, and each
  // shard whose gradient (flat offsets from `begin` on) is final goes out.
  void StartOverlappedPush(int num_examples);
  void SendReadyShards(int64_t begin);
  // The step's push/pull: the rest of an overlapped one, or all of it.
  absl::Status PushAndPull(int num_examples, const std::vector<int64_t>& computed_on);
  // Gathers the examples `indices` of data epoch `epoch` into the model's
  // input buffer.
  absl::StatusOr<models::Batch> LoadBatch(int epoch, const std::vector<int64_t>& indices);
  // Forward ahead: between this step's sends and its replies, runs the
  // next step's forward, each layer once its parameters are in. Does
  // nothing where the loop will not go straight on to that step. An error
  // is the step's own (its replies failed).
  absl::Status ForwardAhead();
  absl::Status Evaluate(int epoch, bool epoch_end);
  absl::Status EndEpoch(int epoch);
  // Every worker: the final BARRIER, carrying its report.
  absl::Status ReportDone();
  // The chief, after the final evaluation: STATS, summary.json, SHUTDOWN.
  absl::Status FinishChief();
  void UpdateVersions(const std::vector<ShardReply>& replies);
  double TrainSeconds() const;
  // What the step that just pushed tells the metrics (global_step_ is still
  // its step).
  StepRecord MakeStepRecord(int epoch, int64_t step_in_epoch, float loss, int examples,
                            const std::vector<int64_t>& computed_on, double compute_ms,
                            double comm_ms) const;

  ClusterSpec cluster_;
  TaskId task_;
  TrainOptions options_;
  TransportSecurity security_;
  int rank_ = 0;
  int num_workers_ = 1;  // a sparse spec's rank slots (ClusterSpec::kDynamicWorkerSlots)
  // A sparse spec (TFJob enableDynamicWorker): workers join and leave. Each
  // trains on the whole set in an order of its own, and the job ends when
  // the shards have applied total_steps_ updates (docs/design_notes.md,
  // "Dynamic workers").
  bool dynamic_ = false;
  // The worker count the default learning rate scales with (1 when dynamic).
  int lr_workers_ = 1;
  bool is_chief_ = false;
  Normalization norm_;

  Dataset train_;
  Dataset test_;  // chief only
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<ShardPlan> plan_;
  std::unique_ptr<DataSharder> sharder_;

  // Flat buffers. Declared before client_ so they outlive it: the client
  // sends grads_ (f32) or the encoder's payloads without copying.
  std::vector<float> params_;
  std::vector<float> grads_;
  // --wire: grads_ as each shard's push carries it, with error feedback.
  std::unique_ptr<GradientEncoder> encoder_;
  // Overlap (--overlap, a backend that reports backward's progress): the
  // model calls it after each layer's backward; it sends the shards whose
  // gradient is complete (SendReadyShards).
  std::function<void(int64_t begin)> backward_done_;
  bool overlap_ = false;
  // [shard] encoded and handed to the client during this step's backward.
  // Not the client's own "sent" (PendingStep::sent, which a failed send
  // leaves false): this says the encoder's error-feedback residual already
  // counts the shard, so PushAndPull must not encode it again.
  std::vector<bool> shard_encoded_;
  int64_t early_pushes_ = 0;  // shard pushes sent before backward's last layer
  // Forward ahead (--forward_ahead, a backend with Model::ForwardAhead):
  // ahead_step_ is the step whose forward has run on ahead_indices_, on
  // the parameters params_ holds (-1: none). Anything else that writes
  // params_ or uses the model must reset it (TrainToEnd, Evaluate do).
  bool forward_ahead_ = false;
  int64_t ahead_step_ = -1;
  std::vector<int64_t> ahead_indices_;
  // The forward ahead run during this step's push/pull (gather and layers,
  // not its waits): the step log counts it as compute of this step, when
  // it ran (StepRecord::ahead_ms).
  int64_t ahead_compute_us_ = 0;
  int64_t forwards_ahead_ = 0;  // steps whose forward ran ahead
  std::vector<int64_t> indices_;
  std::vector<int64_t> versions_;
  std::vector<ShardReply> replies_;
  std::vector<models::LayerSpan> layer_spans_;  // the step's, with --timeline
  std::unique_ptr<PsClient> client_;
  PsClientOptions client_options_;
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
  bool final_evaluated_ = false;     // chief: the final model was evaluated
  std::string resumed_from_;         // chief: the checkpoint --restore continued from
  int rejoins_without_progress_ = 0;
  // The step whose gradient grads_ holds, its weight and the versions it
  // was computed on (-1: none yet in this process).
  int64_t pushed_step_ = -1;
  int pushed_examples_ = 0;
  std::vector<int64_t> pushed_on_;
  int64_t images_ = 0;
  int64_t start_us_ = 0;             // monotonic, Create
  int64_t first_step_us_ = 0;        // monotonic
  int64_t first_step_unix_us_ = 0;
  int64_t last_step_unix_us_ = 0;
  double eval_seconds_ = 0;          // chief: evaluation inside the training window
  double epoch_loss_sum_ = 0;
  int64_t epoch_loss_count_ = 0;
  int64_t epoch_start_step_ = 0;
  int64_t epoch_start_version_ = 0;  // dynamic: the job's epochs go by the shards' version
  int last_epoch_ = 0;
  double epoch_start_train_s_ = 0;
  std::vector<EvalPoint> evals_;
  proto::RunSummary summary_;
};

}  // namespace pstrain

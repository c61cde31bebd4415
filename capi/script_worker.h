#pragma once

// The C API's worker (include/pstrain/c_api.h): the worker runtime driven
// one call at a time by a script that owns the model and the data (Python,
// pstrain.torch). On top of the runtime it keeps
//  - the calls' order (BeginStep .. TensorReady .. EndStep; Finish once
//    done; Close after Finish): a call out of order is a usage error
//    (IsUsageError) and changes nothing;
//  - recovery inside the step: a rejoin status from EndStep or Finish is
//    answered there (WorkerRuntime::Rejoin, Resume), so a script sees at
//    most its position move;
//  - a latched failure: after a run-time error every later call returns it;
//  - the chief's epochs: an evaluation logged at an epoch's end also ends
//    that epoch (epochs.csv, the "epoch E/N done" line);
//  - forward ahead (the job option "forward_ahead", async and SSP):
//    EndStep sends the step's gradient and returns at once, a thread of
//    its own takes the reply while the script computes the next step on
//    the parameters its model holds (the step before's: each gradient one
//    update staler), and the next EndStep (or any other call but those of
//    a step under way) lands it: the reply's parameters go into the
//    script's buffer then, never while the script computes. The runtime
//    works on buffers of its own meanwhile.
//
// Thread safety: none (one caller at a time; see c_api.h); the thread of
// a step in flight touches only the runtime, which nothing else touches
// until it is landed.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/node_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/cluster_spec.h"
#include "common/optimizer.h"
#include "common/shard_plan.h"
#include "google/protobuf/struct.pb.h"
#include "models/layer_span.h"
#include "transport/security.h"
#include "worker/train_options.h"
#include "worker/worker_runtime.h"

namespace pstrain {

// What the environment says of this process (c_api.h lists the variables),
// as read once by PstrainTaskCreateFromEnv.
struct TaskEnvironment {
  std::optional<std::string> tf_config;  // TF_CONFIG
  std::string secret_file;               // PSTRAIN_SECRET_FILE
  bool insecure = false;                 // PSTRAIN_INSECURE=1
  std::string run_dir;                   // PSTRAIN_RUN_DIR
  std::string flags_json;                // PSTRAIN_FLAGS: a JSON array of "--name=value"
};

// This process's task, resolved.
struct ScriptTask {
  ClusterSpec cluster;
  TransportSecurity security;
  TrainOptions train;  // the job's flags, run_dir the environment's
  int rank = 0;
  int num_workers = 1;
  bool chief = false;
  bool dynamic = false;

  // InvalidArgument naming the variable for anything missing or malformed.
  static absl::StatusOr<ScriptTask> Resolve(const TaskEnvironment& env);
};

// The job a script with options `job_json` (c_api.h, PstrainWorkerCreate)
// would start under `task`'s flags, as a JSON object: "mode" (sync, async,
// ssp), "num_workers", "backup_workers", "staleness", "optimizer" and its
// options as they reach the ps ("lr", the default when the flags and the
// options give none; "momentum", "nesterov", "weight_decay", "beta1",
// "beta2", "eps", "lr_decay", "initial_accumulator"). InvalidArgument for
// a bad option, as PstrainWorkerCreate's.
absl::StatusOr<std::string> DescribeJob(const ScriptTask& task, const std::string& job_json);

// The job option "embedding_tables" (c_api.h, PstrainWorkerCreate): an
// array of tables, each an object of "name", "dim", "num_embeddings",
// "optimizer", "lr", "eps", "beta1", "beta2", "initial_accumulator",
// "init" ("normal" or "uniform"), "init_std", "admit_after",
// "evict_after_steps", "max_rows_per_ps". InvalidArgument naming the
// table and the key for anything else or a bad value
// (ValidateEmbeddingTables).
absl::StatusOr<std::vector<proto::EmbeddingTableConfig>> EmbeddingTablesFromJson(
    const google::protobuf::Value& value);

// A misuse of the API (a call out of order, a bad argument): the status
// says what, and nothing happened.
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

class ScriptWorker {
 public:
  // Joins the job (WorkerRuntime: Create, Connect, Start, Resume) with the
  // layout `tensors` over the caller's buffers (borrowed). `job_json`: the
  // script's options over the job's flags (c_api.h, PstrainWorkerCreate).
  // InvalidArgument for a bad option or layout; FailedPrecondition when the
  // chief's job differs (the message names the flag or the tensor).
  // `initial_slots`, `initial_tensor_updates` (empty: none): the chief's
  // initial optimizer state (WorkerRuntimeOptions), ignored elsewhere.
  // `job_json`'s "tensor_groups": each tensor's parameter group.
  static absl::StatusOr<std::unique_ptr<ScriptWorker>> Create(
      const ScriptTask& task, const std::string& job_json, std::vector<TensorSlot> tensors,
      absl::Span<float> params, absl::Span<float> grads, std::vector<float> initial_slots = {},
      std::vector<int64_t> initial_tensor_updates = {});

  ~ScriptWorker();

  // With a step in flight (forward ahead): where the job is for this
  // worker once it lands well.
  int64_t global_step() const {
    return flight_.thread.joinable() ? flight_.next_step : runtime_->global_step();
  }
  int64_t total_steps() const { return runtime_->total_steps(); }
  // The shards' versions of params() now (WorkerRuntime::versions()).
  const std::vector<int64_t>& versions() const { return runtime_->versions(); }
  int64_t steps_per_epoch() const { return runtime_->steps_per_epoch(); }
  // How many times this worker rejoined the job (a ps went away): each
  // may have rewritten the script's parameters with the job's.
  int64_t rejoins() const { return rejoins_; }
  bool done() const {
    if (finished_) return true;
    return flight_.thread.joinable() ? flight_.next_step >= total_steps()
                                     : runtime_->TrainingDone();
  }
  // Forward ahead: the step in flight's reply into the script's buffer now
  // (the model then holds the newest parameters: for an evaluation, a
  // state_dict); nothing without one. Its failure is EndStep's would be.
  // A usage error inside a step.
  absl::Status Land();
  // The script gave the job no length: it says when it is done (Finish).
  bool open_ended() const { return open_ended_; }
  int num_tensors() const { return num_tensors_; }
  // Floats of the flat buffers.
  int64_t num_floats() const { return static_cast<int64_t>(script_params_.size()); }

  absl::Status BeginStep(int num_examples);
  // The step's examples, learned after BeginStep (a step begun by a
  // forward whose backward never ran: 0), for the push and the Reduce
  // calls after it. A usage error once a tensor of the step is ready.
  absl::Status SetStepExamples(int num_examples);
  absl::Status TensorReady(int tensor);
  // Whether the job writes a timeline (--timeline): a caller records its
  // layers' spans only then.
  bool timeline() const { return runtime_->options().timeline; }
  // A span of the step under way for the timeline: `layer`'s forward or
  // backward pass from `start_unix_us` for `duration_us` (the Unix clock,
  // as the step's spans), drawn inside the step's compute span. Nothing
  // without a timeline; past kMaxLayerSpans spans in a step or
  // kMaxLayerNames names in all, the rest are left out (one warning).
  // Usage errors: no step under way, an empty name, a negative start or a
  // duration outside [0, kMaxSpanUs].
  absl::Status LayerSpan(absl::string_view layer, bool backward, int64_t start_unix_us,
                         int64_t duration_us);
  static constexpr size_t kMaxLayerSpans = 1 << 16;
  static constexpr size_t kMaxLayerNames = 1 << 12;
  static constexpr int64_t kMaxSpanUs = int64_t{86400} * 1000 * 1000;
  // The step's optimizer settings: `groups` (one per parameter group) and
  // the tensors without a gradient (`absent`, any order). Every push from
  // then on carries them. InvalidArgument (a configuration error) for a
  // value the optimizer refuses; a usage error for a group count other
  // than the layout's or a tensor outside it, or no step under way.
  absl::Status SetStepOptions(const std::vector<proto::GroupSettings>& groups,
                              std::vector<int32_t> absent);
  // Sync: the workers' averaged gradient of the step into grads (REDUCE).
  // `*absent_everywhere`: the tensors no worker had a gradient for.
  // *reduced false: no average came (the job went past this step, or a
  // ps was rejoined meanwhile: the step is then void and EndStep pushes
  // nothing). A usage error outside a step, or in a job that is not sync
  // (or has backup workers).
  absl::Status Reduce(std::vector<int32_t> absent, std::vector<int32_t>* absent_everywhere,
                      bool* reduced);
  // Embedding tables (the job's "embedding_tables", in order). The rows of
  // table `table`'s `ids` into `rows` (ids.size() x dim), as the ps holds
  // them now (in sync: after the versions this worker has pulled; inside
  // a step, those the last step's EmbeddingPrefetch brought, where it
  // holds the table's ids). Any time after Create. Usage errors: a table outside the job, repeated
  // ids, ids outside num_embeddings, `rows` of the wrong size.
  absl::Status EmbeddingPull(int table, absl::Span<const int64_t> ids, absl::Span<float> rows);
  // Several tables' rows at once (each EmbeddingRows's table, ids and
  // rows; dim is filled in), one request to each ps for all of them: a
  // forward of many tables waits for one reply per ps, not one per table.
  // Usage errors as EmbeddingPull's, for each.
  absl::Status EmbeddingPull(absl::Span<EmbeddingRows> requests);
  // The step's row gradients of table `table` (ids.size() x dim floats;
  // copied), sent at EndStep before the dense gradient. A table with none
  // this step is left alone, as torch.optim leaves a parameter whose .grad
  // is None. Usage errors as EmbeddingPull's, no step under way, a table
  // given twice in a step, a gradient that is not finite.
  // `lr`: the table's learning rate for this update (< 0: its own).
  absl::Status EmbeddingGrad(int table, absl::Span<const int64_t> ids,
                             absl::Span<const float> grads, double lr = -1);
  // Async: the next forward's rows of these tables' ids (each
  // EmbeddingRows's table and ids; dim is filled in) asked for behind the
  // next EndStep's push and answered with it, so that the step and the
  // next forward's rows are one round trip (WorkerRuntime::
  // StageEmbeddingPrefetch); an EmbeddingPull inside the step after it,
  // of a table's same ids in the same order, takes them. Sync and SSP:
  // nothing. Usage errors as EmbeddingPull's, and more staged for one
  // step than one request may hold.
  absl::Status EmbeddingPrefetch(absl::Span<EmbeddingRows> requests);
  // Table reads a prefetch answered so far.
  int64_t prefetched_tables() const { return runtime_->prefetched_tables(); }
  int num_tables() const { return job_.tables_size(); }
  int table_dim(int table) const { return job_.tables(table).dim(); }
  // The optimizer's state on the shards (WorkerRuntime::ReadOptimizerState).
  // A usage error inside a step.
  absl::Status OptimizerState(std::vector<float>* slots, std::vector<int64_t>* tensor_updates);
  // The slots of the job's optimizer (common/optimizer.h).
  int num_slots() const { return NumSlots(optimizer_); }
  // JobFinished (common/rejoin.h) when the job ended without this worker.
  absl::Status EndStep(double loss);
  absl::Status LogEvaluation(double accuracy, double loss, double seconds);
  absl::Status Finish();
  absl::Status Close();

 private:
  explicit ScriptWorker(std::unique_ptr<WorkerRuntime> runtime, int num_tensors);

  // Answers rejoin statuses (Rejoin, then Resume) until a call succeeds or
  // fails otherwise.
  absl::Status Recover(absl::Status status);
  // A run-time failure is kept and returned by every later call.
  absl::Status Latch(absl::Status status);
  absl::Status EndEpoch(const EvalPoint& eval);
  // Checks a call's table, ids and row count (usage errors named after `call`).
  absl::Status CheckEmbeddingCall(absl::string_view call, int table, absl::Span<const int64_t> ids,
                                  size_t floats) const;
  // EndStep: the step's row gradients to every ps (every table: those with
  // none marked so), then cleared.
  absl::Status PushEmbeddingGrads();
  // Sorts `absent` and drops repeats; a usage error, named after `call`,
  // for a tensor outside the layout.
  absl::Status SortAbsent(absl::string_view call, std::vector<int32_t>* absent) const;
  // EndStep's end once the runtime's (`s`) is over: a checkpoint when due,
  // the step in the epoch's count; a rejoin answered (`*recovered`, may be
  // null, says so).
  absl::Status AfterStep(absl::Status s, int examples, double loss, bool* recovered);
  // Forward ahead: joins the step in flight, and AfterStep; with
  // `to_script` (and after a rejoin), the parameters it brought into the
  // script's buffer. `*recovered` (may be null): a rejoin was answered.
  absl::Status LandFlight(bool to_script, bool* recovered = nullptr);
  // Forward ahead: the runtime's parameters into the script's buffer, and
  // their versions as those the script's next step computes on.
  void ParamsToScript();

  std::unique_ptr<WorkerRuntime> runtime_;
  int num_tensors_ = 0;
  absl::Status failed_;
  bool open_ended_ = false;
  bool in_step_ = false;
  bool step_void_ = false;     // a rejoin inside the step: EndStep pushes nothing
  int64_t rejoins_ = 0;        // Rejoin calls so far (rejoins())
  uint32_t reduce_round_ = 0;  // the step's Reduce calls so far
  bool finished_ = false;      // Finish returned OK
  proto::JobConfig job_;       // this worker's job (the layout, the optimizer)
  OptimizerConfig optimizer_;  // the job's, from job_
  bool closed_ = false;
  std::vector<bool> tensor_ready_;
  // The step's row gradients by table (EmbeddingGrad).
  struct TableGrads {
    bool has_grad = false;
    double lr = -1;
    std::vector<int64_t> ids;
    std::vector<float> grads;
  };
  std::vector<TableGrads> table_grads_;
  StepInfo step_;
  // This step's layer spans (StepInfo::layers), and the layers' names they
  // point into (a node set: the names stay where they are).
  std::vector<models::LayerSpan> layer_spans_;
  absl::node_hash_set<std::string> layer_names_;
  int64_t last_step_end_us_ = 0;  // monotonic
  // Forward ahead: the script's buffers (the runtime has its own), the
  // versions of the parameters the script's model holds, and the step in
  // flight: its thread, what it returned, its record (info, spans), and
  // the step after it.
  bool ahead_ = false;
  absl::Span<float> script_params_;
  absl::Span<float> script_grads_;
  std::vector<int64_t> model_versions_;
  std::optional<proto::StepSettings> step_settings_;  // for the next EndStep
  struct Flight {
    std::thread thread;
    absl::Status status;
    StepInfo info;
    double loss = 0;
    std::vector<models::LayerSpan> spans;
    int64_t next_step = 0;
  };
  Flight flight_;
  // The epoch being trained, for epochs.csv: where it began.
  EpochMeter epoch_;  // the chief's
  int64_t last_epoch_logged_ = -1;
};

}  // namespace pstrain

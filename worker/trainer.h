#pragma once

// The C++ worker's training run: a model of models/ on MNIST-format data,
// one client of the worker runtime (worker/worker_runtime.h), which does
// everything that is not the model (joining, the push/pull of each step,
// update modes, recovery, checkpoints, metrics, the summary). Top to
// bottom:
//
//   runtime: wait for every ps, join (the chief INITs the shards with the
//            model's initial parameters, or RESTOREs them), pull
//   for each epoch, for each step from the runtime's position:
//     batch = this worker's slice of global batch s (DataSharder)
//     grads = model.ForwardBackward(batch, params), each shard pushed as
//             soon as backward has finished it
//     params = the runtime's replies; chief: checkpoint when due
//   chief: evaluate on the test set after each epoch but the last
//   runtime: BARRIER "done" (every worker has pushed its last gradient)
//   chief: evaluate the final parameters; runtime: STATS, summary.json,
//          final_params.f32, SHUTDOWN
//
// The chief is rank 0 (the spec's chief task, or worker 0 without one, as
// always in a sparse spec). A worker's first REGISTER waits at most
// register_timeout_s for the chief's INIT, then fails naming the chief.
// After a rejoin (worker_runtime.h, "Recovery") the loop continues from
// the position the runtime gives.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cancellation.h"
#include "common/cluster_spec.h"
#include "dataset/data_sharder.h"
#include "dataset/mnist_dataset.h"
#include "models/model.h"
#include "transport/security.h"
#include "worker/train_options.h"
#include "worker/worker_runtime.h"

namespace pstrain {

class Trainer {
 public:
  // Loads the data, builds the model and the worker runtime (the shard
  // plan, the connection to the ps tasks, the metrics endpoint). NotFound
  // for missing data, InvalidArgument for corrupt data or bad options.
  // REQUIRES: cluster.task() is a chief or worker task.
  // `security` says how the sockets to the ps tasks authenticate; `cancel`
  // stops Run's waits (Cancelled; worker/main.cc passes its SIGINT/SIGTERM;
  // borrowed, null: never).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const ClusterSpec& cluster,
                                                         const TrainOptions& options,
                                                         const TransportSecurity& security,
                                                         const Cancellation* cancel = nullptr);

  // Trains to the end. OK only if training finished (and, on the chief, the
  // summary was written and the ps tasks were shut down).
  absl::Status Run();

  // After Run: the chief's summary of the run.
  const proto::RunSummary& summary() const { return runtime_->summary(); }

 private:
  Trainer(const ClusterSpec& cluster, const TrainOptions& options,
          const TransportSecurity& security, const Cancellation* cancel);

  absl::Status Setup();
  absl::Status TrainToEnd();
  absl::Status TrainLoop();
  absl::Status Step(int epoch, int64_t step_in_epoch);
  absl::Status ComputeGradients(int epoch, int64_t step_in_epoch, float* loss);
  // Gathers the examples `indices` of data epoch `epoch` into the model's
  // input buffer.
  absl::StatusOr<models::Batch> LoadBatch(int epoch, const std::vector<int64_t>& indices);
  // Forward ahead: between this step's sends and its replies, runs the
  // next step's forward, each layer once `wait_params` says its parameters
  // are in. Does nothing where the loop will not go straight on to that
  // step. An error is the step's own (its replies failed). `*compute_us`:
  // the compute it ran (gather and layers, not its waits).
  absl::Status ForwardAhead(const WaitParamsFn& wait_params, int64_t* compute_us);
  absl::Status Evaluate(int epoch, bool epoch_end);
  absl::Status EndEpoch(int epoch);

  ClusterSpec cluster_;
  TaskId task_;
  TrainOptions options_;
  TransportSecurity security_;
  const Cancellation* cancel_;  // borrowed; null: never
  int rank_ = 0;
  int num_workers_ = 1;
  bool dynamic_ = false;
  bool is_chief_ = false;
  Normalization norm_;

  Dataset train_;
  Dataset test_;  // chief only
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<DataSharder> sharder_;
  std::unique_ptr<WorkerRuntime> runtime_;

  // Overlap (--overlap, a backend that reports backward's progress): the
  // model calls it after each layer's backward; the runtime sends the
  // shards whose gradient is complete (with two or more ps: overlap_), and
  // the step records each offset and when (StepInfo::backward_final).
  std::function<void(int64_t begin)> backward_done_;
  std::vector<std::pair<int64_t, int64_t>> backward_final_;
  bool overlap_ = false;
  // Forward ahead (--forward_ahead, a backend with Model::ForwardAhead):
  // ahead_step_ is the step whose forward has run on ahead_indices_, on
  // the parameters the runtime holds (-1: none). Anything else that
  // writes the parameters or uses the model must reset it (TrainToEnd,
  // Evaluate do).
  bool forward_ahead_ = false;
  int64_t ahead_step_ = -1;
  std::vector<int64_t> ahead_indices_;
  int64_t forwards_ahead_ = 0;  // steps whose forward ran ahead
  std::vector<int64_t> indices_;
  std::vector<models::LayerSpan> layer_spans_;  // the step's, with --timeline

  bool final_evaluated_ = false;     // chief: the final model was evaluated
  EpochMeter epoch_;  // the chief's; dynamic: the job's epochs go by the shards' version
  int last_epoch_ = 0;
};

}  // namespace pstrain

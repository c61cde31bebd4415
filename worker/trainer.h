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
// The chief is rank 0 (the spec's chief task, or worker 0 without one).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"
#include "common/security.h"
#include "common/csv.h"
#include "common/shard_plan.h"
#include "models/model.h"
#include "worker/checkpointer.h"
#include "worker/data_sharder.h"
#include "worker/mnist_dataset.h"
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
  absl::Status JoinJob();
  absl::Status CheckJobMatches(const proto::JobConfig& job) const;
  void MakeCheckpointer();
  absl::Status TrainLoop();
  void MaybeCheckpoint();
  bool TrainingDone() const;
  absl::Status Step(int epoch, int64_t step_in_epoch);
  absl::Status ComputeGradients(int epoch, int64_t step_in_epoch, float* loss);
  absl::Status Evaluate(int epoch, bool epoch_end);
  absl::Status EndEpoch(int epoch);
  // Every worker: the final BARRIER, carrying its report.
  absl::Status ReportDone();
  // The chief, after the final evaluation: STATS, summary.json, SHUTDOWN.
  absl::Status FinishChief();
  void UpdateVersions(const std::vector<ShardReply>& replies);
  double TrainSeconds() const;
  void LogProgress(int epoch, int64_t step_in_epoch, float loss);

  ClusterSpec cluster_;
  TaskId task_;
  TrainOptions options_;
  TransportSecurity security_;
  int rank_ = 0;
  int num_workers_ = 1;
  bool is_chief_ = false;
  Normalization norm_;

  Dataset train_;
  Dataset test_;  // chief only
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<ShardPlan> plan_;
  std::unique_ptr<DataSharder> sharder_;

  // Flat buffers. Declared before client_ so they outlive it: the client
  // sends grads_ without copying.
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<float> batch_images_;
  std::vector<int32_t> batch_labels_;
  std::vector<uint64_t> batch_keys_;
  std::vector<int64_t> indices_;
  std::vector<int64_t> versions_;
  std::vector<ShardReply> replies_;
  std::unique_ptr<PsClient> client_;
  std::unique_ptr<Checkpointer> checkpointer_;  // chief with a checkpoint_dir

  std::unique_ptr<CsvWriter> steps_csv_;
  std::unique_ptr<CsvWriter> evals_csv_;
  std::unique_ptr<CsvWriter> epochs_csv_;

  int64_t total_steps_ = 0;
  int64_t global_step_ = 0;
  int64_t start_step_ = 0;           // where this run began (a checkpoint's step on resume)
  int64_t images_ = 0;
  int64_t start_us_ = 0;             // monotonic, Create
  int64_t first_step_us_ = 0;        // monotonic
  int64_t first_step_unix_us_ = 0;
  int64_t last_step_unix_us_ = 0;
  double eval_seconds_ = 0;          // chief: evaluation inside the training window
  double epoch_loss_sum_ = 0;
  int64_t epoch_loss_count_ = 0;
  int64_t epoch_start_step_ = 0;
  int last_epoch_ = 0;
  double epoch_start_train_s_ = 0;
  std::vector<EvalPoint> evals_;
  proto::RunSummary summary_;
};

}  // namespace pstrain

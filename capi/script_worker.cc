#include "capi/script_worker.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/optimizer.h"
#include "common/param_groups.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "common/update_mode.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr absl::string_view kUsagePayload = "pstrain/usage";
// The length of a job the script gives none.
constexpr int64_t kOpenEndedSteps = int64_t{1} << 40;

// The job's flags: PSTRAIN_FLAGS, a JSON array of "--name=value".
absl::StatusOr<std::vector<std::string>> FlagsFromJson(const std::string& text) {
  std::vector<std::string> args;
  if (text.empty()) return args;
  ASSIGN_OR_RETURN(const google::protobuf::Value v, ParseJson(text, "PSTRAIN_FLAGS"));
  if (v.kind_case() != google::protobuf::Value::kListValue) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PSTRAIN_FLAGS: expected a JSON array of \"--name=value\" strings, got ", JsonKindName(v)));
  }
  for (const google::protobuf::Value& item : v.list_value().values()) {
    if (item.kind_case() != google::protobuf::Value::kStringValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("PSTRAIN_FLAGS: every item must be a string, got ", JsonKindName(item)));
    }
    args.push_back(item.string_value());
  }
  return args;
}

// A JSON value as a flag's text: numbers exactly, booleans true/false.
absl::StatusOr<std::string> FlagText(const std::string& key, const google::protobuf::Value& v) {
  switch (v.kind_case()) {
    case google::protobuf::Value::kNumberValue:
      return absl::StrFormat("%.17g", v.number_value());
    case google::protobuf::Value::kBoolValue:
      return std::string(v.bool_value() ? "true" : "false");
    case google::protobuf::Value::kStringValue:
      return v.string_value();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("job option \"", key, "\": expected a number, a boolean or a string, got ",
                       JsonKindName(v)));
  }
}

// The most epochs a script's job has (total_steps over steps_per_epoch).
constexpr int64_t kMaxScriptEpochs = int64_t{1} << 30;

absl::StatusOr<int64_t> WholeNumber(const std::string& key, const google::protobuf::Value& v) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue || v.number_value() < 0 ||
      v.number_value() != std::floor(v.number_value()) || v.number_value() > 1e15) {
    return absl::InvalidArgumentError(
        absl::StrCat("job option \"", key, "\": expected a whole number >= 0"));
  }
  return static_cast<int64_t>(v.number_value());
}

// The script's job options (c_api.h, PstrainWorkerCreate) over the job's
// flags, into `ro`. `*open_ended`: the options give the job no length.
absl::Status ApplyJobOptions(const std::string& job_json, WorkerRuntimeOptions* ro,
                             bool* open_ended, std::vector<int>* tensor_groups,
                             bool* forward_ahead) {
  google::protobuf::Value v;
  v.mutable_struct_value();
  if (!job_json.empty()) {
    ASSIGN_OR_RETURN(v, ParseJson(job_json, "job options"));
  }
  if (v.kind_case() != google::protobuf::Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat("job options: expected a JSON object, got ", JsonKindName(v)));
  }
  std::vector<std::string> args = ro->train.ToArgs();
  *open_ended = true;
  for (const auto& [key, value] : v.struct_value().fields()) {
    if (key == "steps_per_epoch") {
      ASSIGN_OR_RETURN(ro->steps_per_epoch, WholeNumber(key, value));
      *open_ended = false;
    } else if (key == "total_steps") {
      ASSIGN_OR_RETURN(ro->total_steps, WholeNumber(key, value));
      *open_ended = *open_ended && ro->total_steps == 0;
    } else if (key == "device") {
      ASSIGN_OR_RETURN(ro->device_description, FlagText(key, value));
    } else if (key == "embedding_tables") {
      ASSIGN_OR_RETURN(ro->tables, EmbeddingTablesFromJson(value));
    } else if (key == "forward_ahead") {
      // The script's (ScriptWorker), not the C++ worker's --forward_ahead.
      if (value.kind_case() != google::protobuf::Value::kBoolValue) {
        return absl::InvalidArgumentError("job option \"forward_ahead\": expected true or false");
      }
      *forward_ahead = value.bool_value();
    } else if (key == "tensor_groups") {
      if (value.kind_case() != google::protobuf::Value::kListValue) {
        return absl::InvalidArgumentError(
            "job option \"tensor_groups\": expected an array of group indices, one per tensor");
      }
      for (const google::protobuf::Value& g : value.list_value().values()) {
        ASSIGN_OR_RETURN(const int64_t group, WholeNumber(key, g));
        if (group >= kMaxGroups) {
          return absl::InvalidArgumentError(absl::StrCat("job option \"tensor_groups\": group ",
                                                         group, " (at most ", kMaxGroups, ")"));
        }
        tensor_groups->push_back(static_cast<int>(group));
      }
    } else {
      ASSIGN_OR_RETURN(const std::string text, FlagText(key, value));
      args.push_back(absl::StrCat("--", key, "=", text));
    }
  }
  ASSIGN_OR_RETURN(ro->train, TrainOptionsFromArgs(args));
  ro->batch_from_steps = !v.struct_value().fields().contains("batch_size");
  // A length in steps alone is one epoch of them (the step log's and the
  // chief's epochs), not epochs of one step.
  if (!*open_ended && !v.struct_value().fields().contains("steps_per_epoch")) {
    ro->steps_per_epoch = ro->total_steps;
  }
  // The step log and the epoch lines count epochs in an int.
  if (!*open_ended && ro->steps_per_epoch > 0 &&
      (ro->total_steps + ro->steps_per_epoch - 1) / ro->steps_per_epoch > kMaxScriptEpochs) {
    return absl::InvalidArgumentError(absl::StrCat("job options: total_steps ", ro->total_steps,
                                                   " of steps_per_epoch ", ro->steps_per_epoch,
                                                   " is more than ", kMaxScriptEpochs, " epochs"));
  }
  if (*open_ended) {
    // One epoch without end: the script says when it is done (Finish).
    ro->steps_per_epoch = kOpenEndedSteps;
    ro->total_steps = ro->train.max_steps > 0 ? ro->train.max_steps : kOpenEndedSteps;
    ro->train.epochs = 1;
  }
  return absl::OkStatus();
}

// The job option "forward_ahead" (ScriptWorker) where the job allows it.
absl::Status CheckForwardAhead(bool ahead, const WorkerRuntimeOptions& ro, bool dynamic) {
  if (!ahead) return absl::OkStatus();
  if (ro.train.mode == proto::SYNC) {
    return absl::InvalidArgumentError(
        "job option \"forward_ahead\": for async and ssp jobs; a sync step's parameters wait "
        "for every worker's gradient, so there are none to compute ahead on");
  }
  if (dynamic) {
    return absl::InvalidArgumentError(
        "job option \"forward_ahead\": not with dynamic workers (the job's length is the "
        "shards' updates, which a step in flight has not made yet)");
  }
  if (!ro.tables.empty()) {
    return absl::InvalidArgumentError(
        "job option \"forward_ahead\": not with embedding tables (a step's rows are read in its "
        "forward, while the step before is in flight on the same connections)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DescribeJob(const ScriptTask& task, const std::string& job_json) {
  WorkerRuntimeOptions ro;
  ro.train = task.train;
  bool open_ended = false;
  bool ahead = false;
  std::vector<int> groups;
  RETURN_IF_ERROR(ApplyJobOptions(job_json, &ro, &open_ended, &groups, &ahead));
  RETURN_IF_ERROR(CheckForwardAhead(ahead, ro, task.dynamic));
  RETURN_IF_ERROR(CheckTables(ro));
  const TrainOptions& o = ro.train;
  proto::JobConfig job;
  const int num_workers = task.dynamic ? 0 : task.num_workers;
  SetJobOptimizer(o, num_workers, &job);
  ASSIGN_OR_RETURN(const OptimizerConfig c, OptimizerFromJob(job));
  return absl::StrFormat(
      "{\"mode\": \"%s\", \"num_workers\": %d, \"backup_workers\": %d, \"staleness\": %d, "
      "\"optimizer\": \"%s\", \"lr\": %.17g, \"momentum\": %.17g, \"nesterov\": %s, "
      "\"weight_decay\": %.17g, \"beta1\": %.17g, \"beta2\": %.17g, \"eps\": %.17g, "
      "\"lr_decay\": %.17g, \"initial_accumulator\": %.17g, \"seed\": %u}",
      UpdateModeName(o.mode).c_str(), task.num_workers, o.backup_workers, o.staleness,
      OptimizerName(c.kind).c_str(), EffectiveLearningRate(o, num_workers),
      c.momentum, c.nesterov ? "true" : "false", c.weight_decay, c.beta1, c.beta2, c.eps,
      c.lr_decay, c.initial_accumulator, o.seed);
}

absl::Status UsageError(absl::string_view message) {
  absl::Status s = absl::FailedPreconditionError(message);
  s.SetPayload(kUsagePayload, absl::Cord("1"));
  return s;
}

bool IsUsageError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kUsagePayload).has_value();
}

absl::StatusOr<ScriptTask> ScriptTask::Resolve(const TaskEnvironment& env) {
  if (!env.tf_config.has_value() || env.tf_config->empty()) {
    return absl::InvalidArgumentError(
        "TF_CONFIG is not set: run the script with `pstrain launch --cluster_spec=FILE -- "
        "COMMAND`, or set TF_CONFIG (the cluster and this task) yourself");
  }
  TaskConfigSources sources;
  sources.tf_config = env.tf_config;
  ScriptTask t;
  ASSIGN_OR_RETURN(t.cluster, ResolveTaskConfig(sources));
  const TaskId task = *t.cluster.task();
  if (task.type != TaskType::kChief && task.type != TaskType::kWorker) {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: this process is ", task.ToString(),
                                                   "; a script runs as a chief or a worker"));
  }
  absl::StatusOr<TransportSecurity> security =
      ResolveTransportSecurity(env.secret_file, env.insecure);
  if (!security.ok()) {
    return absl::Status(
        security.status().code(),
        absl::StrCat("PSTRAIN_SECRET_FILE (or PSTRAIN_INSECURE=1): ", security.status().message()));
  }
  t.security = *std::move(security);
  ASSIGN_OR_RETURN(const std::vector<std::string> args, FlagsFromJson(env.flags_json));
  ASSIGN_OR_RETURN(t.train, TrainOptionsFromArgs(args));
  if (!env.run_dir.empty()) t.train.run_dir = env.run_dir;
  t.rank = t.cluster.WorkerRank(task);
  t.num_workers = t.cluster.num_workers();
  t.chief = t.rank == 0;
  t.dynamic = t.cluster.sparse();
  return t;
}

ScriptWorker::ScriptWorker(std::unique_ptr<WorkerRuntime> runtime, int num_tensors)
    : runtime_(std::move(runtime)), num_tensors_(num_tensors), tensor_ready_(num_tensors, false) {}

ScriptWorker::~ScriptWorker() {
  // A step in flight ends as every wait does: a reply, a refusal, or the
  // heartbeat's verdict on a ps gone.
  if (flight_.thread.joinable()) flight_.thread.join();
}

absl::StatusOr<std::unique_ptr<ScriptWorker>> ScriptWorker::Create(
    const ScriptTask& task, const std::string& job_json, std::vector<TensorSlot> tensors,
    absl::Span<float> params, absl::Span<float> grads, std::vector<float> initial_slots,
    std::vector<int64_t> initial_tensor_updates) {
  WorkerRuntimeOptions ro;
  ro.train = task.train;
  bool open_ended = false;
  bool ahead = false;
  std::vector<int> groups;
  RETURN_IF_ERROR(ApplyJobOptions(job_json, &ro, &open_ended, &groups, &ahead));
  RETURN_IF_ERROR(CheckForwardAhead(ahead, ro, task.dynamic));
  if (!groups.empty() && groups.size() != tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("job option \"tensor_groups\": ", groups.size(),
                                                   " groups for ", tensors.size(), " tensors"));
  }
  for (size_t i = 0; i < groups.size(); ++i) tensors[i].group = groups[i];
  const int num_tensors = static_cast<int>(tensors.size());
  ro.tensors = std::move(tensors);
  if (ahead) {
    // The runtime's own buffers: a step in flight writes its parameters
    // while the script computes on the ones in `params`.
    ro.overlap = false;
  } else {
    ro.params = params;
    ro.grads = grads;
  }
  if (task.chief) {
    // The job's initial parameters are the chief's, as the script made
    // them: kept for a restore when no checkpoint is usable.
    ro.initial_params =
        [initial = std::vector<float>(params.begin(), params.end())](absl::Span<float> out) {
          std::copy(initial.begin(), initial.end(), out.begin());
        };
    ro.initial_slots = std::move(initial_slots);
    ro.initial_tensor_updates = std::move(initial_tensor_updates);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<WorkerRuntime> runtime,
                   WorkerRuntime::Create(task.cluster, std::move(ro), task.security));
  std::unique_ptr<ScriptWorker> worker(new ScriptWorker(std::move(runtime), num_tensors));
  worker->open_ended_ = open_ended;
  worker->ahead_ = ahead;
  worker->script_params_ = params;
  worker->script_grads_ = grads;
  worker->job_ = worker->runtime_->job_config();
  ASSIGN_OR_RETURN(worker->optimizer_, OptimizerFromJob(worker->job_));
  WorkerRuntime& rt = *worker->runtime_;
  RETURN_IF_ERROR(rt.Connect());
  absl::Status s = rt.Start();
  if (s.ok()) s = rt.Resume();
  RETURN_IF_ERROR(worker->Recover(std::move(s)));
  if (ahead) worker->ParamsToScript();
  if (rt.global_step() > 0) {
    LOG(INFO) << "continuing from step " << rt.global_step() << " of " << rt.total_steps()
              << " at version " << rt.MinVersion();
  }
  worker->epoch_.Begin(rt.Mark());
  return worker;
}

absl::Status ScriptWorker::Latch(absl::Status status) {
  if (!status.ok() && !IsUsageError(status)) failed_ = status;
  return status;
}

absl::Status ScriptWorker::Recover(absl::Status s) {
  bool rejoined = false;
  for (;;) {
    if (IsJobFinished(s) && !runtime_->is_chief()) {
      LOG(WARNING) << "the job finished without this worker (" << s.message()
                   << "): it was frozen or declared dead meanwhile; nothing left to do";
      return s;
    }
    if (s.ok() || !IsRejoin(s)) {
      // The runtime's parameters are the job's now: a script computing
      // ahead takes them (and computes its next step on their versions).
      if (s.ok() && rejoined && ahead_) ParamsToScript();
      return s;
    }
    rejoined = true;
    ++rejoins_;
    s = runtime_->Rejoin(s);
    if (s.ok()) s = runtime_->Resume();
  }
}

absl::Status ScriptWorker::BeginStep(int num_examples) {
  RETURN_IF_ERROR(failed_);
  if (in_step_) return UsageError("BeginStep: a step is under way (EndStep first)");
  if (finished_ || done()) {
    return UsageError(absl::StrCat("BeginStep: no step is left (", total_steps(), " done)"));
  }
  if (num_examples < 0 || num_examples > kMaxStepExamples) {
    return UsageError(
        absl::StrCat("BeginStep: num_examples is ", num_examples, "; 0 to ", kMaxStepExamples));
  }
  const int64_t step = global_step();
  step_ = StepInfo();
  // With a step in flight the runtime is its thread's: the step begins
  // there at EndStep.
  step_.start_us = flight_.thread.joinable() ? MonotonicMicros() : runtime_->BeginStep();
  step_.epoch = static_cast<int>(step / steps_per_epoch());
  step_.step_in_epoch = step % steps_per_epoch();
  step_.examples = num_examples;
  std::fill(tensor_ready_.begin(), tensor_ready_.end(), false);
  table_grads_.assign(static_cast<size_t>(job_.tables_size()), TableGrads());
  layer_spans_.clear();
  if (num_examples > 0 && !ahead_) runtime_->StartPush(num_examples);
  in_step_ = true;
  step_void_ = false;
  reduce_round_ = 0;
  return absl::OkStatus();
}

absl::Status ScriptWorker::SetStepExamples(int num_examples) {
  RETURN_IF_ERROR(failed_);
  if (!in_step_) return UsageError("SetStepExamples: no step is under way (BeginStep first)");
  if (num_examples < 0 || num_examples > kMaxStepExamples) {
    return UsageError(absl::StrCat("SetStepExamples: num_examples is ", num_examples, "; 0 to ",
                                   kMaxStepExamples));
  }
  if (std::find(tensor_ready_.begin(), tensor_ready_.end(), true) != tensor_ready_.end()) {
    return UsageError(
        "SetStepExamples: a tensor of the step is ready already (its push may have gone with "
        "the examples)");
  }
  if (step_void_ || num_examples == step_.examples) return absl::OkStatus();
  step_.examples = num_examples;
  if (!ahead_) runtime_->RestartPush(num_examples);
  return absl::OkStatus();
}

absl::Status ScriptWorker::TensorReady(int tensor) {
  RETURN_IF_ERROR(failed_);
  if (!in_step_) return UsageError("TensorReady: no step is under way (BeginStep first)");
  if (tensor < 0 || tensor >= num_tensors_) {
    return UsageError(absl::StrCat("TensorReady: tensor ", tensor, " is not one of the ",
                                   num_tensors_, " of the layout"));
  }
  if (tensor_ready_[tensor]) {
    return UsageError(absl::StrCat("TensorReady: tensor ", tensor, " is final already this step"));
  }
  tensor_ready_[tensor] = true;
  // A job with embedding tables sends the step's rows before its dense
  // push to each ps (ps_server/embedding_tables.h): all of it at EndStep.
  // Forward ahead: the step goes out whole at EndStep.
  if (job_.tables_size() == 0 && !ahead_) runtime_->TensorReady(tensor);
  return absl::OkStatus();
}

absl::Status ScriptWorker::LayerSpan(absl::string_view layer, bool backward, int64_t start_unix_us,
                                     int64_t duration_us) {
  RETURN_IF_ERROR(failed_);
  if (!in_step_) return UsageError("LayerSpan: no step is under way (BeginStep first)");
  if (layer.empty()) return UsageError("LayerSpan: the layer has no name");
  if (start_unix_us < 0 || duration_us < 0 || duration_us > kMaxSpanUs ||
      start_unix_us > std::numeric_limits<int64_t>::max() - duration_us) {
    return UsageError(absl::StrCat("LayerSpan: from ", start_unix_us, " us for ", duration_us,
                                   " us (Unix microseconds, a duration of 0 to a day)"));
  }
  if (!timeline()) return absl::OkStatus();
  // Past the bounds the timeline goes without: the job does not fail for
  // a drawing.
  auto name = layer_names_.find(layer);
  if (layer_spans_.size() >= kMaxLayerSpans ||
      (name == layer_names_.end() && layer_names_.size() >= kMaxLayerNames)) {
    LOG_FIRST_N(WARNING, 1) << "the timeline takes at most " << kMaxLayerSpans
                            << " layer spans a step and " << kMaxLayerNames
                            << " layer names: the rest are left out";
    return absl::OkStatus();
  }
  if (name == layer_names_.end()) name = layer_names_.emplace(layer).first;
  models::LayerSpan span;
  span.layer = &*name;
  span.backward = backward;
  span.start_unix_us = start_unix_us;
  span.duration_us = duration_us;
  layer_spans_.push_back(span);
  return absl::OkStatus();
}

absl::Status ScriptWorker::SortAbsent(absl::string_view call, std::vector<int32_t>* absent) const {
  std::sort(absent->begin(), absent->end());
  absent->erase(std::unique(absent->begin(), absent->end()), absent->end());
  if (!absent->empty() && (absent->front() < 0 || absent->back() >= num_tensors_)) {
    return UsageError(absl::StrCat(call, ": an absent tensor is not one of the ", num_tensors_,
                                   " of the layout"));
  }
  return absl::OkStatus();
}

absl::Status ScriptWorker::SetStepOptions(const std::vector<proto::GroupSettings>& groups,
                                          std::vector<int32_t> absent) {
  RETURN_IF_ERROR(failed_);
  if (!in_step_) return UsageError("SetStepOptions: no step is under way (BeginStep first)");
  const int want = NumGroups(job_);
  if (static_cast<int>(groups.size()) != want) {
    return UsageError(absl::StrCat("SetStepOptions: settings of ", groups.size(),
                                   " parameter groups; the layout has ", want));
  }
  RETURN_IF_ERROR(SortAbsent("SetStepOptions", &absent));
  proto::StepSettings settings;
  for (const proto::GroupSettings& g : groups) *settings.add_groups() = g;
  *settings.mutable_absent() = {absent.begin(), absent.end()};
  RETURN_IF_ERROR(StepOptionsFrom(settings, job_, optimizer_).status());
  if (ahead_) {
    step_settings_ = std::move(settings);  // the runtime's once the step before lands
  } else {
    runtime_->SetStepSettings(std::move(settings));
  }
  return absl::OkStatus();
}

absl::Status ScriptWorker::Reduce(std::vector<int32_t> absent,
                                  std::vector<int32_t>* absent_everywhere, bool* reduced) {
  RETURN_IF_ERROR(failed_);
  *reduced = false;
  if (!in_step_) return UsageError("Reduce: no step is under way (BeginStep first)");
  if (runtime_->options().mode != proto::SYNC || runtime_->options().backup_workers > 0) {
    return UsageError(
        "Reduce: the workers' average before step is for sync jobs without "
        "backup workers");
  }
  if (step_void_) return absl::OkStatus();
  RETURN_IF_ERROR(SortAbsent("Reduce", &absent));
  bool stale = false;
  absl::Status s =
      runtime_->ReduceGradients(reduce_round_++, step_.examples, absent, absent_everywhere, &stale);
  if (s.ok()) {
    *reduced = !stale;
    return absl::OkStatus();
  }
  // A ps went away: rejoined, the step is void (its position may have
  // moved); the script's step() then pushes nothing.
  s = Latch(Recover(std::move(s)));
  if (s.ok()) step_void_ = true;
  return s;
}

absl::Status ScriptWorker::OptimizerState(std::vector<float>* slots,
                                          std::vector<int64_t>* tensor_updates) {
  RETURN_IF_ERROR(failed_);
  if (in_step_) return UsageError("OptimizerState: a step is under way (EndStep first)");
  RETURN_IF_ERROR(LandFlight(/*to_script=*/true));
  absl::Status s = runtime_->ReadOptimizerState(slots, tensor_updates);
  for (int tries = 0; !s.ok() && IsRejoin(s) && tries < 3; ++tries) {
    s = Recover(std::move(s));
    if (s.ok()) s = runtime_->ReadOptimizerState(slots, tensor_updates);
  }
  return Latch(std::move(s));
}

absl::Status ScriptWorker::EndStep(double loss) {
  RETURN_IF_ERROR(failed_);
  if (!in_step_) return UsageError("EndStep: no step is under way (BeginStep first)");
  in_step_ = false;
  if (step_void_) {
    step_void_ = false;
    return absl::OkStatus();
  }
  step_.loss = static_cast<float>(loss);
  step_.layers = layer_spans_.empty() ? nullptr : &layer_spans_;
  if (!ahead_) {
    absl::Status s = PushEmbeddingGrads();
    if (s.ok()) s = runtime_->EndStep(step_);
    return AfterStep(std::move(s), step_.examples, loss, nullptr);
  }
  // Forward ahead: the step before lands first. A rejoin there voids this
  // step, computed on parameters from before it (its position may move).
  bool recovered = false;
  RETURN_IF_ERROR(LandFlight(/*to_script=*/false, &recovered));
  if (step_settings_.has_value()) {
    runtime_->SetStepSettings(std::move(*step_settings_));
    step_settings_.reset();
  }
  if (recovered) return absl::OkStatus();
  // Its gradient was computed on the parameters the script's model holds.
  runtime_->BeginStep(model_versions_);
  const absl::Span<float> grads = runtime_->grads();
  std::copy(script_grads_.begin(), script_grads_.end(), grads.begin());
  // The script's next step computes on the newest parameters landed.
  ParamsToScript();
  flight_.info = step_;
  flight_.loss = loss;
  flight_.spans = std::move(layer_spans_);
  layer_spans_.clear();
  flight_.info.layers = flight_.spans.empty() ? nullptr : &flight_.spans;
  flight_.next_step = runtime_->global_step() + 1;
  flight_.status = absl::OkStatus();
  flight_.thread = std::thread([this] {
    // As ApiCall would have: an exception is the step's failure.
    try {
      flight_.status = runtime_->EndStep(flight_.info);
    } catch (const std::exception& e) {
      flight_.status = absl::InternalError(absl::StrCat("the step's end failed: ", e.what()));
    }
  });
  // For the script the step ends here (an evaluation's time counts from it).
  last_step_end_us_ = MonotonicMicros();
  return absl::OkStatus();
}

absl::Status ScriptWorker::AfterStep(absl::Status s, int examples, double loss, bool* recovered) {
  if (s.ok()) s = runtime_->CheckShardsHome();
  if (s.ok()) {
    runtime_->MaybeCheckpoint();
    if (!ahead_) last_step_end_us_ = MonotonicMicros();  // else when EndStep returned
    epoch_.AddStep(examples, std::isfinite(loss) ? std::optional<double>(loss) : std::nullopt);
    return absl::OkStatus();
  }
  s = Latch(Recover(std::move(s)));
  if (s.ok() && recovered != nullptr) *recovered = true;
  return s;
}

absl::Status ScriptWorker::LandFlight(bool to_script, bool* recovered) {
  bool rejoined = false;
  if (recovered != nullptr) *recovered = false;
  if (!flight_.thread.joinable()) return absl::OkStatus();
  flight_.thread.join();
  absl::Status s =
      AfterStep(std::move(flight_.status), flight_.info.examples, flight_.loss, &rejoined);
  flight_.spans.clear();
  flight_.info.layers = nullptr;
  RETURN_IF_ERROR(s);
  // (After a rejoin Recover gave the script the job's parameters.)
  if (to_script && !rejoined) ParamsToScript();
  if (recovered != nullptr) *recovered = rejoined;
  return absl::OkStatus();
}

absl::Status ScriptWorker::Land() {
  RETURN_IF_ERROR(failed_);
  if (in_step_) return UsageError("Land: a step is under way (EndStep first)");
  return LandFlight(/*to_script=*/true);
}

void ScriptWorker::ParamsToScript() {
  const absl::Span<const float> p = runtime_->params();
  std::copy(p.begin(), p.end(), script_params_.begin());
  model_versions_ = runtime_->versions();
}

absl::Status ScriptWorker::LogEvaluation(double accuracy, double loss, double seconds) {
  RETURN_IF_ERROR(failed_);
  if (in_step_) return UsageError("LogEvaluation: a step is under way (EndStep first)");
  if (!(accuracy >= 0 && accuracy <= 1)) {
    return UsageError(absl::StrCat("LogEvaluation: accuracy ", accuracy, " is not in [0, 1]"));
  }
  // A negative time is "since the last step"; a year bounds a real one.
  if (std::isnan(seconds) || seconds > 365.0 * 86400) {
    return UsageError(absl::StrCat("LogEvaluation: seconds is ", seconds,
                                   "; a negative number (the time since the last step) or 0 to "
                                   "a year"));
  }
  const int64_t now = MonotonicMicros();
  const int64_t took_us = seconds >= 0            ? static_cast<int64_t>(seconds * 1e6)
                          : last_step_end_us_ > 0 ? now - last_step_end_us_
                                                  : 0;
  RETURN_IF_ERROR(LandFlight(/*to_script=*/true));
  if (!runtime_->is_chief()) return absl::OkStatus();
  const int64_t step = runtime_->global_step();
  const bool epoch_end =
      !open_ended_ && (finished_ || done() || (step > 0 && step % steps_per_epoch() == 0));
  const int64_t epoch =
      epoch_end && step > 0 ? (step - 1) / steps_per_epoch() : step / steps_per_epoch();
  RETURN_IF_ERROR(
      Latch(runtime_->RecordEvaluation(static_cast<int>(epoch), epoch_end, finished_, accuracy,
                                       loss, now - took_us, UnixMicros() - took_us)));
  if (!epoch_end || epoch == last_epoch_logged_) return absl::OkStatus();
  last_epoch_logged_ = epoch;
  return Latch(EndEpoch(runtime_->evaluations().back()));
}

absl::Status ScriptWorker::EndEpoch(const EvalPoint& e) {
  const EpochMark end = runtime_->Mark();
  // Every worker trains on as many examples a step as this one (the last
  // global batch of an epoch may be a little short).
  const int workers = runtime_->dynamic() ? 0 : runtime_->num_workers();
  const double images = static_cast<double>(epoch_.examples()) * std::max(1, workers);
  const int epoch = static_cast<int>((end.step - 1) / steps_per_epoch()) + 1;
  const int epochs = static_cast<int>((total_steps() + steps_per_epoch() - 1) / steps_per_epoch());
  const ClosedEpoch closed = epoch_.End(epoch, epochs, workers, end, e, images);
  LOG(INFO) << closed.line;
  return runtime_->RecordEpoch(closed.record);
}

absl::Status ScriptWorker::Finish() {
  RETURN_IF_ERROR(failed_);
  if (in_step_) return UsageError("Finish: a step is under way (EndStep first)");
  if (finished_) return UsageError("Finish: finished already");
  // Whether the script's loop ended with steps left, judged where it
  // stood: a step in flight counts as done.
  const bool leaving = !done() && !open_ended_;
  // A ps was restored from a checkpoint after this worker's last step
  // (or, computing ahead, while that step was in flight): its steps since
  // are to be computed again, by a new process of it.
  const auto went_back = [&] {
    return Latch(absl::UnavailableError(absl::StrCat(
        "the job went back to step ", global_step(),
        " after this worker's last step (a ps was "
        "restored from a checkpoint); start this worker again to train the steps left")));
  };
  RETURN_IF_ERROR(LandFlight(/*to_script=*/true));
  if (!leaving && !done() && !open_ended_) return went_back();
  // A loop that ended early ends at its own last step: a job that went
  // back before it needs those steps again from this worker.
  const int64_t left_at = global_step();
  if (leaving) {
    LOG(WARNING) << "this worker's loop ended at step " << left_at << " of " << total_steps()
                 << ": it leaves the job, which goes on without it";
  }
  absl::Status s = runtime_->ReportDone();
  while (!s.ok()) {
    s = Recover(std::move(s));
    if (!s.ok()) return Latch(s);
    if (leaving ? global_step() < left_at : !done() && !open_ended_) return went_back();
    s = runtime_->ReportDone();
  }
  if (runtime_->is_chief()) RETURN_IF_ERROR(Latch(runtime_->PullLatest()));
  if (ahead_) ParamsToScript();
  finished_ = true;
  return absl::OkStatus();
}

absl::Status ScriptWorker::Close() {
  RETURN_IF_ERROR(failed_);
  if (!finished_) return UsageError("Close: Finish first");
  if (closed_) return UsageError("Close: closed already");
  closed_ = true;
  if (!runtime_->is_chief()) {
    LOG(INFO) << "training done: " << runtime_->global_step() << " steps, " << runtime_->images()
              << " images";
    return absl::OkStatus();
  }
  return Latch(runtime_->FinishChief());
}

}  // namespace pstrain

// include/pstrain/c_api.h over ScriptWorker. Every entry point checks its
// arguments, runs inside ApiCall (a status into a code and the thread's
// last error; an exception from a library underneath, such as
// std::bad_alloc, never crosses into C), and touches nothing on misuse.

#include "include/pstrain/c_api.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capi/script_worker.h"
#include "common/embedding.h"
#include "common/logging.h"
#include "common/malloc_policy.h"
#include "common/param_groups.h"
#include "common/rejoin.h"
#include "common/status_macros.h"
#include "dataset/data_sharder.h"
#include "glog/logging.h"

struct PstrainTask {
  pstrain::ScriptTask task;
  int live_workers = 0;
  std::string job_description;  // PstrainTaskDescribeJob's
};

struct PstrainWorker {
  std::unique_ptr<pstrain::ScriptWorker> worker;
  PstrainTask* task = nullptr;
};

namespace {

thread_local std::string last_error;

int CodeFor(const absl::Status& s) {
  if (s.ok()) return PSTRAIN_OK;
  if (pstrain::IsUsageError(s)) return PSTRAIN_ERROR_USAGE;
  if (pstrain::IsJobFinished(s)) return PSTRAIN_JOB_FINISHED;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
      return PSTRAIN_ERROR_CONFIG;
    default:
      return PSTRAIN_ERROR_FAILED;
  }
}

int ApiCall(const std::function<absl::Status()>& body) {
  absl::Status s;
  try {
    s = body();
  } catch (const std::exception& e) {
    s = absl::InternalError(absl::StrCat("pstrain: ", e.what()));
  } catch (...) {
    s = absl::InternalError("pstrain: an unknown exception");
  }
  if (!s.ok()) last_error = std::string(s.message());
  return CodeFor(s);
}

absl::Status Null(const char* what) { return pstrain::UsageError(absl::StrCat(what, " is NULL")); }

// glog once per process: the first task made (the process's main is a
// script's interpreter, which has no InitLogging of its own).
void InitLoggingOnce() {
  if (!google::IsGoogleLoggingInitialized()) pstrain::InitLogging("pstrain");
}

absl::Status MakeTask(const pstrain::TaskEnvironment& env, PstrainTaskHandle* out) {
  if (out == nullptr) return Null("out");
  InitLoggingOnce();
  absl::StatusOr<pstrain::ScriptTask> task = pstrain::ScriptTask::Resolve(env);
  if (!task.ok()) return task.status();
  *out = new PstrainTask{*std::move(task), 0, {}};
  return absl::OkStatus();
}

// The worker's checks before it is used.
absl::Status Check(PstrainWorkerHandle w) {
  if (w == nullptr) return Null("worker");
  return absl::OkStatus();
}

// An embedding call's arguments: a worker, `num_ids` ids at `ids` and
// their rows at `rows` (named `rows_name`) for table `table` of its job.
// Returns the rows' floats.
absl::StatusOr<size_t> EmbeddingArgs(PstrainWorkerHandle w, int table, int64_t num_ids,
                                     const int64_t* ids, const float* rows, const char* rows_name) {
  RETURN_IF_ERROR(Check(w));
  if (num_ids < 0 || num_ids > pstrain::kMaxEmbeddingIds) {
    return pstrain::UsageError(absl::StrCat("num_ids is ", num_ids, " (0 to 2^24 a call)"));
  }
  if (num_ids > 0 && ids == nullptr) return Null("ids");
  if (num_ids > 0 && rows == nullptr) return Null(rows_name);
  const pstrain::ScriptWorker& sw = *w->worker;
  if (table < 0 || table >= sw.num_tables()) {
    return pstrain::UsageError(absl::StrCat("table ", table, " is not one of the job's ",
                                            sw.num_tables(), " embedding tables"));
  }
  return static_cast<size_t>(num_ids) * static_cast<size_t>(sw.table_dim(table));
}

// A call's list of tensors without a gradient: `num_absent` of them at
// `absent`, no more than the worker's tensors.
absl::StatusOr<std::vector<int32_t>> AbsentList(PstrainWorkerHandle w, int num_absent,
                                                const int* absent) {
  if (num_absent < 0 || num_absent > w->worker->num_tensors()) {
    return pstrain::UsageError(absl::StrCat("num_absent is ", num_absent));
  }
  if (num_absent > 0 && absent == nullptr) return Null("absent");
  return std::vector<int32_t>(absent, absent + num_absent);
}

// Most floats a layout holds (1 PiB of them): a sum of sizes checked
// against it cannot overflow.
constexpr int64_t kMaxFloats = int64_t{1} << 48;
// Longest name (a tensor's, a layer's): a message header holds it.
constexpr size_t kMaxNameBytes = 4096;

// Whether `s` is UTF-8 (a protobuf string field must be: a header with
// anything else is not a pstrain header to its receiver).
bool IsUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 0x6) {
      n = 1, min = 0x80;
    } else if ((c >> 4) == 0xe) {
      n = 2, min = 0x800;
    } else if ((c >> 3) == 0x1e) {
      n = 3, min = 0x10000;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    uint32_t code = c & (0x3f >> n);
    for (size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 0x2) return false;
      code = (code << 6) | (b & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// A name the caller gives (`what`): UTF-8, 1 to kMaxNameBytes bytes.
absl::Status CheckName(absl::string_view what, absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return pstrain::UsageError(
        absl::StrCat(what, " has ", name.size(), " bytes; 1 to ", kMaxNameBytes));
  }
  if (!IsUtf8(name)) return pstrain::UsageError(absl::StrCat(what, " is not UTF-8"));
  return absl::OkStatus();
}

// The tensors a caller names, each of at least one float, together
// `num_floats`. REQUIRES: names and sizes hold num_tensors >= 1 entries.
absl::StatusOr<std::vector<pstrain::TensorSlot>> Layout(int num_tensors,
                                                        const char* const* names,
                                                        const int64_t* sizes, int64_t num_floats) {
  std::vector<pstrain::TensorSlot> tensors;
  int64_t total = 0;
  for (int i = 0; i < num_tensors; ++i) {
    if (names[i] == nullptr) return Null(absl::StrCat("names[", i, "]").c_str());
    RETURN_IF_ERROR(CheckName(absl::StrCat("tensor ", i, "'s name"), names[i]));
    if (sizes[i] < 1) {
      return pstrain::UsageError(
          absl::StrCat("tensor ", i, " (", names[i], ") has size ", sizes[i], "; at least 1"));
    }
    if (sizes[i] > kMaxFloats - total) {
      return pstrain::UsageError(
          absl::StrCat("the tensors up to ", i, " (", names[i], ") hold more than 2^48 floats"));
    }
    tensors.push_back({names[i], sizes[i]});
    total += sizes[i];
  }
  if (num_floats != total) {
    return pstrain::UsageError(absl::StrCat("the buffers hold ", num_floats,
                                            " floats; the layout's tensors add up to ", total));
  }
  return tensors;
}

absl::Status CreateWorker(PstrainTaskHandle task, const char* job_json, int num_tensors,
                          const char* const* names, const int64_t* sizes, float* params,
                          float* grads, int64_t num_floats, const float* slots,
                          int64_t slots_floats, const int64_t* tensor_steps,
                          PstrainWorkerHandle* out) {
  if (task == nullptr) return Null("task");
  if (out == nullptr) return Null("out");
  if (num_tensors < 1) {
    return pstrain::UsageError(absl::StrCat("num_tensors is ", num_tensors, "; at least 1"));
  }
  if (names == nullptr) return Null("names");
  if (sizes == nullptr) return Null("sizes");
  if (params == nullptr) return Null("params");
  if (grads == nullptr) return Null("grads");
  ASSIGN_OR_RETURN(std::vector<pstrain::TensorSlot> tensors,
                   Layout(num_tensors, names, sizes, num_floats));
  // The worker's steps receive the same large messages every time; the
  // script's own blocks (its gradients) are kept for reuse too.
  pstrain::KeepFreedMemoryForReuse();
  const int64_t total = num_floats;
  std::vector<float> initial_slots;
  std::vector<int64_t> initial_steps;
  if (slots != nullptr) {
    if (tensor_steps == nullptr) return Null("tensor_steps");
    if (slots_floats < 0 || slots_floats % total != 0 || slots_floats / total > 2) {
      return pstrain::UsageError(absl::StrCat("slots_floats is ", slots_floats,
                                              "; the optimizer's slots are 0 to 2 x ", total));
    }
    initial_slots.assign(slots, slots + slots_floats);
    initial_steps.assign(tensor_steps, tensor_steps + num_tensors);
    for (int i = 0; i < num_tensors; ++i) {
      if (initial_steps[static_cast<size_t>(i)] < 0) {
        return pstrain::UsageError(absl::StrCat("tensor_steps[", i, "] is negative"));
      }
    }
  }
  const size_t n = static_cast<size_t>(total);
  absl::StatusOr<std::unique_ptr<pstrain::ScriptWorker>> worker = pstrain::ScriptWorker::Create(
      task->task, job_json == nullptr ? "" : job_json, std::move(tensors),
      absl::MakeSpan(params, n), absl::MakeSpan(grads, n), std::move(initial_slots),
      std::move(initial_steps));
  if (!worker.ok()) {
    // A job that does not fit the chief's (its flags, its layout) is the
    // configuration's fault: the process would fail the same way again.
    if (absl::IsFailedPrecondition(worker.status()) && !pstrain::IsRejoin(worker.status())) {
      return absl::InvalidArgumentError(worker.status().message());
    }
    return worker.status();
  }
  *out = new PstrainWorker{*std::move(worker), task};
  ++task->live_workers;
  return absl::OkStatus();
}

// The tables, ids and (`rows` not null) rows buffers of a call of
// `num_tables` tables, checked: requests[k] is table tables[k]'s
// num_ids[k] ids (rows[k], num_ids[k] x its dim floats).
absl::StatusOr<std::vector<pstrain::EmbeddingRows>> TableRequests(PstrainWorkerHandle worker,
                                                                  int num_tables, const int* tables,
                                                                  const int64_t* num_ids,
                                                                  const int64_t* const* ids,
                                                                  float* const* rows) {
  RETURN_IF_ERROR(Check(worker));
  if (num_tables < 0 || num_tables > pstrain::kMaxEmbeddingTables) {
    return pstrain::UsageError(
        absl::StrCat("num_tables is ", num_tables, " (0 to ", pstrain::kMaxEmbeddingTables, ")"));
  }
  std::vector<pstrain::EmbeddingRows> requests(static_cast<size_t>(num_tables));
  if (num_tables == 0) return requests;
  if (tables == nullptr) return Null("tables");
  if (num_ids == nullptr) return Null("num_ids");
  if (ids == nullptr) return Null("ids");
  int64_t total = 0;
  for (int k = 0; k < num_tables; ++k) {
    // Without rows (a prefetch), the ids alone are checked.
    static const float kNoRows = 0;
    const float* to = rows != nullptr ? rows[k] : &kNoRows;
    ASSIGN_OR_RETURN(const size_t floats,
                     EmbeddingArgs(worker, tables[k], num_ids[k], ids[k], to, "rows"));
    total += num_ids[k];
    if (total > pstrain::kMaxEmbeddingIds) {
      return pstrain::UsageError("more than 2^24 ids in one call");
    }
    pstrain::EmbeddingRows& r = requests[static_cast<size_t>(k)];
    r.table = tables[k];
    r.ids = {ids[k], static_cast<size_t>(num_ids[k])};
    if (rows != nullptr) r.rows = {rows[k], floats};
  }
  return requests;
}

}  // namespace

extern "C" {

int PstrainVersion(void) { return PSTRAIN_C_API_VERSION; }

const char* PstrainGetLastError(void) { return last_error.c_str(); }

int PstrainTaskCreateFromEnv(PstrainTaskHandle* out) {
  return ApiCall([&] {
    // The one place the library reads the environment (c_api.h lists it).
    pstrain::TaskEnvironment env;
    if (const char* v = std::getenv("TF_CONFIG")) env.tf_config = v;
    if (const char* v = std::getenv("PSTRAIN_SECRET_FILE")) env.secret_file = v;
    if (const char* v = std::getenv("PSTRAIN_INSECURE")) env.insecure = std::string(v) == "1";
    if (const char* v = std::getenv("PSTRAIN_RUN_DIR")) env.run_dir = v;
    if (const char* v = std::getenv("PSTRAIN_FLAGS")) env.flags_json = v;
    return MakeTask(env, out);
  });
}

int PstrainTaskCreate(const char* tf_config, const char* secret_file, int insecure,
                      const char* run_dir, const char* flags_json, PstrainTaskHandle* out) {
  return ApiCall([&] {
    if (tf_config == nullptr) return Null("tf_config");
    if (secret_file == nullptr) return Null("secret_file");
    if (run_dir == nullptr) return Null("run_dir");
    if (flags_json == nullptr) return Null("flags_json");
    pstrain::TaskEnvironment env;
    env.tf_config = std::string(tf_config);
    env.secret_file = secret_file;
    env.insecure = insecure != 0;
    env.run_dir = run_dir;
    env.flags_json = flags_json;
    return MakeTask(env, out);
  });
}

int PstrainTaskFree(PstrainTaskHandle task) {
  return ApiCall([&] {
    if (task == nullptr) return absl::OkStatus();
    if (task->live_workers > 0) {
      return pstrain::UsageError(
          absl::StrCat("PstrainTaskFree: ", task->live_workers, " worker(s) of it are not freed"));
    }
    delete task;
    return absl::OkStatus();
  });
}

int PstrainTaskGetRank(PstrainTaskHandle task, int* rank, int* num_workers, int* is_chief,
                       int* dynamic) {
  return ApiCall([&] {
    if (task == nullptr) return Null("task");
    if (rank != nullptr) *rank = task->task.rank;
    if (num_workers != nullptr) *num_workers = task->task.num_workers;
    if (is_chief != nullptr) *is_chief = task->task.chief ? 1 : 0;
    if (dynamic != nullptr) *dynamic = task->task.dynamic ? 1 : 0;
    return absl::OkStatus();
  });
}

int PstrainTaskGetRunDir(PstrainTaskHandle task, const char** run_dir) {
  return ApiCall([&] {
    if (task == nullptr) return Null("task");
    if (run_dir == nullptr) return Null("run_dir");
    *run_dir = task->task.train.run_dir.c_str();
    return absl::OkStatus();
  });
}

int PstrainTaskDescribeJob(PstrainTaskHandle task, const char* job_json, const char** json) {
  return ApiCall([&]() -> absl::Status {
    if (task == nullptr) return Null("task");
    if (json == nullptr) return Null("json");
    absl::StatusOr<std::string> d =
        pstrain::DescribeJob(task->task, job_json == nullptr ? "" : job_json);
    if (!d.ok()) return d.status();
    task->job_description = *std::move(d);
    *json = task->job_description.c_str();
    return absl::OkStatus();
  });
}

int PstrainWorkerCreate(PstrainTaskHandle task, const char* job_json, int num_tensors,
                        const char* const* names, const int64_t* sizes, float* params, float* grads,
                        int64_t num_floats, PstrainWorkerHandle* out) {
  return ApiCall([&] {
    return CreateWorker(task, job_json, num_tensors, names, sizes, params, grads, num_floats,
                        nullptr, 0, nullptr, out);
  });
}

int PstrainWorkerCreateWithState(PstrainTaskHandle task, const char* job_json, int num_tensors,
                                 const char* const* names, const int64_t* sizes, float* params,
                                 float* grads, int64_t num_floats, const float* slots,
                                 int64_t slots_floats, const int64_t* tensor_steps,
                                 PstrainWorkerHandle* out) {
  return ApiCall([&] {
    if (slots == nullptr) return Null("slots");
    return CreateWorker(task, job_json, num_tensors, names, sizes, params, grads, num_floats, slots,
                        slots_floats, tensor_steps, out);
  });
}

int PstrainWorkerFree(PstrainWorkerHandle worker) {
  return ApiCall([&] {
    if (worker == nullptr) return absl::OkStatus();
    --worker->task->live_workers;
    delete worker;
    return absl::OkStatus();
  });
}

int PstrainWorkerGetPosition(PstrainWorkerHandle worker, int64_t* global_step, int64_t* total_steps,
                             int64_t* steps_per_epoch, int* done) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    const pstrain::ScriptWorker& w = *worker->worker;
    if (global_step != nullptr) *global_step = w.global_step();
    if (total_steps != nullptr) *total_steps = w.total_steps();
    if (steps_per_epoch != nullptr) *steps_per_epoch = w.steps_per_epoch();
    if (done != nullptr) *done = w.done() ? 1 : 0;
    return absl::OkStatus();
  });
}

int PstrainWorkerGetRejoins(PstrainWorkerHandle worker, int64_t* rejoins) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    if (rejoins == nullptr) return Null("rejoins");
    *rejoins = worker->worker->rejoins();
    return absl::OkStatus();
  });
}

int PstrainWorkerGetVersions(PstrainWorkerHandle worker, int64_t* lowest, int64_t* highest) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    const std::vector<int64_t>& versions = worker->worker->versions();
    if (lowest != nullptr) {
      *lowest = versions.empty() ? 0 : *std::min_element(versions.begin(), versions.end());
    }
    if (highest != nullptr) {
      *highest = versions.empty() ? 0 : *std::max_element(versions.begin(), versions.end());
    }
    return absl::OkStatus();
  });
}

int PstrainWorkerBeginStep(PstrainWorkerHandle worker, int num_examples) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    return worker->worker->BeginStep(num_examples);
  });
}

int PstrainWorkerSetStepExamples(PstrainWorkerHandle worker, int num_examples) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    return worker->worker->SetStepExamples(num_examples);
  });
}

int PstrainWorkerTensorReady(PstrainWorkerHandle worker, int tensor) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    return worker->worker->TensorReady(tensor);
  });
}

int PstrainWorkerTimeline(PstrainWorkerHandle worker, int* on) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    if (on == nullptr) return Null("on");
    *on = worker->worker->timeline() ? 1 : 0;
    return absl::OkStatus();
  });
}

int PstrainWorkerLayerSpan(PstrainWorkerHandle worker, const char* layer, int backward,
                           int64_t start_unix_us, int64_t duration_us) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    if (layer == nullptr) return Null("layer");
    RETURN_IF_ERROR(CheckName("layer", layer));
    return worker->worker->LayerSpan(layer, backward != 0, start_unix_us, duration_us);
  });
}

int PstrainWorkerSetStepOptions(PstrainWorkerHandle worker, int num_groups, const double* settings,
                                int num_absent, const int* absent) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    if (num_groups < 1 || num_groups > pstrain::kMaxGroups) {
      return pstrain::UsageError(
          absl::StrCat("num_groups is ", num_groups, "; 1 to ", pstrain::kMaxGroups));
    }
    if (settings == nullptr) return Null("settings");
    ASSIGN_OR_RETURN(std::vector<int32_t> absent_tensors, AbsentList(worker, num_absent, absent));
    std::vector<pstrain::proto::GroupSettings> groups(static_cast<size_t>(num_groups));
    for (int g = 0; g < num_groups; ++g) {
      const double* v = settings + static_cast<ptrdiff_t>(g) * PSTRAIN_GROUP_FIELDS;
      pstrain::proto::GroupSettings& out = groups[static_cast<size_t>(g)];
      out.set_lr(v[PSTRAIN_GROUP_LR]);
      out.set_weight_decay(v[PSTRAIN_GROUP_WEIGHT_DECAY]);
      out.set_momentum(v[PSTRAIN_GROUP_MOMENTUM]);
      out.set_nesterov(v[PSTRAIN_GROUP_NESTEROV] != 0);
      out.set_beta1(v[PSTRAIN_GROUP_BETA1]);
      out.set_beta2(v[PSTRAIN_GROUP_BETA2]);
      out.set_eps(v[PSTRAIN_GROUP_EPS]);
      out.set_lr_decay(v[PSTRAIN_GROUP_LR_DECAY]);
    }
    return worker->worker->SetStepOptions(groups, std::move(absent_tensors));
  });
}

int PstrainWorkerReduceGradients(PstrainWorkerHandle worker, int num_absent, const int* absent,
                                 int* absent_everywhere, int* reduced) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    if (reduced == nullptr) return Null("reduced");
    if (absent_everywhere == nullptr) return Null("absent_everywhere");
    ASSIGN_OR_RETURN(std::vector<int32_t> absent_tensors, AbsentList(worker, num_absent, absent));
    std::vector<int32_t> everywhere;
    bool done = false;
    RETURN_IF_ERROR(worker->worker->Reduce(std::move(absent_tensors), &everywhere, &done));
    const int n = worker->worker->num_tensors();
    std::fill(absent_everywhere, absent_everywhere + n, 0);
    for (int32_t t : everywhere) {
      if (t >= 0 && t < n) absent_everywhere[t] = 1;
    }
    *reduced = done ? 1 : 0;
    return absl::OkStatus();
  });
}

int PstrainWorkerGetOptimizerState(PstrainWorkerHandle worker, int* num_slots, float* slots,
                                   int64_t slots_floats, int64_t* tensor_steps) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    if (num_slots == nullptr) return Null("num_slots");
    pstrain::ScriptWorker& w = *worker->worker;
    *num_slots = w.num_slots();
    if (slots == nullptr && tensor_steps == nullptr) return absl::OkStatus();
    if (slots == nullptr) return Null("slots");
    if (tensor_steps == nullptr) return Null("tensor_steps");
    // Checked first: a usage error changes nothing (reading the state lands
    // a step in flight).
    const int64_t want = static_cast<int64_t>(w.num_slots()) * w.num_floats();
    if (slots_floats != want) {
      return pstrain::UsageError(
          absl::StrCat("slots_floats is ", slots_floats, "; the state has ", want, " floats"));
    }
    std::vector<float> state;
    std::vector<int64_t> steps;
    RETURN_IF_ERROR(w.OptimizerState(&state, &steps));
    if (slots_floats != static_cast<int64_t>(state.size())) {
      return pstrain::UsageError(absl::StrCat("slots_floats is ", slots_floats, "; the state has ",
                                              state.size(), " floats"));
    }
    std::copy(state.begin(), state.end(), slots);
    std::copy(steps.begin(), steps.end(), tensor_steps);
    return absl::OkStatus();
  });
}

int PstrainWorkerEndStep(PstrainWorkerHandle worker, double loss) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    return worker->worker->EndStep(loss);
  });
}

int PstrainWorkerLand(PstrainWorkerHandle worker) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    return worker->worker->Land();
  });
}

int PstrainWorkerLogEvaluation(PstrainWorkerHandle worker, double accuracy, double loss,
                               double seconds) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    return worker->worker->LogEvaluation(accuracy, loss, seconds);
  });
}

int PstrainWorkerFinish(PstrainWorkerHandle worker) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    return worker->worker->Finish();
  });
}

int PstrainWorkerClose(PstrainWorkerHandle worker) {
  return ApiCall([&] {
    RETURN_IF_ERROR(Check(worker));
    return worker->worker->Close();
  });
}

int PstrainWorkerEmbeddingPull(PstrainWorkerHandle worker, int table, int64_t num_ids,
                               const int64_t* ids, float* rows) {
  return ApiCall([&] {
    ASSIGN_OR_RETURN(const size_t floats, EmbeddingArgs(worker, table, num_ids, ids, rows, "rows"));
    return worker->worker->EmbeddingPull(table, {ids, static_cast<size_t>(num_ids)},
                                         {rows, floats});
  });
}

int PstrainWorkerEmbeddingPullTables(PstrainWorkerHandle worker, int num_tables, const int* tables,
                                     const int64_t* num_ids, const int64_t* const* ids,
                                     float* const* rows) {
  return ApiCall([&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<pstrain::EmbeddingRows> requests,
                     TableRequests(worker, num_tables, tables, num_ids, ids, rows));
    if (requests.empty()) return absl::OkStatus();
    if (rows == nullptr) return Null("rows");
    return worker->worker->EmbeddingPull(absl::MakeSpan(requests));
  });
}

int PstrainWorkerEmbeddingPrefetch(PstrainWorkerHandle worker, int num_tables, const int* tables,
                                   const int64_t* num_ids, const int64_t* const* ids) {
  return ApiCall([&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<pstrain::EmbeddingRows> requests,
                     TableRequests(worker, num_tables, tables, num_ids, ids, nullptr));
    if (requests.empty()) return absl::OkStatus();
    return worker->worker->EmbeddingPrefetch(absl::MakeSpan(requests));
  });
}

int PstrainWorkerEmbeddingPrefetched(PstrainWorkerHandle worker, int64_t* tables) {
  return ApiCall([&]() -> absl::Status {
    RETURN_IF_ERROR(Check(worker));
    if (tables == nullptr) return Null("tables");
    *tables = worker->worker->prefetched_tables();
    return absl::OkStatus();
  });
}

int PstrainWorkerEmbeddingGrad(PstrainWorkerHandle worker, int table, int64_t num_ids,
                               const int64_t* ids, const float* grads, double lr) {
  return ApiCall([&] {
    ASSIGN_OR_RETURN(const size_t floats,
                     EmbeddingArgs(worker, table, num_ids, ids, grads, "grads"));
    return worker->worker->EmbeddingGrad(table, {ids, static_cast<size_t>(num_ids)},
                                         {grads, floats}, lr);
  });
}

int PstrainEmbeddingInitialRows(int dim, int uniform, double init_std, uint64_t seed,
                                int table_index, int64_t num_ids, const int64_t* ids,
                                float* rows) {
  return ApiCall([&] {
    if (dim < 1 || dim > pstrain::kMaxEmbeddingDim) {
      return pstrain::UsageError(absl::StrCat("dim is ", dim));
    }
    if (!(init_std >= 0 && init_std <= pstrain::kMaxInitStd)) {
      return pstrain::UsageError(absl::StrCat("init_std is ", init_std, "; 0 to 1e36"));
    }
    if (num_ids < 0 || table_index < 0) return pstrain::UsageError("a negative count or index");
    if (num_ids > 0 && (ids == nullptr || rows == nullptr)) return Null("ids or rows");
    pstrain::proto::EmbeddingTableConfig t;
    t.set_dim(dim);
    t.set_init_uniform(uniform != 0);
    t.set_init_std(init_std);
    const auto d = static_cast<size_t>(dim);
    for (int64_t i = 0; i < num_ids; ++i) {
      pstrain::InitialRow(t, seed, table_index, ids[i], {rows + static_cast<size_t>(i) * d, d});
    }
    return absl::OkStatus();
  });
}

int PstrainPermutation(int64_t num_examples, uint64_t seed, int epoch, int64_t* out) {
  return ApiCall([&] {
    if (out == nullptr) return Null("out");
    if (num_examples < 1) {
      return pstrain::UsageError(absl::StrCat("num_examples is ", num_examples, "; at least 1"));
    }
    if (epoch < 0) return pstrain::UsageError(absl::StrCat("epoch is ", epoch));
    pstrain::DataSharder sharder(num_examples, 1, 0, 1, seed);
    const std::vector<int64_t>& p = sharder.Permutation(epoch);
    std::copy(p.begin(), p.end(), out);
    return absl::OkStatus();
  });
}

}  // extern "C"

#pragma once

// The cluster a task belongs to, from TF_CONFIG-style JSON:
//
//   {"cluster": {"chief": ["h:2220"], "worker": ["h:2222", ...], "ps": [...]},
//    "task": {"type": "worker", "index": 1}, "environment": "cloud"}
//
// Accepts what TensorFlow, Kubeflow's TFJob and Azure ML write: task types
// chief, master (alias of chief), worker, ps, evaluator; other top-level keys
// (rpc_layer, environment, session_master, ...) are ignored. Everything else
// is rejected with InvalidArgument whose message names the field.
//
// Worker ranks: the chief (when the spec has one) is rank 0 and worker i is
// rank i + 1; without a chief, worker i is rank i and worker 0 is the chief.
//
// Sparse clusters (Kubeflow's TFJob with enableDynamicWorker, and
// TensorFlow's own sparse ClusterSpec): a task type may be an object of
// index -> address, {"worker": {"3": "host:port"}}, listing only some of its
// tasks. The operator writes a ps {"worker": {}, "ps": [its own address]}
// and a worker every ps and only itself; every other replica type (Chief,
// Evaluator) gets an empty cluster, {"worker": {}, "ps": []}. Operators
// released before May 2023 wrote the same object under "sparseCluster",
// which is read as "cluster" (never both). In a sparse cluster nobody knows
// the worker count, and there is no chief task: worker 0 is the chief, and
// worker i is rank i, which every task computes alone. num_workers() is
// the fixed number of rank slots, kDynamicWorkerSlots; which of them are
// present is found out at run time (docs/decisions/0036-dynamic-workers.md).
// Refused with InvalidArgument saying why: a sparse cluster that lists a
// chief, and a chief (or master) task given a sparse cluster; an evaluator
// given the operator's empty cluster is refused the same way.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace google::protobuf {
class Value;
}  // namespace google::protobuf

namespace pstrain {

enum class TaskType { kChief, kWorker, kPs, kEvaluator };

// "chief", "worker", "ps", "evaluator".
absl::string_view TaskTypeName(TaskType type);
// Accepts the names above and "master" (-> kChief).
std::optional<TaskType> ParseTaskType(absl::string_view name);

struct TaskId {
  TaskType type = TaskType::kWorker;
  int index = 0;

  std::string ToString() const;  // "ps:1"
  friend bool operator==(const TaskId& a, const TaskId& b) {
    return a.type == b.type && a.index == b.index;
  }
};

struct HostPort {
  std::string host;  // without brackets for IPv6 literals
  int port = 0;

  std::string ToString() const;  // "host:port", "[::1]:port"
};

// Parses "host:port" or "[v6]:port". Port must be 1..65535.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

// Whether `host` names this machine's loopback interface: "localhost", any
// 127.x.y.z literal, or "::1" (case-insensitive). The one definition every part of
// pstrain uses: loopback names bind 127.0.0.1 (or ::1), two of them with the
// same port are one endpoint, and `--free_ports` replaces their ports.
bool IsLoopbackHost(absl::string_view host);

class ClusterSpec {
 public:
  // Rank slots of a sparse cluster: workers 0..255 (worker 0 the chief).
  static constexpr int kDynamicWorkerSlots = 256;

  // Parses and validates TF_CONFIG JSON. `origin` names the source in errors
  // ("TF_CONFIG", a file path). The "task" key is optional here.
  static absl::StatusOr<ClusterSpec> FromJson(absl::string_view json, absl::string_view origin);
  // FromJson on the file at `path` (NotFound naming it when missing).
  static absl::StatusOr<ClusterSpec> FromFile(const std::string& path);

  // `num_workers` workers then `num_ps` ps on localhost, at ports
  // first_port, first_port + 1, ...; no chief, no task. For generated local
  // specs (with placeholder ports for WithFreePorts to replace). REQUIRES:
  // num_ps >= 1, num_workers >= 1, 1 <= first_port and the last port <= 65535.
  static ClusterSpec Local(int num_ps, int num_workers, int first_port);

  // Addresses of every task of `type`, in index order (empty if none, and
  // for a type a sparse spec gives as an object).
  const std::vector<std::string>& Addresses(TaskType type) const;
  // REQUIRES: the task exists in the spec.
  const std::string& Address(const TaskId& task) const;
  bool Contains(const TaskId& task) const;

  // The listed ps tasks (a sparse spec's ps sees none but itself: 0).
  int num_ps() const { return static_cast<int>(Addresses(TaskType::kPs).size()); }
  // Training workers: the chief (if any) plus every worker; a sparse
  // spec's rank slots.
  int num_workers() const;
  // Whether the spec lists a chief task (never a sparse spec: its worker 0
  // is the chief).
  bool has_chief() const { return !Addresses(TaskType::kChief).empty(); }
  // Some task type was given as an index -> address object (see above).
  bool sparse() const { return sparse_; }

  // The task named in the JSON's "task" key, if there was one.
  const std::optional<TaskId>& task() const { return task_; }
  void set_task(const TaskId& task) {
    AdoptSparsePsAddress(task);
    task_ = task;
  }

  // Rank of a chief or worker task. REQUIRES: the task is a chief or worker,
  // and Contains(task) unless the spec is sparse (then a worker, any rank
  // slot's).
  int WorkerRank(const TaskId& task) const;
  TaskId TaskForRank(int rank) const;
  TaskId ChiefTask() const { return TaskForRank(0); }
  bool IsChief(const TaskId& task) const;

  // Every task of the spec: chief, workers, ps, evaluator, in that order.
  std::vector<TaskId> AllTasks() const;

  // Fingerprint of the cluster (task types and addresses): tasks started from
  // the same spec agree on it, so a worker of another cluster that reaches a
  // ps is refused. Sparse: of the ps list only, which every worker of the
  // job sees whole (a sparse ps learns the id from the chief's INIT
  // instead).
  uint64_t JobId() const;

  // The cluster as JSON without a task, for files (RUN_DIR/cluster_spec.json,
  // generated specs): one line per task type, ending in a newline. FromJson
  // reads it back to an equal spec.
  std::string ToJson() const;
  // TF_CONFIG JSON for `task`, on one line: the same cluster plus the
  // "task" key.
  std::string ToTfConfig(const TaskId& task) const;

  // Replaces the address of `task`. REQUIRES: Contains(task). Does not
  // validate; re-parse ToJson() when the new address comes from outside.
  void set_address(const TaskId& task, std::string address);

  // InvalidArgument, saying why and what to do, for a task that cannot run
  // in this spec because it is sparse: a chief (a sparse cluster's chief is
  // its worker 0), and any type but ps and worker given the operator's
  // empty cluster. `origin` names the source. OK otherwise.
  absl::Status CheckSparseTask(const TaskId& task, absl::string_view origin) const;

 private:
  // FromJson's parts: the task lists of the object under `key` ("cluster"
  // or "sparseCluster", for field names in errors), and the checks of the
  // whole cluster.
  absl::Status ParseCluster(const google::protobuf::Value& cluster, absl::string_view origin,
                            absl::string_view key);
  absl::Status Validate(absl::string_view origin, absl::string_view key) const;

  // A sparse spec's ps task i with a one-entry ps list (the operator's
  // form: the list holds its own address whatever i is): that entry
  // becomes ps i's. No-op otherwise.
  void AdoptSparsePsAddress(const TaskId& task);

  // The one JSON writer: the cluster, then `task` if given; `multiline`
  // puts each task type on its own line.
  std::string Json(const std::optional<TaskId>& task, bool multiline) const;

  std::vector<std::string> addresses_[4];  // indexed by TaskType
  // Sparse: the types given as objects, and their index -> address.
  bool sparse_ = false;
  bool is_map_[4] = {false, false, false, false};
  std::map<int, std::string> listed_[4];
  std::optional<TaskId> task_;
};

// Where a process's configuration may come from; main() fills this from the
// environment and flags, nothing below main reads either.
struct TaskConfigSources {
  std::optional<std::string> tf_config;  // $TF_CONFIG, when set and non-empty
  std::string cluster_spec_path;         // --cluster_spec, "" when not given
  std::string task_type;                 // --task_type, "" when not given
  int task_index = -1;                   // --task_index, -1 when not given
};

// Resolves the cluster and this process's task. --cluster_spec wins over
// TF_CONFIG; --task_type/--task_index override the JSON's task (and are
// refused for a sparse cluster as FromJson refuses such a task). Errors
// (InvalidArgument, NotFound for a missing file) name the source and field.
absl::StatusOr<ClusterSpec> ResolveTaskConfig(const TaskConfigSources& sources);

}  // namespace pstrain

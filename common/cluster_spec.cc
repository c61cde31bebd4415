#include "common/cluster_spec.h"

#include <cmath>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr TaskType kAllTypes[] = {TaskType::kChief, TaskType::kWorker, TaskType::kPs,
                                  TaskType::kEvaluator};

absl::Status FieldError(absl::string_view origin, absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", field, ": ", what));
}

// Same endpoint spelled two ways ("localhost" and "127.0.0.1") is still a
// duplicate: every loopback name binds the same socket (transport.h).
std::string CanonicalEndpoint(const HostPort& hp) {
  if (IsLoopbackHost(hp.host)) return absl::StrCat("loopback:", hp.port);
  return absl::StrCat(absl::AsciiStrToLower(hp.host), ":", hp.port);
}

absl::StatusOr<int> ParseIndex(const Value& v, absl::string_view origin, absl::string_view field) {
  if (v.kind_case() != Value::kNumberValue) {
    return FieldError(origin, field,
                      absl::StrCat("must be a non-negative integer, got ", JsonKindName(v)));
  }
  const double d = v.number_value();
  if (d < 0 || d != std::floor(d) || d > 1e6) {
    return FieldError(origin, field, absl::StrCat("must be a non-negative integer, got ", d));
  }
  return static_cast<int>(d);
}

absl::Status ParseTaskList(const Value& v, absl::string_view origin, const std::string& field,
                           std::vector<std::string>* out) {
  if (v.kind_case() != Value::kListValue) {
    return FieldError(origin, field,
                      absl::StrCat("must be a list of \"host:port\" strings, got ", JsonKindName(v)));
  }
  const auto& list = v.list_value().values();
  for (int i = 0; i < list.size(); ++i) {
    const std::string item_field = absl::StrCat(field, "[", i, "]");
    if (list[i].kind_case() != Value::kStringValue) {
      return FieldError(origin, item_field,
                        absl::StrCat("must be a \"host:port\" string, got ", JsonKindName(list[i])));
    }
    auto hp = ParseHostPort(list[i].string_value());
    if (!hp.ok()) return FieldError(origin, item_field, hp.status().message());
    out->push_back(list[i].string_value());
  }
  return absl::OkStatus();
}

// The sparse form, {"<index>": "host:port", ...}.
absl::Status ParseTaskMap(const Value& v, absl::string_view origin, const std::string& field,
                          std::map<int, std::string>* out) {
  for (const auto& [key, item] : v.struct_value().fields()) {
    const std::string item_field = absl::StrCat(field, ".", key);
    int index = -1;
    if (key.empty() || !absl::ascii_isdigit(key.front()) || !absl::SimpleAtoi(key, &index) ||
        index < 0 || index > 1'000'000) {
      return FieldError(origin, item_field, "a sparse task list's keys are task indices (\"0\", \"1\", ...)");
    }
    if (item.kind_case() != Value::kStringValue) {
      return FieldError(origin, item_field,
                        absl::StrCat("must be a \"host:port\" string, got ", JsonKindName(item)));
    }
    auto hp = ParseHostPort(item.string_value());
    if (!hp.ok()) return FieldError(origin, item_field, hp.status().message());
    if (!out->emplace(index, item.string_value()).second) {
      return FieldError(origin, item_field, "index given twice");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TaskId> ParseTask(const Value& v, absl::string_view origin) {
  if (v.kind_case() != Value::kStructValue) {
    return FieldError(origin, "task", absl::StrCat("must be an object, got ", JsonKindName(v)));
  }
  const auto& fields = v.struct_value().fields();
  auto type_it = fields.find("type");
  if (type_it == fields.end()) return FieldError(origin, "task.type", "missing");
  if (type_it->second.kind_case() != Value::kStringValue) {
    return FieldError(origin, "task.type",
                      absl::StrCat("must be a string, got ", JsonKindName(type_it->second)));
  }
  const auto type = ParseTaskType(type_it->second.string_value());
  if (!type) {
    return FieldError(origin, "task.type",
                      absl::StrCat("unknown task type \"", type_it->second.string_value(),
                                   "\" (expected chief, master, worker, ps or evaluator)"));
  }
  auto index_it = fields.find("index");
  if (index_it == fields.end()) return FieldError(origin, "task.index", "missing");
  ASSIGN_OR_RETURN(const int index, ParseIndex(index_it->second, origin, "task.index"));
  return TaskId{*type, index};
}

// Where the cluster is: "cluster", or "sparseCluster", the key Kubeflow's
// training operator wrote a dynamic-worker job's cluster under before May
// 2023 (its SparseTFConfig), read the same way. Both is ambiguous.
struct ClusterKey {
  std::string name;
  const Value* value = nullptr;
};

absl::StatusOr<ClusterKey> FindClusterKey(
    const google::protobuf::Map<std::string, Value>& top, absl::string_view origin) {
  auto cluster_it = top.find("cluster");
  auto sparse_it = top.find("sparseCluster");
  if (cluster_it != top.end() && sparse_it != top.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": both \"cluster\" and \"sparseCluster\" given; Kubeflow's training operator "
        "writes one of them (\"sparseCluster\" before May 2023, \"cluster\" since): keep one"));
  }
  if (cluster_it == top.end() && sparse_it == top.end()) return FieldError(origin, "cluster", "missing");
  ClusterKey key{cluster_it != top.end() ? "cluster" : "sparseCluster",
                 cluster_it != top.end() ? &cluster_it->second : &sparse_it->second};
  if (key.value->kind_case() != Value::kStructValue) {
    return FieldError(origin, key.name,
                      absl::StrCat("must be an object, got ", JsonKindName(*key.value)));
  }
  return key;
}

}  // namespace

absl::string_view TaskTypeName(TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return "chief";
    case TaskType::kWorker:
      return "worker";
    case TaskType::kPs:
      return "ps";
    case TaskType::kEvaluator:
      return "evaluator";
  }
  return "?";
}

std::optional<TaskType> ParseTaskType(absl::string_view name) {
  if (name == "chief" || name == "master") return TaskType::kChief;
  if (name == "worker") return TaskType::kWorker;
  if (name == "ps") return TaskType::kPs;
  if (name == "evaluator") return TaskType::kEvaluator;
  return std::nullopt;
}

std::string TaskId::ToString() const { return absl::StrCat(TaskTypeName(type), ":", index); }

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  absl::string_view host;
  absl::string_view port;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", address, "\" is not \"[ipv6]:port\""));
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", address, "\" has no port (expected \"host:port\")"));
    }
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", address, "\": write IPv6 hosts in brackets, \"[::1]:port\""));
    }
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" has an empty host"));
  }
  for (char c : host) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != '_' && c != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", address, "\" has an invalid character in its host"));
    }
  }
  int port_number = 0;
  if (port.empty() || !absl::SimpleAtoi(port, &port_number) || port_number < 1 ||
      port_number > 65535 || !absl::ascii_isdigit(port.front())) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", address, "\" has an invalid port (expected 1..65535)"));
  }
  return HostPort{std::string(host), port_number};
}

bool IsLoopbackHost(absl::string_view host) {
  const std::string h = absl::AsciiStrToLower(host);
  if (h == "localhost" || h == "::1") return true;
  // 127.0.0.0/8, written as an IPv4 literal (not a name such as "127.example").
  if (!absl::StartsWith(h, "127.")) return false;
  for (char c : h) {
    if (!absl::ascii_isdigit(c) && c != '.') return false;
  }
  return true;
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  return FromJson(text, path);
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromJson(absl::string_view json, absl::string_view origin) {
  ASSIGN_OR_RETURN(const Value root, ParseJson(json, origin));
  if (root.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": must be a JSON object, got ", JsonKindName(root)));
  }
  const auto& top = root.struct_value().fields();
  ASSIGN_OR_RETURN(const ClusterKey key, FindClusterKey(top, origin));
  ClusterSpec spec;
  RETURN_IF_ERROR(spec.ParseCluster(*key.value, origin, key.name));
  std::optional<TaskId> task;
  if (auto task_it = top.find("task"); task_it != top.end()) {
    ASSIGN_OR_RETURN(task, ParseTask(task_it->second, origin));
    // Before the cluster's own checks: the operator's empty cluster has no
    // ps, and what matters is why it is empty.
    RETURN_IF_ERROR(spec.CheckSparseTask(*task, origin));
  }
  RETURN_IF_ERROR(spec.Validate(origin, key.name));
  if (task.has_value()) {
    spec.AdoptSparsePsAddress(*task);
    if (!spec.Contains(*task)) {
      return FieldError(origin, "task",
                        absl::StrCat(task->ToString(), " is not in the cluster (it has ",
                                     spec.Addresses(task->type).size(), " ",
                                     TaskTypeName(task->type), " task(s))"));
    }
    spec.task_ = task;
  }
  return spec;
}

absl::Status ClusterSpec::ParseCluster(const Value& cluster_value, absl::string_view origin,
                                       absl::string_view key) {
  bool seen_chief_key = false;
  // Sorted for deterministic error messages.
  const std::map<std::string, Value> cluster(cluster_value.struct_value().fields().begin(),
                                             cluster_value.struct_value().fields().end());
  for (const auto& [name, value] : cluster) {
    const auto type = ParseTaskType(name);
    const std::string field = absl::StrCat(key, ".", name);
    if (!type) {
      return FieldError(origin, field,
                        absl::StrCat("unknown task type \"", name,
                                     "\" (expected chief, master, worker, ps or evaluator)"));
    }
    if (*type == TaskType::kChief) {
      if (seen_chief_key) {
        return FieldError(origin, field, "both \"chief\" and \"master\" given; a cluster has one chief");
      }
      seen_chief_key = true;
    }
    const int t = static_cast<int>(*type);
    if (value.kind_case() == Value::kStructValue) {
      sparse_ = is_map_[t] = true;
      RETURN_IF_ERROR(ParseTaskMap(value, origin, field, &listed_[t]));
    } else {
      RETURN_IF_ERROR(ParseTaskList(value, origin, field, &addresses_[t]));
    }
  }
  return absl::OkStatus();
}

absl::Status ClusterSpec::CheckSparseTask(const TaskId& task, absl::string_view origin) const {
  if (!sparse_ || task.type == TaskType::kPs || task.type == TaskType::kWorker) {
    return absl::OkStatus();
  }
  const bool chief = task.type == TaskType::kChief;
  const bool empty = num_ps() == 0 && listed_[static_cast<int>(TaskType::kPs)].empty();
  if (empty) {
    // Kubeflow's convertClusterSpecToSparseClusterSpec fills the cluster
    // of ps and worker replicas only.
    return absl::InvalidArgumentError(absl::StrCat(
        origin, " gives ", task.ToString(),
        " an empty cluster: Kubeflow's training operator does this to every replica but PS and "
        "Worker when enableDynamicWorker is true, so ",
        chief ? "a Chief (or Master) replica" : "an Evaluator replica",
        " cannot reach the ps. Drop the ",
        chief ? "Chief replica: in a dynamic-worker job worker 0 is the chief (pstrain k8s "
                "--dynamic_workers writes such a job)"
              : "Evaluator replica: pstrain runs no evaluator task (in a dynamic-worker job "
                "worker 0, the chief, evaluates the model)"));
  }
  if (!chief) return absl::OkStatus();  // refused later by what would run it
  return FieldError(origin, "task",
                    absl::StrCat(task.ToString(),
                                 " in a sparse (dynamic-worker) cluster, which has no chief task: "
                                 "its worker 0 is the chief. Start this task as worker 0, or give "
                                 "every task the full cluster"));
}

absl::Status ClusterSpec::Validate(absl::string_view origin, absl::string_view key) const {
  const std::string field = std::string(key);
  if (sparse_) {
    // Ranks are those of a cluster without a chief (cluster_spec.h).
    if (!Addresses(TaskType::kChief).empty() || !listed_[static_cast<int>(TaskType::kChief)].empty()) {
      return FieldError(origin, field + ".chief",
                        "a sparse (dynamic-worker) cluster lists no chief: its worker 0 is the "
                        "chief; list that task as worker 0");
    }
    for (const auto& [index, address] : listed_[static_cast<int>(TaskType::kWorker)]) {
      if (index >= kDynamicWorkerSlots) {
        return FieldError(origin, absl::StrCat(field, ".worker.", index),
                          absl::StrCat("a sparse cluster has workers 0..", kDynamicWorkerSlots - 1));
      }
    }
    if (Addresses(TaskType::kWorker).size() > static_cast<size_t>(kDynamicWorkerSlots)) {
      return FieldError(origin, field + ".worker",
                        absl::StrCat("a sparse cluster has at most ", kDynamicWorkerSlots, " workers"));
    }
  }
  if (Addresses(TaskType::kChief).size() > 1) {
    return FieldError(origin, field + ".chief",
                      absl::StrCat("has ", Addresses(TaskType::kChief).size(),
                                   " tasks; a cluster has at most one chief"));
  }
  if (Addresses(TaskType::kEvaluator).size() > 1) {
    return FieldError(origin, field + ".evaluator", "a cluster has at most one evaluator");
  }
  if (num_ps() == 0 && listed_[static_cast<int>(TaskType::kPs)].empty()) {
    return FieldError(origin, field + ".ps", "missing or empty; at least one ps task is needed");
  }
  if (num_workers() == 0) {
    return FieldError(origin, field + ".worker",
                      "missing or empty, and no chief; at least one worker or chief is needed");
  }
  std::map<std::string, TaskId> seen;
  for (const TaskId& t : AllTasks()) {
    auto hp = ParseHostPort(Address(t));
    CHECK(hp.ok());  // validated above
    auto [it, inserted] = seen.emplace(CanonicalEndpoint(*hp), t);
    if (!inserted) {
      return FieldError(origin, absl::StrCat(field, ".", TaskTypeName(t.type), "[", t.index, "]"),
                        absl::StrCat("duplicate address \"", Address(t), "\" (also ",
                                     it->second.ToString(), ")"));
    }
  }
  return absl::OkStatus();
}

ClusterSpec ClusterSpec::Local(int num_ps, int num_workers, int first_port) {
  CHECK(num_ps >= 1 && num_workers >= 1 && first_port >= 1 &&
        first_port + num_workers + num_ps - 1 <= 65535)
      << num_ps << " ps, " << num_workers << " workers from port " << first_port;
  ClusterSpec spec;
  int port = first_port;
  for (int i = 0; i < num_workers; ++i) {
    spec.addresses_[static_cast<int>(TaskType::kWorker)].push_back(absl::StrCat("localhost:", port++));
  }
  for (int i = 0; i < num_ps; ++i) {
    spec.addresses_[static_cast<int>(TaskType::kPs)].push_back(absl::StrCat("localhost:", port++));
  }
  return spec;
}

const std::vector<std::string>& ClusterSpec::Addresses(TaskType type) const {
  return addresses_[static_cast<int>(type)];
}

void ClusterSpec::AdoptSparsePsAddress(const TaskId& task) {
  auto& list = addresses_[static_cast<int>(TaskType::kPs)];
  auto& listed = listed_[static_cast<int>(TaskType::kPs)];
  if (!sparse_ || task.type != TaskType::kPs || task.index < 0 || list.size() != 1 ||
      !listed.empty()) {
    return;
  }
  listed.emplace(task.index, list.front());
  list.clear();
  is_map_[static_cast<int>(TaskType::kPs)] = true;
}

const std::string& ClusterSpec::Address(const TaskId& task) const {
  CHECK(Contains(task)) << task.ToString();
  const auto& listed = listed_[static_cast<int>(task.type)];
  if (auto it = listed.find(task.index); it != listed.end()) return it->second;
  return Addresses(task.type)[task.index];
}

bool ClusterSpec::Contains(const TaskId& task) const {
  return (task.index >= 0 && task.index < static_cast<int>(Addresses(task.type).size())) ||
         listed_[static_cast<int>(task.type)].count(task.index) > 0;
}

int ClusterSpec::num_workers() const {
  if (sparse_) return kDynamicWorkerSlots;
  return static_cast<int>(Addresses(TaskType::kChief).size() + Addresses(TaskType::kWorker).size());
}

int ClusterSpec::WorkerRank(const TaskId& task) const {
  CHECK(sparse_ ? task.type == TaskType::kWorker : Contains(task)) << task.ToString();
  if (task.type == TaskType::kChief) return 0;
  CHECK(task.type == TaskType::kWorker) << task.ToString() << " has no worker rank";
  return task.index + (has_chief() ? 1 : 0);
}

TaskId ClusterSpec::TaskForRank(int rank) const {
  CHECK(rank >= 0 && rank < num_workers()) << rank;
  if (has_chief()) {
    return rank == 0 ? TaskId{TaskType::kChief, 0} : TaskId{TaskType::kWorker, rank - 1};
  }
  return TaskId{TaskType::kWorker, rank};
}

bool ClusterSpec::IsChief(const TaskId& task) const {
  if (task.type == TaskType::kChief) return Contains(task);
  return task.type == TaskType::kWorker && (sparse_ || Contains(task)) && WorkerRank(task) == 0;
}

std::vector<TaskId> ClusterSpec::AllTasks() const {
  std::vector<TaskId> out;
  for (TaskType type : kAllTypes) {
    std::set<int> indices;
    for (int i = 0; i < static_cast<int>(Addresses(type).size()); ++i) indices.insert(i);
    for (const auto& [i, address] : listed_[static_cast<int>(type)]) indices.insert(i);
    for (int i : indices) out.push_back({type, i});
  }
  return out;
}

uint64_t ClusterSpec::JobId() const {
  uint64_t h = kFnvOffsetBasis;
  if (sparse_) {
    h = Fnv1a64("sparse;ps", h);
    for (const TaskId& t : AllTasks()) {
      if (t.type == TaskType::kPs) h = Fnv1a64(absl::StrCat("|", t.index, "=", Address(t)), h);
    }
    return h;
  }
  for (TaskType type : kAllTypes) {
    h = Fnv1a64(TaskTypeName(type), h);
    for (const auto& a : Addresses(type)) h = Fnv1a64(absl::StrCat("|", a), h);
    h = Fnv1a64(";", h);
  }
  return h;
}

std::string ClusterSpec::Json(const std::optional<TaskId>& task, bool multiline) const {
  std::vector<std::string> jobs;
  for (TaskType type : kAllTypes) {
    const int t = static_cast<int>(type);
    if (is_map_[t]) {
      std::vector<std::string> items;
      for (const auto& [i, a] : listed_[t]) items.push_back(absl::StrCat("\"", i, "\": \"", a, "\""));
      jobs.push_back(absl::StrCat("\"", TaskTypeName(type), "\": {", absl::StrJoin(items, ", "), "}"));
      continue;
    }
    if (Addresses(type).empty()) continue;
    jobs.push_back(absl::StrCat("\"", TaskTypeName(type), "\": [\"",
                                absl::StrJoin(Addresses(type), "\", \""), "\"]"));
  }
  const char* open = multiline ? "{\n  \"cluster\": {\n    " : "{\"cluster\": {";
  const char* between = multiline ? ",\n    " : ", ";
  const char* close = multiline ? "\n  }" : "}";
  std::string json = absl::StrCat(open, absl::StrJoin(jobs, between), close);
  if (task.has_value()) {
    absl::StrAppend(&json, ", \"task\": {\"type\": \"", TaskTypeName(task->type),
                    "\", \"index\": ", task->index, "}");
  }
  return absl::StrCat(json, multiline ? "\n}\n" : "}");
}

std::string ClusterSpec::ToJson() const { return Json(std::nullopt, /*multiline=*/true); }

std::string ClusterSpec::ToTfConfig(const TaskId& task) const { return Json(task, /*multiline=*/false); }

void ClusterSpec::set_address(const TaskId& task, std::string address) {
  CHECK(Contains(task)) << task.ToString();
  auto& listed = listed_[static_cast<int>(task.type)];
  if (auto it = listed.find(task.index); it != listed.end()) {
    it->second = std::move(address);
    return;
  }
  addresses_[static_cast<int>(task.type)][task.index] = std::move(address);
}

absl::StatusOr<ClusterSpec> ResolveTaskConfig(const TaskConfigSources& sources) {
  std::string json;
  std::string origin;
  if (!sources.cluster_spec_path.empty()) {
    ASSIGN_OR_RETURN(json, ReadFileToString(sources.cluster_spec_path));
    origin = sources.cluster_spec_path;
  } else if (sources.tf_config.has_value()) {
    json = *sources.tf_config;
    origin = "TF_CONFIG";
  } else {
    return absl::InvalidArgumentError(
        "no cluster configuration: set TF_CONFIG or pass --cluster_spec=FILE "
        "--task_type=T --task_index=I");
  }
  ASSIGN_OR_RETURN(ClusterSpec spec, ClusterSpec::FromJson(json, origin));
  const bool has_type = !sources.task_type.empty();
  const bool has_index = sources.task_index >= 0;
  if (has_type || has_index) {
    if (!has_type || !has_index) {
      if (!spec.task().has_value()) {
        return absl::InvalidArgumentError("--task_type and --task_index must be given together");
      }
    }
    TaskId task = spec.task().value_or(TaskId{});
    if (has_type) {
      const auto type = ParseTaskType(sources.task_type);
      if (!type) {
        return absl::InvalidArgumentError(
            absl::StrCat("--task_type: unknown task type \"", sources.task_type,
                         "\" (expected chief, master, worker, ps or evaluator)"));
      }
      task.type = *type;
    }
    if (has_index) task.index = sources.task_index;
    RETURN_IF_ERROR(spec.CheckSparseTask(task, origin));
    ClusterSpec with_task = spec;
    with_task.set_task(task);  // a sparse ps takes the one address listed
    if (!with_task.Contains(task)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--task_type/--task_index: ", task.ToString(), " is not in ", origin,
                       " (it has ", spec.Addresses(task.type).size(), " ",
                       TaskTypeName(task.type), " task(s))"));
    }
    spec = std::move(with_task);
  }
  if (!spec.task().has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": task: missing; set it in the JSON or pass --task_type and --task_index"));
  }
  return spec;
}

}  // namespace pstrain

// libFuzzer target: TF_CONFIG / cluster spec JSON.
//
// The input is the JSON, optionally preceded by a line "#T I\n" that plays
// --task_type=T --task_index=I (either may be "-" for "not given"), so one
// input drives ClusterSpec::FromJson and ResolveTaskConfig's resolution of the
// task. Every spec that parses must survive what the binaries do with it.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cluster_spec.h"
#include "glog/logging.h"

namespace pstrain::fuzz {
namespace {

// Splits an optional "#type index\n" first line off `input` into `sources`.
absl::string_view TakeFlags(absl::string_view input, TaskConfigSources* sources) {
  if (input.empty() || input.front() != '#') return input;
  const size_t eol = input.find('\n');
  const absl::string_view line = input.substr(1, eol == absl::string_view::npos ? input.npos : eol - 1);
  const std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
  if (parts.first != "-") sources->task_type = std::string(parts.first);
  int index = -1;
  if (parts.second != "-" && absl::SimpleAtoi(parts.second, &index)) sources->task_index = index;
  return eol == absl::string_view::npos ? absl::string_view() : input.substr(eol + 1);
}

// What ps_server, worker and the launcher do with a resolved spec.
void Exercise(const ClusterSpec& spec) {
  // A sparse spec's ps lists only itself (num_ps() 0; cluster_spec.h).
  CHECK(spec.num_ps() >= 1 || spec.sparse());
  CHECK_GE(spec.num_workers(), 1);
  for (const TaskId& t : spec.AllTasks()) {
    CHECK(spec.Contains(t));
    CHECK(ParseHostPort(spec.Address(t)).ok()) << spec.Address(t);
    // A task's TF_CONFIG must parse back to the same cluster and task.
    absl::StatusOr<ClusterSpec> again = ClusterSpec::FromJson(spec.ToTfConfig(t), "ToTfConfig");
    CHECK(again.ok()) << again.status();
    CHECK_EQ(again->JobId(), spec.JobId());
    CHECK(again->task().has_value() && *again->task() == t);
  }
  for (int rank = 0; rank < spec.num_workers(); ++rank) {
    CHECK_EQ(spec.WorkerRank(spec.TaskForRank(rank)), rank);
  }
  CHECK(spec.IsChief(spec.ChiefTask()));
}

void Run(const uint8_t* data, size_t size) {
  TaskConfigSources sources;
  const absl::string_view json =
      TakeFlags(absl::string_view(reinterpret_cast<const char*>(data), size), &sources);
  sources.tf_config = std::string(json);
  absl::StatusOr<ClusterSpec> parsed = ClusterSpec::FromJson(json, "TF_CONFIG");
  if (parsed.ok()) Exercise(*parsed);
  absl::StatusOr<ClusterSpec> resolved = ResolveTaskConfig(sources);
  if (!resolved.ok()) {
    CHECK(!resolved.status().message().empty());
    return;
  }
  CHECK(parsed.ok()) << "ResolveTaskConfig accepted what FromJson refused";
  CHECK(resolved->task().has_value());
  CHECK(resolved->Contains(*resolved->task()));
  Exercise(*resolved);
}

}  // namespace
}  // namespace pstrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::fuzz::Run(data, size);
  return 0;
}

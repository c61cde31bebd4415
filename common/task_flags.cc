#include "common/task_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, cluster_spec, "",
          "Cluster spec JSON file (TF_CONFIG format); overrides $TF_CONFIG");
ABSL_FLAG(std::string, task_type, "",
          "This process's task type (chief, master, worker, ps, evaluator); overrides the spec's task");
ABSL_FLAG(int, task_index, -1, "This process's task index; overrides the spec's task");

namespace pstrain {

TaskConfigSources TaskConfigSourcesFromFlags(const char* tf_config_env) {
  TaskConfigSources sources;
  if (tf_config_env != nullptr && tf_config_env[0] != '\0') sources.tf_config = tf_config_env;
  sources.cluster_spec_path = absl::GetFlag(FLAGS_cluster_spec);
  sources.task_type = absl::GetFlag(FLAGS_task_type);
  sources.task_index = absl::GetFlag(FLAGS_task_index);
  return sources;
}

std::string ClusterSpecFlag() { return absl::GetFlag(FLAGS_cluster_spec); }

}  // namespace pstrain

#include "flags/task_flags.h"

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/string_view.h"

ABSL_FLAG(std::string, cluster_spec, "",
          "Cluster spec JSON file (TF_CONFIG format); overrides $TF_CONFIG");
ABSL_FLAG(std::string, task_type, "",
          "This process's task type (chief, master, worker, ps, evaluator); overrides the spec's task");
ABSL_FLAG(int, task_index, -1, "This process's task index; overrides the spec's task");
ABSL_FLAG(std::string, secret_file, "",
          "The job's secret (64 hex digits; `pstrain keygen --out=FILE` makes one): every "
          "socket is then authenticated and encrypted with CURVE keys derived from it");
ABSL_FLAG(bool, insecure, false,
          "Run without a job secret: no authentication, no encryption (trusted networks only)");

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

std::string SecretFileFlag() { return absl::GetFlag(FLAGS_secret_file); }
bool InsecureFlag() { return absl::GetFlag(FLAGS_insecure); }

std::set<std::string> FlagsOnCommandLine(int argc, char** argv) {
  std::set<std::string> names;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    std::string name(arg.substr(0, arg.find('=')));
    if (absl::FindCommandLineFlag(name) == nullptr && name.rfind("no", 0) == 0) name = name.substr(2);
    names.insert(name);
  }
  return names;
}

}  // namespace pstrain

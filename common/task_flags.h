#pragma once

// The flags that place a process in a cluster, shared by ps_server and
// worker: --cluster_spec=FILE, --task_type=T, --task_index=I. TF_CONFIG is
// read in main() and handed in here.

#include <optional>
#include <string>

#include "common/cluster_spec.h"

namespace pstrain {

// Combines the flags with $TF_CONFIG (`tf_config_env`, null when unset).
TaskConfigSources TaskConfigSourcesFromFlags(const char* tf_config_env);

// The --cluster_spec flag's value (the launcher reads the same flag).
std::string ClusterSpecFlag();

}  // namespace pstrain

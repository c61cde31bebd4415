#pragma once

// The flags that place a process in a cluster, shared by ps_server and
// worker: --cluster_spec=FILE, --task_type=T, --task_index=I, and how it
// authenticates: --secret_file=FILE or --insecure. TF_CONFIG is read in
// main() and handed in here. Only binaries link these flags (the launcher
// forwards them); libraries take their values through Options.

#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"

namespace pstrain {

// Combines the flags with $TF_CONFIG (`tf_config_env`, null when unset).
TaskConfigSources TaskConfigSourcesFromFlags(const char* tf_config_env);

// The --cluster_spec flag's value (the launcher reads the same flag).
std::string ClusterSpecFlag();

// The names of the flags that `argv` gives ("--lr=0.1" and "--lr 0.1" give
// "lr"; "--nofree_ports" gives "free_ports"); parsing stops at "--".
std::set<std::string> FlagsOnCommandLine(int argc, char** argv);

// The flags' raw values (the launcher forwards them; the tasks resolve them
// with ResolveTransportSecurity, transport/security.h).
std::string SecretFileFlag();
bool InsecureFlag();

}  // namespace pstrain

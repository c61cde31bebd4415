#pragma once

// Free ports for local clusters: `pstrain launch --free_ports`, and tests and
// benchmarks that start a cluster, so that no run ever uses a fixed port.

#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"

namespace pstrain {

// A copy of `spec` (without its task) whose loopback addresses
// (IsLoopbackHost) have free ports chosen by the OS; other addresses are
// kept. The ports are held until all are chosen, so none is handed out
// twice; another process may still take one before a task binds it.
// Internal naming the OS error when no port can be had.
absl::StatusOr<ClusterSpec> WithFreePorts(const ClusterSpec& spec);

// `n` distinct free TCP ports of 127.0.0.1, none of them in `exclude` (the
// ports a spec already names), held until all are chosen (as above).
absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int n, const std::set<int>& exclude);

}  // namespace pstrain

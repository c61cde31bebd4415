#pragma once

// --straggler=worker:1:delay_ms=40: slow a worker on purpose, so that an
// experiment shows where each update mode wins.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// Parses "worker:I:delay_ms=D" or "chief:0:delay_ms=D" items ("master" is
// read as "chief") into delays by task, keyed by TaskId::ToString()
// ("worker:1"). The launcher checks each task against the spec and starts
// that worker with --straggler_delay_ms=D. InvalidArgument naming the bad
// item.
absl::StatusOr<std::map<std::string, double>> ParseStragglerItems(
    const std::vector<std::string>& items);

}  // namespace pstrain

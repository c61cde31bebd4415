#pragma once

// --straggler=worker:1:delay_ms=40: slow a worker on purpose, so that an
// experiment shows where each update mode wins.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// Parses "worker:I:delay_ms=D" or "chief:0:delay_ms=D" items into delays by
// task. The map's key is the item's task as "worker:1"; the launcher turns it
// into a rank with the spec. InvalidArgument naming the bad item.
absl::StatusOr<std::map<std::string, double>> ParseStragglerItems(
    const std::vector<std::string>& items);

}  // namespace pstrain

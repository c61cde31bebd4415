#include "common/update_mode.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::StatusOr<proto::UpdateMode> ParseUpdateMode(const std::string& name) {
  if (name == "sync") return proto::SYNC;
  if (name == "async") return proto::ASYNC;
  if (name == "ssp") return proto::SSP;
  return absl::InvalidArgumentError(
      absl::StrCat("--mode: \"", name, "\" (expected sync, async or ssp)"));
}

std::string UpdateModeName(proto::UpdateMode mode) {
  switch (mode) {
    case proto::SYNC:
      return "sync";
    case proto::ASYNC:
      return "async";
    case proto::SSP:
      return "ssp";
    default:
      return "unknown";
  }
}

}  // namespace pstrain

#include "ps_server/ps_server_options.h"

#include <algorithm>

#include "absl/flags/marshalling.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace pstrain {

std::vector<std::string> PsServerOptions::ToArgs() const {
  return {absl::StrCat("--peer_timeout_s=", absl::UnparseFlag(peer_timeout_s)),
          absl::StrCat("--register_timeout_s=", absl::UnparseFlag(register_timeout_s)),
          absl::StrCat("--max_message_mb=", max_message_bytes >> 20),
          absl::StrCat("--bind=", bind_endpoint),
          absl::StrCat("--checkpoint_dir=", checkpoint_dir),
          absl::StrCat("--metrics_port=", metrics_port),
          absl::StrCat("--metrics_host=", metrics_host),
          absl::StrCat("--timeline_dir=", timeline_dir),
          absl::StrCat("--io_threads=", io_threads),
          absl::StrCat("--update_threads=", update_threads),
          absl::StrCat("--busy_poll_us=", busy_poll_us)};
}

absl::Status ValidatePsServerOptions(const PsServerOptions& options) {
  if (!(options.peer_timeout_s > 0) || !(options.register_timeout_s > 0) ||
      options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        "--peer_timeout_s, --register_timeout_s and --max_message_mb must be > 0");
  }
  if (options.io_threads < 0 || options.io_threads > 16) {
    return absl::InvalidArgumentError("--io_threads must be 1 to 16, or 0 for as many as suit");
  }
  if (options.update_threads < 1 || options.update_threads > 64) {
    return absl::InvalidArgumentError("--update_threads must be 1 to 64");
  }
  if (options.busy_poll_us < 0 || options.busy_poll_us > kMaxBusyPollUs) {
    return absl::InvalidArgumentError(absl::StrCat("--busy_poll_us must be 0 to ", kMaxBusyPollUs));
  }
  return absl::OkStatus();
}

int AutoIoThreads(int requested, int num_workers, bool curve, unsigned host_cores) {
  if (requested > 0) return requested;
  if (!curve) return 1;
  const int half = static_cast<int>(host_cores / 2);
  return std::clamp(std::min(num_workers, half), 1, 8);
}

}  // namespace pstrain

#include "common/cancellation.h"

#include <utility>

namespace pstrain {
namespace {

class Never final : public Cancellation {
 public:
  bool cancelled() const override { return false; }
  std::string reason() const override { return ""; }
};

}  // namespace

const Cancellation* NeverCancelled() {
  static const Never never;
  return &never;
}

void CancellationFlag::Cancel(std::string reason) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return;
  reason_ = std::move(reason);
  cancelled_.store(true, std::memory_order_release);
}

std::string CancellationFlag::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

}  // namespace pstrain

#include "common/signals.h"

#include <csignal>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// What a signal handler may write: the one piece of process-wide state,
// read only through the ShutdownSignals that main() hands down.
volatile std::sig_atomic_t g_signal = 0;

extern "C" void RecordSignal(int signo) { g_signal = signo; }

class ShutdownSignals final : public Cancellation {
 public:
  bool cancelled() const override { return g_signal != 0; }
  std::string reason() const override {
    const int sig = g_signal;
    return sig != 0 ? absl::StrCat("signal ", sig) : "";
  }
};

}  // namespace

const Cancellation& InstallShutdownHandlers() {
  static const ShutdownSignals signals;
  struct sigaction sa = {};
  sa.sa_handler = &RecordSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return signals;
}

}  // namespace pstrain

#include "common/signals.h"

#include <csignal>

namespace pstrain {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void RecordSignal(int signo) { g_signal = signo; }

}  // namespace

void InstallShutdownHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = &RecordSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

int ShutdownSignal() { return g_signal; }

}  // namespace pstrain

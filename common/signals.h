#pragma once

// SIGINT / SIGTERM as a flag that long-running loops poll. Signals are
// process-wide by nature; main() installs the handlers once and passes the
// flag's reader down.

namespace pstrain {

// Installs handlers for SIGINT and SIGTERM that record the signal. Also
// ignores SIGPIPE (a dead peer must be an error, not a kill).
void InstallShutdownHandlers();

// The signal received (SIGINT/SIGTERM), or 0 while none was.
int ShutdownSignal();

}  // namespace pstrain

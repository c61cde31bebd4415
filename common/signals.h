#pragma once

// SIGINT and SIGTERM as the process's Cancellation (common/cancellation.h).
// Signals are process-wide by nature: main() installs the handlers once and
// passes the Cancellation it gets down, through Options or Create, to the
// loops that must stop. No library code reads the signals itself.

#include "common/cancellation.h"

namespace pstrain {

// Installs handlers for SIGINT and SIGTERM that record the signal, and
// ignores SIGPIPE (a dead peer must be an error, not a kill). Returns the
// Cancellation that fires once either signal arrived (its reason:
// "signal 15"); it lives as long as the process. For main() only.
const Cancellation& InstallShutdownHandlers();

}  // namespace pstrain

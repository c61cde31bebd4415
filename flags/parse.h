#pragma once

// The command line of every pstrain binary, read with Abseil's flags but
// with pstrain's exit codes: a flag that no part of the binary defines, or
// a value its flag cannot take, is the user's configuration being wrong
// (exit 2, kExitBadConfig), where absl::ParseCommandLine alone exits 1, the
// code a supervisor reads as a failure worth a restart.

#include <vector>

namespace pstrain {

// Checks argv's flags (up to a "--") against the flags linked into the
// binary, then parses them with absl::ParseCommandLine and returns its
// positional arguments (argv[0] first). On an unknown flag, a missing or
// malformed value, prints "ERROR: ..." on stderr for each and exits with
// kExitBadConfig. Abseil's own flags (--help, --flagfile, --undefok, ...)
// are left to Abseil.
std::vector<char*> ParseFlagsOrExit(int argc, char** argv);

}  // namespace pstrain

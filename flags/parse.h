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
// kExitBadConfig, the unknown flag's nearest name suggested. --help (and
// --helpshort) prints the usage message and every flag the binary's own
// files define, with its help and default, grouped by file; --helpfull
// Abseil's too; --help=WORD (--helpmatch=WORD) those whose name, help or
// file mention WORD: on stdout, then exit 0. Abseil's other flags
// (--flagfile, --undefok, --version, ...) are left to Abseil.
std::vector<char*> ParseFlagsOrExit(int argc, char** argv);

}  // namespace pstrain

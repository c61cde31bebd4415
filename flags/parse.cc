#include "flags/parse.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/exit_codes.h"

namespace pstrain {
namespace {

// Abseil's flags that ParseCommandLine handles itself.
bool IsAbseilFlag(absl::string_view name) {
  static const std::set<absl::string_view> kNames = {
      "help",      "helpfull",   "helpshort",       "helppackage",
      "helpmatch", "version",    "only_check_args", "flagfile",
      "fromenv",   "tryfromenv", "undefok"};
  return kNames.count(name) > 0;
}

// The names --undefok=a,b lets through unknown.
std::set<std::string> UndefinedOk(int argc, char** argv) {
  std::set<std::string> names;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    for (const absl::string_view prefix : {"--undefok=", "-undefok="}) {
      if (absl::StartsWith(arg, prefix)) {
        for (absl::string_view n : absl::StrSplit(arg.substr(prefix.size()), ',')) {
          names.emplace(n);
        }
      }
    }
  }
  return names;
}

// Checks argv[*i] (a flag) and advances *i past a value given as the next
// argument. Returns the error, or "" when the flag is good.
std::string CheckFlag(int argc, char** argv, int* i, const std::set<std::string>& undefok) {
  absl::string_view arg = argv[*i];
  arg.remove_prefix(absl::StartsWith(arg, "--") ? 2 : 1);
  const size_t eq = arg.find('=');
  const absl::string_view name = arg.substr(0, eq);
  if (IsAbseilFlag(name)) return "";
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr && absl::StartsWith(name, "no") && eq == absl::string_view::npos) {
    absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
    if (negated != nullptr && negated->IsOfType<bool>()) return "";
  }
  if (flag == nullptr) {
    if (undefok.count(std::string(name)) > 0) return "";
    return "Unknown command line flag '" + std::string(name) + "'";
  }
  std::string value;
  if (eq != absl::string_view::npos) {
    value = std::string(arg.substr(eq + 1));
  } else if (flag->IsOfType<bool>()) {
    return "";
  } else if (*i + 1 < argc) {
    value = argv[++*i];
  } else {
    return "Missing the value for the flag '" + std::string(name) + "'";
  }
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    return "Illegal value '" + value + "' specified for flag '" + std::string(name) + "'; " + error;
  }
  return "";
}

}  // namespace

std::vector<char*> ParseFlagsOrExit(int argc, char** argv) {
  const std::set<std::string> undefok = UndefinedOk(argc, argv);
  bool bad = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    const std::string error = CheckFlag(argc, argv, &i, undefok);
    if (!error.empty()) {
      std::fprintf(stderr, "ERROR: %s\n", error.c_str());
      bad = true;
    }
  }
  if (bad) std::exit(kExitBadConfig);
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace pstrain

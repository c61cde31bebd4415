#include "flags/parse.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
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

// Whether a flag's file is Abseil's own (--helpfull's, not --help's).
bool FromAbseil(absl::string_view file) { return absl::StrContains(file, "absl/"); }

// The edits (insertions, deletions, substitutions) that make `a` into `b`.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean --x?)" for the linked flag nearest `name` (at most 2
// edits, or a third of its length), else "".
std::string Suggestion(absl::string_view name) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
    if (FromAbseil(flag->Filename())) continue;
    // The nearest; of those as near, the first by name (GetAllFlags has no order).
    const size_t d = EditDistance(name, flag_name);
    if (d < best_distance || (d == best_distance && flag_name < best)) {
      best_distance = d;
      best = std::string(flag_name);
    }
  }
  return best.empty() ? "" : " (did you mean --" + best + "?)";
}

// The help flags this parser answers itself: "" (none), "help" (the
// binary's own flags), "helpfull" (Abseil's too) or "match" (with
// `*substring`: the flags whose name, help or file contain it).
std::string HelpAsked(int argc, char** argv, std::string* substring) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    if (arg == "help" || arg == "helpshort") return "help";
    if (arg == "helpfull") return "helpfull";
    for (const absl::string_view prefix : {"help=", "helpmatch="}) {
      if (absl::ConsumePrefix(&arg, prefix)) {
        *substring = std::string(arg);
        return "match";
      }
    }
  }
  return "";
}

// `file` from the source tree's root ("worker/train_flags.cc"), as this
// file's own path says where the root is (Abseil gives a flag's file
// without its leading '/').
std::string SourcePath(absl::string_view file) {
  absl::string_view root = __FILE__;
  if (absl::ConsumeSuffix(&root, "flags/parse.cc")) {
    absl::ConsumePrefix(&root, "/");
    absl::ConsumePrefix(&file, "/");
    absl::ConsumePrefix(&file, root);
  }
  return std::string(file);
}

// `text` folded at 78 columns, each line after `indent`.
std::string Folded(absl::string_view text, absl::string_view indent) {
  std::string out;
  std::string line(indent);
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > 78) {
      out += line + "\n";
      line = std::string(indent);
    }
    if (line.size() > indent.size()) line += ' ';
    line.append(word.data(), word.size());
  }
  if (line.size() > indent.size()) out += line + "\n";
  return out;
}

// Prints the usage message and the flags `mode` asks for, grouped by the
// file that defines them, each with its help and default, on stdout.
void PrintHelp(const std::string& mode, const std::string& substring) {
  std::map<std::string, std::vector<const absl::CommandLineFlag*>> by_file;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file = SourcePath(flag->Filename());
    if (mode == "help" && FromAbseil(file)) continue;
    if (mode == "match" && !absl::StrContains(name, substring) &&
        !absl::StrContains(flag->Help(), substring) && !absl::StrContains(file, substring)) {
      continue;
    }
    by_file[file].push_back(flag);
  }
  std::printf("%s\n", std::string(absl::ProgramUsageMessage()).c_str());
  if (by_file.empty()) std::printf("\nNo flag matches \"%s\".\n", substring.c_str());
  for (auto& [file, flags] : by_file) {
    std::sort(flags.begin(), flags.end(),
              [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
    std::printf("\n  Flags from %s:\n", file.c_str());
    for (const absl::CommandLineFlag* flag : flags) {
      const std::string value =
          flag->IsOfType<std::string>() ? "\"" + flag->DefaultValue() + "\"" : flag->DefaultValue();
      std::printf("%s", Folded(std::string("--") + std::string(flag->Name()) + " (" + flag->Help() +
                                   "); default: " + value + ";",
                               "    ")
                            .c_str());
    }
  }
  if (mode == "help") {
    std::printf(
        "\n--helpfull lists Abseil's flags too; --help=WORD the flags that mention WORD.\n");
  }
  std::fflush(stdout);
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
    return "Unknown command line flag '" + std::string(name) + "'" + Suggestion(name);
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
  std::string substring;
  const std::string help = HelpAsked(argc, argv, &substring);
  if (!help.empty()) {
    PrintHelp(help, substring);
    std::exit(0);
  }
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

// ParseFlagsOrExit: a flag nothing defines, a missing or malformed value
// exit 2 (the user's configuration), where Abseil alone exits 1; good
// command lines parse as absl::ParseCommandLine parses them; --help lists
// the binary's flags and exits 0.

#include "flags/parse.h"

#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "common/exit_codes.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, parse_test_count, 1, "a number");
ABSL_FLAG(bool, parse_test_switch, false, "a switch");
ABSL_FLAG(std::string, parse_test_name, "", "a name");

namespace pstrain {
namespace {

// Parses `args` (argv[0] added); returns the positional arguments.
std::vector<std::string> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "parse_test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::vector<std::string> out;
  for (char* p : ParseFlagsOrExit(static_cast<int>(argv.size()), argv.data())) out.emplace_back(p);
  return out;
}

TEST(ParseFlagsOrExit, GoodFlagsParseInEveryForm) {
  const std::vector<std::string> positional =
      Parse({"run", "--parse_test_count=3", "--parse_test_name", "x", "-parse_test_switch",
             "--", "--not_a_flag"});
  EXPECT_EQ(absl::GetFlag(FLAGS_parse_test_count), 3);
  EXPECT_EQ(absl::GetFlag(FLAGS_parse_test_name), "x");
  EXPECT_TRUE(absl::GetFlag(FLAGS_parse_test_switch));
  EXPECT_EQ(positional, (std::vector<std::string>{"parse_test", "run", "--not_a_flag"}));
  Parse({"--noparse_test_switch"});
  EXPECT_FALSE(absl::GetFlag(FLAGS_parse_test_switch));
}

TEST(ParseFlagsOrExit, AnUnknownFlagExitsTwo) {
  EXPECT_EXIT(Parse({"--parse_test_bogus=1"}), ::testing::ExitedWithCode(kExitBadConfig),
              "Unknown command line flag 'parse_test_bogus'");
  EXPECT_EXIT(Parse({"--noparse_test_count"}), ::testing::ExitedWithCode(kExitBadConfig),
              "Unknown command line flag 'noparse_test_count'");
  // A typo is answered with the nearest name.
  EXPECT_EXIT(Parse({"--parse_test_cuont=1"}), ::testing::ExitedWithCode(kExitBadConfig),
              "'parse_test_cuont' \\(did you mean --parse_test_count\\?\\)");
}

// Runs Parse(args) with stdout on stderr, where a death test reads.
void ParseToStderr(std::vector<std::string> args) {
  dup2(STDERR_FILENO, STDOUT_FILENO);
  Parse(std::move(args));
}

TEST(ParseFlagsOrExit, HelpListsTheBinarysFlagsWithDefaultsAndExitsZero) {
  // Before any check of the others: --help with a typo beside it still helps.
  EXPECT_EXIT(
      ParseToStderr({"--parse_test_bogus=1", "--help"}), ::testing::ExitedWithCode(0),
      "Flags from tests/flags/parse_test.cc:\n.*--parse_test_count \\(a number\\); default: 1;"
      ".*--parse_test_name \\(a name\\); default: \"\";");
  EXPECT_EXIT(ParseToStderr({"--help=a switch"}), ::testing::ExitedWithCode(0),
              "--parse_test_switch \\(a switch\\); default: false;");
  EXPECT_EXIT(ParseToStderr({"--helpfull"}), ::testing::ExitedWithCode(0), "absl/flags/parse.cc");
}

TEST(ParseFlagsOrExit, AMalformedOrMissingValueExitsTwo) {
  EXPECT_EXIT(Parse({"--parse_test_count=many"}), ::testing::ExitedWithCode(kExitBadConfig),
              "Illegal value 'many' specified for flag 'parse_test_count'");
  EXPECT_EXIT(Parse({"--parse_test_switch=maybe"}), ::testing::ExitedWithCode(kExitBadConfig),
              "parse_test_switch");
  EXPECT_EXIT(Parse({"--parse_test_name"}), ::testing::ExitedWithCode(kExitBadConfig),
              "Missing the value for the flag 'parse_test_name'");
}

TEST(ParseFlagsOrExit, UndefokLetsNamedFlagsThrough) {
  const std::vector<std::string> positional =
      Parse({"--undefok=parse_test_absent", "--parse_test_absent=1", "go"});
  EXPECT_EQ(positional.back(), "go");
}

}  // namespace
}  // namespace pstrain

// Where a user's command finds the library and the Python package, in a
// build tree and in an installed package (launcher/supervisor/command_frontend.h).

#include "launcher/supervisor/command_frontend.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;

void Touch(const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path.string()) << "";
}

TEST(CommandFrontend, ABuildTreeGivesItsLibAndPythonDirectories) {
  const std::string build = testing::MakeTempDir("build");
  Touch(fs::path(build) / "bin" / "pstrain");
  Touch(fs::path(build) / "lib" / "libpstrain.so");
  const CommandFrontend f = CommandFrontendFor(build + "/bin");
  EXPECT_EQ(f.library, build + "/bin/../lib/libpstrain.so");
  EXPECT_EQ(f.python_path, build + "/bin/../python");
}

TEST(CommandFrontend, AnInstalledPackageGivesItsLibraryAndItsParentDirectory) {
  // Normal, as the function's answers are (the temp dir may hold "//").
  const std::string site =
      fs::path(testing::MakeTempDir("site-packages")).lexically_normal().string();
  const fs::path package = fs::path(site) / "pstrain";
  Touch(package / "__init__.py");
  Touch(package / "libpstrain.so");
  Touch(package / "_bin" / "pstrain");
  for (const std::string& bin_dir :
       {(package / "_bin").string(), (package / "_bin").string() + "/"}) {
    const CommandFrontend f = CommandFrontendFor(bin_dir);
    EXPECT_EQ(f.library, (package / "libpstrain.so").string()) << bin_dir;
    EXPECT_EQ(f.python_path, site) << bin_dir;
  }
}

TEST(CommandFrontend, APackageWithoutTheLibraryIsTakenForABuildTree) {
  // Launch then refuses the command naming the build tree's library.
  const std::string site = testing::MakeTempDir("site-packages");
  const fs::path package = fs::path(site) / "pstrain";
  Touch(package / "__init__.py");
  Touch(package / "_bin" / "pstrain");
  const CommandFrontend f = CommandFrontendFor((package / "_bin").string());
  EXPECT_EQ(f.library, (package / "_bin").string() + "/../lib/libpstrain.so");
}

}  // namespace
}  // namespace pstrain

#include "launcher/supervisor/command_frontend.h"

#include <filesystem>
#include <system_error>

namespace pstrain {

CommandFrontend CommandFrontendFor(const std::string& bin_dir) {
  namespace fs = std::filesystem;
  // "SITE/pstrain/_bin/.." normalises to "SITE/pstrain/", whose
  // parent_path() would be itself: without the trailing separator.
  fs::path package = (fs::path(bin_dir) / "..").lexically_normal();
  if (package.filename().empty()) package = package.parent_path();
  std::error_code ec;
  if (fs::is_regular_file(package / "__init__.py", ec) &&
      fs::is_regular_file(package / "libpstrain.so", ec)) {
    return {(package / "libpstrain.so").string(), package.parent_path().string()};
  }
  return {bin_dir + "/../lib/libpstrain.so", bin_dir + "/../python"};
}

}  // namespace pstrain

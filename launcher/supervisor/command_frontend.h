#pragma once

// Where a user's command (LaunchOptions::command) finds pstrain's C API
// library and Python package, from the directory that holds the binaries.
// Two layouts:
//
//   a build tree           BUILD/bin/{pstrain,ps_server,worker}
//                          BUILD/lib/libpstrain.so
//                          BUILD/python/pstrain (a link to python/pstrain)
//   an installed package   SITE/pstrain/_bin/{pstrain,ps_server,worker}
//                          SITE/pstrain/libpstrain.so
//                          SITE/pstrain/__init__.py ...   (pip install: setup.py)
//
// In the installed layout the command's PYTHONPATH gets SITE, the package's
// parent directory (a venv's site-packages), so that `python3 train.py`
// imports the same pstrain whichever Python it is.

#include <string>

namespace pstrain {

struct CommandFrontend {
  std::string library;      // PSTRAIN_LIBRARY: the path of libpstrain.so
  std::string python_path;  // first on PYTHONPATH: the directory holding pstrain/
};

// The installed layout's paths when bin_dir's parent directory is a Python
// package holding the library (bin_dir/../__init__.py and
// bin_dir/../libpstrain.so exist); otherwise the build tree's, whether or
// not their files exist (Launch checks the library, naming its path).
CommandFrontend CommandFrontendFor(const std::string& bin_dir);

}  // namespace pstrain

#pragma once

// The third-party and standard headers most of the libraries' sources
// include, precompiled once per build directory and force-included in
// every C++ file of every pstrain_library (pstrain_library_pch in
// cmake/PstrainHelpers.cmake; PSTRAIN_LIBRARY_PCH, GCC builds). Parsing
// them was about half of a library file's compile (worker/trainer.cc: 4.1
// of 9.4 s with GCC at -O3; Eigen/Core alone 2.7 s with -march=native).
// Only third-party and standard headers: a change to the project's own
// headers must not rebuild every library through this file. Nothing here
// may depend on a macro a source file defines before its includes (none
// does: `grep -rn '^#define' --include=*.cc`).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "glog/logging.h"
#include "google/protobuf/arena.h"
#include "google/protobuf/extension_set.h"
#include "google/protobuf/generated_message_reflection.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_field.h"

#pragma once

// The headers nearly every test includes, parsed once per build directory
// and reused by every test target (tests/CMakeLists.txt, pstrain_test_pch):
// parsing them was about half of a test's compile (GCC -ftime-report under
// ASan: 9.5 of 21 s), and the CI builds the tests three times. Only
// third-party and standard headers: a change to the project's own headers
// must not rebuild every test through this file.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "google/protobuf/message.h"
#include "gtest/gtest.h"

#pragma once

// What a finished run left in its run directory, read back for tests.
// Failures to read are test failures (EXPECT), and give empty results.

#include <functional>
#include <string>
#include <vector>

#include "proto/run_summary.pb.h"

namespace pstrain::testing {

// RUN_DIR/final_params.f32 as floats.
std::vector<float> ReadFinalParams(const std::string& run_dir);

// RUN_DIR/summary.json.
proto::RunSummary ReadRunSummary(const std::string& run_dir);

// What `compute` returns, computed once and shared by every test process
// that asks with the same `key` (ctest runs each test in a process of its
// own, and a whole uninterrupted training is the same for all of them).
// Kept in <build>/test-cache/, under a name hashed from `key` and the size
// and modification time of this test binary and each of `binaries`
// (BinaryPath names), so rebuilding any of them computes it again. A
// process that asks while another computes it waits for that (flock). An
// empty result, or one whose
// computation failed the test, is returned but not kept.
std::vector<float> SharedFloats(const std::string& key, const std::vector<std::string>& binaries,
                                const std::function<std::vector<float>()>& compute);

}  // namespace pstrain::testing

#pragma once

// What a finished run left in its run directory, read back for tests.
// Failures to read are test failures (EXPECT), and give empty results.

#include <string>
#include <vector>

#include "proto/run_summary.pb.h"

namespace pstrain::testing {

// RUN_DIR/final_params.f32 as floats.
std::vector<float> ReadFinalParams(const std::string& run_dir);

// RUN_DIR/summary.json.
proto::RunSummary ReadRunSummary(const std::string& run_dir);

}  // namespace pstrain::testing

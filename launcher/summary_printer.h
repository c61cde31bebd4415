#pragma once

// The few lines a person reads at the end of a run.

#include <cstdio>
#include <string>

#include "proto/run_summary.pb.h"

namespace pstrain {

void PrintSummary(const proto::RunSummary& summary, const std::string& run_dir, std::FILE* out);

}  // namespace pstrain

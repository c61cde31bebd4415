#pragma once

// The few lines a person reads at the end of a run.

#include <cstdio>
#include <string>

#include "proto/run_summary.pb.h"

namespace pstrain {

void PrintSummary(const proto::RunSummary& summary, const std::string& run_dir, std::FILE* out);

// The run's optimizer, briefly: "momentum 0.5" for SGD (and for a summary
// from before optimizers could be chosen), else its description
// ("adam (betas 0.9, 0.999, eps 1e-08, weight decay 0)").
std::string DescribeRunOptimizer(const proto::RunSummary& summary);

// Whether the run used SGD (the default learning rate scales with the
// workers only then).
bool IsSgdRun(const proto::RunSummary& summary);

}  // namespace pstrain

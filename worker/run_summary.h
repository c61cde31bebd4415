#pragma once

// Turns what a run measured (the chief's evaluations, the workers' reports
// and the shards' counters) into summary.json's RunSummary.

#include <cstdint>
#include <vector>

#include "proto/pstrain.pb.h"
#include "proto/run_summary.pb.h"

namespace pstrain {

// One evaluation on the test set.
struct EvalPoint {
  int64_t step = 0;
  double train_seconds = 0;  // training time before it (evaluation excluded)
  double accuracy = 0;
  double loss = 0;
};

// Fills the run's results into `summary` (whose configuration fields the
// caller set): accuracy and time-to-accuracy from `evals`, throughput from
// the workers' reports (shard 0's), counters from every shard.
// `eval_seconds` is the chief's evaluation time inside the training window.
void FillSummaryResults(const std::vector<EvalPoint>& evals,
                        const std::vector<proto::ShardStats>& shards, double eval_seconds,
                        proto::RunSummary* summary);

// First training second at which accuracy reached `target`, or -1.
double SecondsToAccuracy(const std::vector<EvalPoint>& evals, double target);

// The p-quantile (0..1) of a histogram whose bucket i counts value i.
int HistogramQuantile(const std::vector<int64_t>& histogram, double p);

}  // namespace pstrain

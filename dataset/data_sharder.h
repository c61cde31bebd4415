#pragma once

// Which examples a worker trains on, step by step.
//
// Every epoch has one seeded permutation of the dataset, the same on every
// worker. Global batch s is positions [s*G, min((s+1)*G, size)) of it, with
// G = num_workers * batch_size, and worker `rank` takes every num_workers-th
// position of that global batch starting at `rank` (as PyTorch's
// DistributedSampler interleaves). So the union of the N workers' batches at
// step s is exactly batch s of one process with batch G, and every worker
// runs steps_per_epoch() = ceil(size / G) steps. The last global batch may be
// short; a worker's share of it may then be smaller (or, when fewer examples
// than workers remain, empty).

#include <cstdint>
#include <vector>

namespace pstrain {

class DataSharder {
 public:
  // REQUIRES: num_examples > 0, num_workers > 0, 0 <= rank < num_workers,
  // batch_size > 0.
  DataSharder(int64_t num_examples, int num_workers, int rank, int batch_size, uint64_t seed);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t global_batch() const { return global_batch_; }

  // Dataset indices of this worker's batch at `step` (0-based within the
  // epoch) of `epoch`. REQUIRES: 0 <= step < steps_per_epoch().
  void BatchIndices(int epoch, int64_t step, std::vector<int64_t>* out);

  // The epoch's permutation of [0, num_examples) (Fisher-Yates driven by
  // SplitMix64 seeded from (seed, epoch)); cached for the current epoch.
  const std::vector<int64_t>& Permutation(int epoch);

  // Examples all workers together train on in `steps` steps from the start
  // of an epoch (the last global batch counted at its true size).
  int64_t ImagesInSteps(int64_t steps) const;

 private:
  int64_t num_examples_;
  int num_workers_;
  int rank_;
  int64_t global_batch_;
  int64_t steps_per_epoch_;
  uint64_t seed_;
  int cached_epoch_ = -1;
  std::vector<int64_t> permutation_;
};

}  // namespace pstrain

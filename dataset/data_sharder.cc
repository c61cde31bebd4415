#include "dataset/data_sharder.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "common/random.h"
#include "glog/logging.h"

namespace pstrain {

DataSharder::DataSharder(int64_t num_examples, int num_workers, int rank, int batch_size,
                         uint64_t seed)
    : num_examples_(num_examples),
      num_workers_(num_workers),
      rank_(rank),
      global_batch_(static_cast<int64_t>(num_workers) * batch_size),
      steps_per_epoch_(0),
      seed_(seed) {
  CHECK_GT(num_examples, 0);
  CHECK_GT(num_workers, 0);
  CHECK_GE(rank, 0);
  CHECK_LT(rank, num_workers);
  CHECK_GT(batch_size, 0);
  steps_per_epoch_ = (num_examples_ + global_batch_ - 1) / global_batch_;
}

void DataSharder::BatchIndices(int epoch, int64_t step, std::vector<int64_t>* out) {
  CHECK_GE(step, 0);
  CHECK_LT(step, steps_per_epoch_);
  const std::vector<int64_t>& permutation = Permutation(epoch);
  const int64_t begin = step * global_batch_;
  const int64_t end = std::min(begin + global_batch_, num_examples_);
  out->clear();
  for (int64_t position = begin + rank_; position < end; position += num_workers_) {
    out->push_back(permutation[static_cast<size_t>(position)]);
  }
}

const std::vector<int64_t>& DataSharder::Permutation(int epoch) {
  CHECK_GE(epoch, 0);
  if (epoch == cached_epoch_) return permutation_;
  // Every worker must draw the same permutation, so the generator is keyed by
  // (seed, epoch) alone; Mix64 on both keeps nearby seeds and epochs apart.
  SplitMix64 rng(Mix64(seed_) ^ Mix64(static_cast<uint64_t>(epoch) + 1));
  permutation_.resize(static_cast<size_t>(num_examples_));
  std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
  // Fisher-Yates (Knuth's Algorithm P), from the back.
  for (size_t i = permutation_.size() - 1; i > 0; --i) {
    std::swap(permutation_[i], permutation_[rng.Below(i + 1)]);
  }
  cached_epoch_ = epoch;
  return permutation_;
}

int64_t DataSharder::ImagesInSteps(int64_t steps) const {
  CHECK_GE(steps, 0);
  // Steps past the end of an epoch continue into the next ones.
  const int64_t full_epochs = steps / steps_per_epoch_;
  const int64_t rest = steps % steps_per_epoch_;
  return full_epochs * num_examples_ + std::min(rest * global_batch_, num_examples_);
}

}  // namespace pstrain

#pragma once

// The weights of an average of workers' gradients by their examples (a
// sync version's, SyncPolicy; a REDUCE round's, GradientReducer): each
// gradient's examples relative to those of the first in rank order, and
// the sum scaled by that first's over all. With equal batches every
// weight is exactly 1, so the average is the plain sum of the gradients
// times 1/n: DDP's, and for one worker its gradient itself, where
// examples x gradient would round before the division by the examples
// did (a batch of 10, 100). Rank order, not arrival order, picks the
// first, so the result repeats bit for bit.

#include <cstdint>

namespace pstrain {

class RelativeWeights {
 public:
  // `examples` relative to the first nonzero ones passed since Reset (the
  // caller passes them in rank order); 0 stays 0.
  float Of(float examples) {
    if (examples == 0.0f) return 0.0f;
    if (ref_ == 0.0f) ref_ = examples;
    return examples / ref_;
  }
  // What scales the sum of the relative gradients to the average over
  // `total` examples: the first's over `total` (0: none).
  float Scale(int64_t total) const {
    return total > 0 && ref_ > 0.0f
               ? static_cast<float>(static_cast<double>(ref_) / static_cast<double>(total))
               : 0.0f;
  }
  // Weights as given (Of(w) == w, Scale 1/total): for a sum already formed
  // with them.
  void Absolute() { ref_ = 1.0f; }
  void Reset() { ref_ = 0.0f; }

 private:
  float ref_ = 0.0f;
};

}  // namespace pstrain

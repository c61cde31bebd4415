#pragma once

// log_softmax followed by the mean negative log-likelihood loss: PyTorch's
// F.nll_loss(F.log_softmax(logits, dim=1), labels) (reduction "mean"). Not
// a Layer: it ends the network and takes labels.
//
//   logits [n, C] (row-major), labels [n] int32 in [0, C)
//   log_probs[i,j] = logits[i,j] - m_i - log(sum_k exp(logits[i,k] - m_i)),
//                    m_i = max_k logits[i,k]      (stable log-sum-exp)
//   loss           = -(1/n) sum_i log_probs[i, labels[i]]
// Backward:
//   dlogits[i,j]   = (exp(log_probs[i,j]) - [j == labels[i]]) / n
//
// Stateless; holds no scratch, so any n >= 1 is accepted.

#include <cstdint>

#include "absl/status/statusor.h"

namespace pstrain::models::cpu {

class LogSoftmaxNll {
 public:
  // REQUIRES: num_classes >= 1.
  explicit LogSoftmaxNll(int num_classes);

  int num_classes() const { return classes_; }

  // Writes log_probs [n, C] and returns the mean loss (summed in double).
  // InvalidArgument for n < 1 or a label outside [0, C) (labels come from
  // data files); log_probs is then unspecified.
  absl::StatusOr<double> Forward(int n, const float* logits, const int32_t* labels,
                                 float* log_probs) const;

  // Writes dlogits [n, C] from the log_probs of a successful Forward with the
  // same n and labels. May alias log_probs.
  void Backward(int n, const float* log_probs, const int32_t* labels, float* dlogits) const;

 private:
  int classes_;
};

}  // namespace pstrain::models::cpu

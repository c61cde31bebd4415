#pragma once

// log_softmax followed by the mean negative log-likelihood on the GPU, the
// formulas of models/cpu/log_softmax_nll.h (PyTorch's
// F.nll_loss(F.log_softmax(logits, dim=1), labels)):
//
//   logits [n, C] (row-major), labels [n] int32 in [0, C)
//   log_probs[i,j] = logits[i,j] - m_i - log(sum_k exp(logits[i,k] - m_i)),
//                    m_i = max_k logits[i,k]; the sum in double, as the CPU
//   loss           = -(1/n) sum_i log_probs[i, labels[i]]
//   dlogits[i,j]   = (exp(log_probs[i,j]) - [j == labels[i]]) / n
//
// Our own kernels (one thread per row; C is 10 for every network here):
// cuDNN's softmax would need a separate NLL and argmax pass, and doing the
// row in double like the CPU keeps the two backends within rounding of each
// other. The kernel also writes, per row, the log-probability of the label
// and whether the argmax of the logits (ties to the lowest class, as the
// CPU's std::max_element) is the label; the host sums the loss from those in
// example order, in double, exactly as the CPU does.
//
// Stateless; not a Layer (it ends the network and takes labels).

#include <cstdint>

#include "absl/status/status.h"
#include "models/cuda/cuda_status.h"

namespace pstrain::models::cuda {

class LogSoftmaxNll {
 public:
  // REQUIRES: num_classes >= 1.
  explicit LogSoftmaxNll(int num_classes);

  int num_classes() const { return classes_; }

  // Host-side check of host `labels` [n]: InvalidArgument for n < 1 or a
  // label outside [0, C), with the CPU backend's messages. The GPU kernels
  // trust their labels, so callers check them first.
  absl::Status CheckLabels(int n, const int32_t* labels) const;

  // Queues on `stream`, all pointers on the device: log_probs [n, C] and
  // stats [2n] with stats[i] = log_probs[i, labels[i]] and stats[n + i] = 1
  // when row i's argmax is its label, else 0. Labels must have passed
  // CheckLabels.
  absl::Status Forward(cudaStream_t stream, int n, const float* logits, const int32_t* labels,
                       float* log_probs, float* stats) const;

  // Queues dlogits [n, C] from the log_probs of a Forward with the same n and
  // labels. dlogits may alias log_probs.
  absl::Status Backward(cudaStream_t stream, int n, const float* log_probs, const int32_t* labels,
                        float* dlogits) const;

  // From host stats [2n] (Forward's, copied back): the mean loss, summed in
  // double in example order as the CPU does; and the number of hits.
  static double MeanLoss(int n, const float* stats);
  static int64_t Correct(int n, const float* stats);

 private:
  int classes_;
};

}  // namespace pstrain::models::cuda

#include "models/cpu/log_softmax_nll.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain::models::cpu {
namespace {

// One row: out = in - logsumexp(in). Subtracting the maximum first keeps
// exp() from overflowing; the sum is taken in double so a row of many
// classes loses nothing to rounding.
void LogSoftmaxRow(const float* in, int classes, float* out) {
  const float max = *std::max_element(in, in + classes);
  double sum = 0.0;
  for (int j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(in[j] - max));
  const float log_sum = max + static_cast<float>(std::log(sum));
  for (int j = 0; j < classes; ++j) out[j] = in[j] - log_sum;
}

}  // namespace

LogSoftmaxNll::LogSoftmaxNll(int num_classes) : classes_(num_classes) { CHECK_GE(num_classes, 1); }

absl::StatusOr<double> LogSoftmaxNll::Forward(int n, const float* logits, const int32_t* labels,
                                              float* log_probs) const {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("loss on a batch of ", n));
  double nll = 0.0;
  for (int i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", labels[i], " of example ", i, " outside [0, ", classes_, ")"));
    }
    float* row = log_probs + int64_t{i} * classes_;
    LogSoftmaxRow(logits + int64_t{i} * classes_, classes_, row);
    nll -= row[labels[i]];
  }
  return nll / n;
}

void LogSoftmaxNll::Backward(int n, const float* log_probs, const int32_t* labels,
                             float* dlogits) const {
  const float scale = 1.0f / static_cast<float>(n);
  for (int i = 0; i < n; ++i) {
    const int64_t row = int64_t{i} * classes_;
    for (int j = 0; j < classes_; ++j) {
      dlogits[row + j] = std::exp(log_probs[row + j]) * scale;
    }
    dlogits[row + labels[i]] -= scale;
  }
}

}  // namespace pstrain::models::cpu

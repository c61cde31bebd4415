#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "models/cuda/launch.h"
#include "models/cuda/log_softmax_nll.h"

namespace pstrain::models::cuda {
namespace {

// One thread per row, in the CPU's order of operations: the max (first of
// equal maxima, NaN never replacing a number, as std::max_element), the
// float difference widened to double before exp, the double sum, one float
// log_sum, then out = in - log_sum in float.
__global__ void LogSoftmaxNllForwardKernel(int n, int classes, const float* logits,
                                           const int32_t* labels, float* log_probs, float* stats) {
  PSTRAIN_GRID_STRIDE_LOOP(i, n) {
    const float* in = logits + i * classes;
    float* out = log_probs + i * classes;
    float row_max = in[0];
    int argmax = 0;
    for (int j = 1; j < classes; ++j) {
      if (row_max < in[j]) {
        row_max = in[j];
        argmax = j;
      }
    }
    double sum = 0.0;
    for (int j = 0; j < classes; ++j) sum += exp(static_cast<double>(in[j] - row_max));
    const float log_sum = row_max + static_cast<float>(log(sum));
    for (int j = 0; j < classes; ++j) out[j] = in[j] - log_sum;
    const int32_t label = labels[i];
    stats[i] = out[label];
    stats[n + i] = argmax == label ? 1.0f : 0.0f;
  }
}

// One thread per element. __fmul_rn/__fsub_rn keep nvcc from contracting the
// two roundings into one FMA, so the result rounds as the CPU's does.
__global__ void LogSoftmaxNllBackwardKernel(int n, int classes, const float* log_probs,
                                            const int32_t* labels, float* dlogits) {
  const float scale = 1.0f / static_cast<float>(n);
  const int64_t size = int64_t{n} * classes;
  PSTRAIN_GRID_STRIDE_LOOP(k, size) {
    const int64_t i = k / classes;
    const int j = static_cast<int>(k - i * classes);
    float grad = __fmul_rn(expf(log_probs[k]), scale);
    if (j == labels[i]) grad = __fsub_rn(grad, scale);
    dlogits[k] = grad;
  }
}

}  // namespace

LogSoftmaxNll::LogSoftmaxNll(int num_classes) : classes_(num_classes) { CHECK_GE(num_classes, 1); }

absl::Status LogSoftmaxNll::CheckLabels(int n, const int32_t* labels) const {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("loss on a batch of ", n));
  for (int i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", labels[i], " of example ", i, " outside [0, ", classes_, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status LogSoftmaxNll::Forward(cudaStream_t stream, int n, const float* logits,
                                    const int32_t* labels, float* log_probs, float* stats) const {
  return LaunchKernel("LogSoftmaxNllForwardKernel", [&] {
    LogSoftmaxNllForwardKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        n, classes_, logits, labels, log_probs, stats);
  });
}

absl::Status LogSoftmaxNll::Backward(cudaStream_t stream, int n, const float* log_probs,
                                     const int32_t* labels, float* dlogits) const {
  const int64_t size = int64_t{n} * classes_;
  return LaunchKernel("LogSoftmaxNllBackwardKernel", [&] {
    LogSoftmaxNllBackwardKernel<<<BlocksFor(size), kThreadsPerBlock, 0, stream>>>(
        n, classes_, log_probs, labels, dlogits);
  });
}

double LogSoftmaxNll::MeanLoss(int n, const float* stats) {
  double nll = 0.0;
  for (int i = 0; i < n; ++i) nll -= stats[i];
  return nll / n;
}

int64_t LogSoftmaxNll::Correct(int n, const float* stats) {
  int64_t correct = 0;
  for (int i = 0; i < n; ++i) correct += stats[n + i] != 0.0f;
  return correct;
}

}  // namespace pstrain::models::cuda

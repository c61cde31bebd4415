#include "worker/epoch_meter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pstrain {

void EpochMeter::Begin(const EpochMark& start) {
  start_ = start;
  examples_ = 0;
  loss_sum_ = 0;
  loss_count_ = 0;
}

void EpochMeter::AddStep(int64_t examples, std::optional<double> loss) {
  examples_ += examples;
  if (examples > 0 && loss.has_value()) {
    loss_sum_ += *loss;
    ++loss_count_;
  }
}

ClosedEpoch EpochMeter::End(int epoch, int epochs, int workers, const EpochMark& end,
                            const EvalPoint& eval, double images) {
  const double seconds = std::max(0.0, end.train_seconds - start_.train_seconds);
  ClosedEpoch out;
  EpochRecord& r = out.record;
  r.epoch = epoch;
  r.step = end.step;
  r.steps = end.step - start_.step;
  r.train_seconds = eval.train_seconds;
  r.train_loss = loss_count_ > 0 ? loss_sum_ / static_cast<double>(loss_count_) : 0.0;
  r.test_loss = eval.loss;
  r.test_accuracy = eval.accuracy;
  r.images_per_sec = seconds > 0 ? images / seconds : 0.0;
  out.line = absl::StrFormat(
      "epoch %d/%d done: test accuracy %.4f, test loss %.4f, train loss %.4f, %.0f images/s "
      "(all %s workers), %.1f s",
      epoch, epochs, r.test_accuracy, r.test_loss, r.train_loss, r.images_per_sec,
      workers > 0 ? absl::StrCat(workers) : "the", seconds);
  Begin(end);
  return out;
}

}  // namespace pstrain

#include "launcher/progress.h"

#include <cinttypes>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"

namespace pstrain {

ProgressEvent ParseProgressLine(absl::string_view line) {
  ProgressEvent e;
  const size_t at = line.find("] epoch ");
  if (at == absl::string_view::npos) return e;
  // sscanf needs a terminated string; the rest of the line is short.
  const std::string rest(line.substr(at + 2));
  if (std::sscanf(rest.c_str(), "epoch %d/%d done: test accuracy %lf", &e.epoch, &e.epochs,
                  &e.accuracy) == 3) {
    e.kind = ProgressEvent::Kind::kEpochDone;
  } else if (std::sscanf(rest.c_str(), "epoch %d/%d step %" SCNd64 "/%" SCNd64, &e.epoch, &e.epochs,
                         &e.step, &e.steps) == 4) {
    e.kind = ProgressEvent::Kind::kStep;
  }
  return e;
}

RunProgress::RunProgress(std::FILE* out, bool rewrite, std::string prefix)
    : out_(out), rewrite_(rewrite), prefix_(std::move(prefix)), start_us_(MonotonicMicros()) {
  Print("starting", /*final_line=*/!rewrite_);
}

void RunProgress::OnChiefLine(absl::string_view line) {
  const ProgressEvent e = ParseProgressLine(line);
  if (e.kind == ProgressEvent::Kind::kEpochDone) {
    last_accuracy_ = absl::StrFormat("test acc %.4f", e.accuracy);
    Print(absl::StrFormat("epoch %d/%d, %s", e.epoch, e.epochs, last_accuracy_), /*final_line=*/!rewrite_);
  } else if (e.kind == ProgressEvent::Kind::kStep && rewrite_) {
    Print(absl::StrFormat("epoch %d/%d, step %d/%d%s", e.epoch, e.epochs, e.step, e.steps,
                          last_accuracy_.empty() ? "" : ", last " + last_accuracy_),
          false);
  }
}

void RunProgress::Finish(const absl::Status& status, double test_accuracy, double images_per_sec) {
  if (!status.ok()) {
    Print(absl::StrCat("FAILED: ", status.message()), true);
    return;
  }
  Print(absl::StrFormat("done, test acc %.4f, %.0f images/s", test_accuracy, images_per_sec), true);
}

void RunProgress::Print(const std::string& text, bool final_line) {
  const std::string line = absl::StrFormat("%s: %s, %.0f s", prefix_, text, SecondsSince(start_us_));
  if (rewrite_) {
    absl::FPrintF(out_, "\r\033[K%s%s", line, final_line ? "\n" : "");
  } else if (final_line) {
    absl::FPrintF(out_, "%s\n", line);
  }
  std::fflush(out_);
}

}  // namespace pstrain

#include "launcher/supervisor/progress.h"

#include <algorithm>
#include <cinttypes>
#include <cstdlib>

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
    const size_t rate = rest.find(" img/s");
    const size_t space = rest.rfind(' ', rate == std::string::npos ? 0 : rate - 1);
    if (rate != std::string::npos && space != std::string::npos) {
      e.images_per_sec = std::strtod(rest.c_str() + space + 1, nullptr);
    }
  }
  return e;
}

RunProgress::RunProgress(std::FILE* out, bool rewrite, std::string prefix, int workers)
    : out_(out),
      rewrite_(rewrite),
      prefix_(std::move(prefix)),
      start_us_(MonotonicMicros()),
      workers_(std::max(1, workers)) {
  Print("starting", /*final_line=*/!rewrite_);
}

void RunProgress::OnChiefLine(absl::string_view line) {
  const ProgressEvent e = ParseProgressLine(line);
  if (e.kind == ProgressEvent::Kind::kEpochDone) {
    last_accuracy_ = absl::StrFormat("test acc %.4f", e.accuracy);
    Print(absl::StrFormat("epoch %d/%d, %s", e.epoch, e.epochs, last_accuracy_), /*final_line=*/!rewrite_);
  } else if (e.kind == ProgressEvent::Kind::kStep && rewrite_) {
    last_step_ = absl::StrFormat("epoch %d/%d, step %d/%d", e.epoch, e.epochs, e.step, e.steps);
    if (e.images_per_sec > 0) {
      absl::StrAppendFormat(&last_step_, ", %.0f img/s", e.images_per_sec * workers_);
    }
    const double done = e.steps > 0 && e.epochs > 0
                            ? ((e.epoch - 1) * static_cast<double>(e.steps) + e.step) /
                                  (static_cast<double>(e.epochs) * e.steps)
                            : 0;
    if (done > 0 && done < 1) {
      absl::StrAppendFormat(&last_step_, ", ETA %.0f s", SecondsSince(start_us_) * (1 - done) / done);
    }
    Redraw();
  }
}

void RunProgress::OnTaskState(const std::string& task, const std::string& state) {
  states_[task] = state;
  if (rewrite_) Redraw();
}

std::string RunProgress::TaskStates() const {
  std::map<std::string, int> counts;
  std::string named;
  for (const auto& [task, state] : states_) {
    ++counts[state];
    if (state == "restarting" || state == "ended") absl::StrAppend(&named, ", ", task, " ", state);
  }
  std::string out;
  for (const char* state : {"running", "done"}) {
    if (counts[state] > 0) absl::StrAppend(&out, ", ", counts[state], " ", state);
  }
  return out + named;
}

void RunProgress::Redraw() {
  std::string text = last_step_.empty() ? "starting" : last_step_;
  if (!last_accuracy_.empty()) absl::StrAppend(&text, ", last ", last_accuracy_);
  Print(text + TaskStates(), false);
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

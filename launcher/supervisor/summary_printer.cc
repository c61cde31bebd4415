#include "launcher/supervisor/summary_printer.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pstrain {
namespace {

std::string SecondsOrNever(double s) {
  return s < 0 ? std::string("not reached") : absl::StrFormat("%.1f s", s);
}

}  // namespace

bool IsSgdRun(const proto::RunSummary& s) {
  return s.optimizer().empty() || absl::StartsWith(s.optimizer(), "sgd");
}

std::string DescribeRunOptimizer(const proto::RunSummary& s) {
  return IsSgdRun(s) ? absl::StrFormat("momentum %g", s.momentum()) : s.optimizer();
}

void PrintSummary(const proto::RunSummary& s, const std::string& run_dir, std::FILE* out) {
  absl::FPrintF(out, "\n== pstrain summary: %s ==\n", run_dir);
  absl::FPrintF(out, "mode %s | %d ps | %d workers | model %s on %s | global batch %d | lr %g | %s\n",
                s.mode(), s.num_ps(), s.num_workers(), s.model(), s.device(), s.global_batch(),
                s.learning_rate(), DescribeRunOptimizer(s));
  // summary.json's epochs is what was asked for; --max_steps (or a run
  // stopped early) may have ended training sooner, and then the line says
  // how far it got.
  const int64_t asked_steps = int64_t{s.epochs()} * s.steps_per_epoch();
  if (s.steps_per_epoch() > 0 && s.steps_per_worker() < asked_steps) {
    absl::FPrintF(out,
                  "final test accuracy %.4f (loss %.4f) after %d steps per worker: %.2f of the %d "
                  "epoch(s) asked for\n",
                  s.final_test_accuracy(), s.final_test_loss(), s.steps_per_worker(),
                  static_cast<double>(s.steps_per_worker()) / s.steps_per_epoch(), s.epochs());
  } else {
    absl::FPrintF(out, "final test accuracy %.4f (loss %.4f) after %d epoch(s), %d steps per worker\n",
                  s.final_test_accuracy(), s.final_test_loss(), s.epochs(), s.steps_per_worker());
  }
  if (!s.resumed_from().empty()) {
    absl::FPrintF(out, "resumed from checkpoint %s (the figures below cover the resumed part; the "
                  "counters, the whole run)\n", s.resumed_from());
  }
  absl::FPrintF(out, "train images/s %.0f | train time %.1f s | wall time %.1f s\n",
                s.train_images_per_sec(), s.train_seconds(), s.wall_seconds());
  absl::FPrintF(out, "time to 95%% %s | to 97%% %s | to 98%% %s | to 99%% %s\n",
                SecondsOrNever(s.seconds_to_95()), SecondsOrNever(s.seconds_to_97()),
                SecondsOrNever(s.seconds_to_98()), SecondsOrNever(s.seconds_to_99()));
  absl::FPrintF(out, "updates applied %d | gradients %d | stale dropped %d | late dropped %d | "
                "mean staleness %.2f (p99 %d, max %d)\n",
                s.updates_applied(), s.gradients_received(), s.stale_gradients_dropped(),
                s.late_gradients_dropped(), s.mean_staleness(), s.p99_staleness(), s.max_staleness());
  if (s.unordered_sums() > 0) {
    absl::FPrintF(out,
                  "%d sync push(es) summed out of rank order (a rank back too late, or too "
                  "many kept): this run may not repeat bit for bit\n",
                  s.unordered_sums());
  }
  if (s.restarts() > 0) {
    std::vector<std::string> restarts;
    for (const proto::TaskRestart& r : s.task_restarts()) {
      restarts.push_back(absl::StrFormat("%s after %.1f s (%s)", r.task(), r.after_s(), r.reason()));
    }
    absl::FPrintF(out, "restarts %d: %s | recoveries %d | updates lost %d\n", s.restarts(),
                  absl::StrJoin(restarts, ", "), s.recoveries_size(), s.updates_lost());
  }
  absl::FPrintF(out, "metrics: %s/{summary.json,epochs.csv,evals.csv,steps_worker*.csv,logs/}\n", run_dir);
  std::fflush(out);
}

}  // namespace pstrain

#include "launcher/experiments/report.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "launcher/supervisor/summary_printer.h"
#include "worker/train_options.h"

namespace pstrain {
namespace {

std::string Accuracy(double a) { return absl::StrFormat("%.4f", a); }

// The run with the largest `key` among finished ones, if any has one.
template <typename Key>
const RunRecord* Best(const std::vector<RunRecord>& runs, Key key) {
  const RunRecord* best = nullptr;
  std::optional<double> best_value;
  for (const RunRecord& r : runs) {
    if (!r.status.ok()) continue;
    const std::optional<double> v = key(r);
    if (v && (!best_value || *v > *best_value)) {
      best = &r;
      best_value = v;
    }
  }
  return best;
}

}  // namespace

std::string ReportPreamble(const std::string& title, const std::string& command_line,
                           const MachineInfo& machine, const std::vector<std::string>& facts) {
  std::string out = absl::StrCat("# ", title, "\n\nMade by:\n\n```\n", command_line, "\n```\n\n");
  absl::StrAppend(&out, "- Machine: ", DescribeMachine(machine), "\n");
  for (const std::string& f : facts) absl::StrAppend(&out, "- ", f, "\n");
  return out + "\n";
}

std::string DescribeSgdDefaultRate(const std::string& mode, const std::string& workers,
                                   const std::string& workers_less_one, const std::string& momentum) {
  if (mode == "sync") return absl::StrFormat("%g x %s", kSgdLrPerWorker, workers);
  return absl::StrFormat("%g x (1 - %s) x min(%s, %g / %s)", kSgdLrPerWorker / (1 - kSgdMomentum), momentum,
                         workers, kAsyncStalenessBudget, workers_less_one);
}

std::string DescribeLearningRate(const proto::RunSummary& s, bool lr_given) {
  if (lr_given) return absl::StrFormat("%g (--lr)", s.learning_rate());
  if (!IsSgdRun(s)) return absl::StrFormat("%g (the optimizer's default)", s.learning_rate());
  const int n = s.num_workers();
  if (s.mode() != "sync" && n <= 1) return absl::StrFormat("%g (one worker: sync's default)", s.learning_rate());
  const std::string rule =
      DescribeSgdDefaultRate(s.mode(), absl::StrCat(n, s.mode() == "sync" ? " workers" : ""), absl::StrCat(n - 1),
                             absl::StrFormat("momentum %g", s.momentum()));
  return absl::StrFormat("%g (%s, %s's default)", s.learning_rate(), rule, s.mode());
}

std::string DescribeStraggler(const ExperimentOptions& options) {
  if (options.straggler_delay_ms.empty()) return "none";
  std::vector<std::string> parts;
  for (const auto& [task, delay] : options.straggler_delay_ms) {
    parts.push_back(absl::StrFormat("%s slowed by %g ms per step", task, delay));
  }
  return absl::StrJoin(parts, ", ");
}

std::string CompareTable(const std::vector<RunRecord>& runs, const std::vector<double>& targets) {
  std::vector<std::vector<std::string>> rows;
  for (const RunRecord& r : runs) {
    if (!r.status.ok()) {
      std::vector<std::string> row(4 + targets.size() + 5);
      row[0] = r.label;
      row[1] = "failed";
      rows.push_back(std::move(row));
      continue;
    }
    const proto::RunSummary& s = r.summary;
    std::vector<std::string> row = {r.label, Accuracy(s.final_test_accuracy())};
    for (double target : targets) {
      row.push_back(SecondsOrNotReached(SecondsToAccuracy(r.evals, target)));
    }
    for (std::string cell : {absl::StrFormat("%.0f", r.throughput.images_per_sec),
                             absl::StrCat(s.updates_applied()), absl::StrCat(s.stale_gradients_dropped()),
                             absl::StrCat(s.late_gradients_dropped()),
                             absl::StrFormat("%.2f", s.mean_staleness()), absl::StrCat(s.p99_staleness()),
                             absl::StrFormat("%g", s.learning_rate())}) {
      row.push_back(std::move(cell));
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::string> header = {"mode", "final test acc"};
  for (double target : targets) header.push_back(absl::StrCat("time to ", Percent(target)));
  for (const char* h : {"train images/s", "updates applied", "stale dropped", "late dropped",
                        "mean staleness", "p99 staleness", "lr"}) {
    header.push_back(h);
  }
  return MarkdownTable(header, rows);
}

std::vector<std::string> CompareHighlights(const std::vector<RunRecord>& runs,
                                           const std::vector<double>& targets) {
  std::vector<std::string> out;
  if (const RunRecord* best = Best(runs, [](const RunRecord& x) {
        return std::optional<double>(x.summary.final_test_accuracy());
      })) {
    const double top = best->summary.final_test_accuracy();
    for (const RunRecord& r : runs) {
      const double acc = r.summary.final_test_accuracy();
      if (!r.status.ok() || !(top - acc >= kCollapseGap)) continue;
      out.push_back(absl::StrFormat(
          "**Finding: %s lost the model**: it ended at %.4f test accuracy, %.2f below %s (%.4f). "
          "In async and ssp the usual cause is a step too large for the staleness (lr %g, mean "
          "staleness %.1f); docs/training.md says how the defaults set it.",
          r.label, acc, top - acc, best->label, top, r.summary.learning_rate(), r.summary.mean_staleness()));
    }
    out.push_back(absl::StrFormat("Highest final test accuracy: %s (%.4f).", best->label, top));
  }
  for (double target : targets) {
    const RunRecord* r = Best(runs, [&](const RunRecord& x) -> std::optional<double> {
      const std::optional<double> s = SecondsToAccuracy(x.evals, target);
      return s ? std::optional<double>(-*s) : std::nullopt;
    });
    out.push_back(r ? absl::StrFormat("Fastest to %s: %s (%.1f s).", Percent(target), r->label,
                                      *SecondsToAccuracy(r->evals, target))
                    : absl::StrFormat("No mode reached %s test accuracy.", Percent(target)));
  }
  if (const RunRecord* r = Best(runs, [](const RunRecord& x) {
        return std::optional<double>(x.throughput.images_per_sec);
      })) {
    out.push_back(absl::StrFormat("Highest throughput: %s (%.0f images/s).", r->label,
                                  r->throughput.images_per_sec));
  }
  for (const RunRecord& r : runs) {
    if (!r.status.ok()) out.push_back(absl::StrCat(r.label, " failed: ", r.status.message()));
  }
  return out;
}

std::string EvaluationCost(const std::vector<RunRecord>& runs) {
  std::string out = "Evaluation pauses (the chief's; left out of the times and of images/s):\n\n";
  for (const RunRecord& r : runs) {
    if (!r.status.ok()) continue;
    const Throughput& t = r.throughput;
    const double added = r.evals.empty() ? 0.0 : r.evals.back().seconds - r.evals.back().train_seconds;
    absl::StrAppend(&out, absl::StrFormat(
        "- %s: %d evaluations, %.1f s in all (%.0f%% of the %.1f s of training); the other workers "
        "applied %d of the %d gradients meanwhile, which adds %.1f s to the time axis\n",
        r.label, r.evals.size(), t.pause_seconds,
        t.train_seconds > 0 ? 100 * t.pause_seconds / t.train_seconds : 0.0, t.train_seconds,
        t.gradients_during_pauses, t.gradients, added));
  }
  return out + "\n";
}

LineChart AccuracyChart(const std::vector<RunRecord>& runs) {
  LineChart c;
  c.name = "accuracy_vs_time";
  c.title = "Test accuracy against training time";
  c.x_label = "training seconds (evaluation pauses left out)";
  c.y_label = "test accuracy (10k images)";
  c.y_max = 1.0;
  for (double target : kAccuracyTargets) {
    c.y_marks.push_back({target, absl::StrFormat("%.0f%%", target * 100)});
  }
  for (const RunRecord& r : runs) {
    Series s{r.label, {}, false, 0};
    for (const EvalSample& e : r.evals) s.points.push_back({e.seconds, e.accuracy});
    c.series.push_back(std::move(s));
  }
  return c;
}

std::string HowToRead(bool with_staleness) {
  std::string out =
      "## How to read this\n\n"
      "- Times (time to 95%/97%/98%/99%, the x axis of the accuracy plots) are training seconds: the "
      "chief's, from its first step, with its evaluation pauses left out. Where other workers "
      "kept training through a pause (async; ssp for up to S steps), the gradients they applied "
      "then are charged as the time they take at the run's pause-free rate, so that no mode "
      "gains from the chief's evaluations (\"Evaluation pauses\" lists what was added). Time "
      "to X% is the first evaluation at or above X%, as fine as the evaluation interval.\n"
      "- Train images/s: images all workers trained on over the training window (first step of "
      "any worker to the last), the evaluation pauses and the steps inside them left out in every "
      "mode, so that it does not depend on how often the chief evaluates. (summary.json's "
      "train_images_per_sec leaves the pauses out only in sync and ssp, and its seconds_to_95/97/98/99 "
      "do not charge async for the others' progress during pauses.)\n";
  if (with_staleness) {
    absl::StrAppend(
        &out,
        "- Staleness of a gradient: the updates applied to its shard between the version the "
        "worker computed on and the one it was applied to (0 in sync). Mean and p99 are over "
        "applied gradients, all shards.\n"
        "- Updates applied: optimizer steps per shard. Stale dropped: gradients computed on a "
        "version already passed. Late dropped: sync with backup workers, gradients that missed "
        "their version's cut (the slowest B of each version).\n"
        "- Training loss: per-worker step on the x axis (in async every step of every worker is "
        "an update, in sync one step of all workers is one update); mean over the workers, "
        "smoothed by a moving average.\n");
  }
  return out;
}

}  // namespace pstrain

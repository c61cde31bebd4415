#include "launcher/experiments/compare.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/cluster_spec.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "launcher/experiments/report.h"
#include "launcher/reporting/plot.h"
#include "launcher/supervisor/summary_printer.h"

namespace pstrain {
namespace {

constexpr int kMaxStalenessBucket = 30;  // the histogram's last bar counts ">= 30"
constexpr int kLossPointsPerCurve = 60;  // moving-average window: steps / this

absl::StatusOr<ClusterSpec> LoadSpec(const CompareOptions& options) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(options.cluster_spec_path));
  ASSIGN_OR_RETURN(ClusterSpec spec, ClusterSpec::FromJson(text, options.cluster_spec_path));
  for (const ModeSpec& m : options.modes) {
    if (m.backup_workers >= spec.num_workers()) {
      return absl::InvalidArgumentError(absl::StrCat(m.label, ": ", m.backup_workers, " backup workers need more than ",
                                                     m.backup_workers, " workers; ", options.cluster_spec_path,
                                                     " has ", spec.num_workers()));
    }
  }
  return spec;
}

LineChart LossChart(const std::vector<RunRecord>& runs) {
  LineChart c;
  c.name = "loss_vs_step";
  c.title = "Training loss against step";
  c.x_label = "step (per worker)";
  c.y_label = "training loss (mean over workers, moving average)";
  c.y_min = 0.0;
  c.points = false;
  for (const RunRecord& r : runs) {
    const std::vector<LossSample> loss = MeanLossByStep(r.steps);
    const int window = std::max<int>(1, static_cast<int>(loss.size()) / kLossPointsPerCurve);
    Series s{absl::StrCat(r.label, window > 1 ? absl::StrCat(" (", window, "-step average)") : ""), {}, false, 0};
    for (const LossSample& l : MovingAverage(loss, window)) s.points.push_back({static_cast<double>(l.step), l.loss});
    c.series.push_back(std::move(s));
  }
  return c;
}

// Fraction of applied gradients by staleness; the last bucket gathers the tail.
BarChart StalenessChart(const std::vector<RunRecord>& runs) {
  BarChart c{"staleness_histogram", "Staleness of applied gradients", "staleness (versions)",
             "fraction of applied gradients", {}, {}, {}, 1};
  int buckets = 1;
  for (const RunRecord& r : runs) buckets = std::max(buckets, r.summary.staleness_histogram_size());
  buckets = std::min(buckets, kMaxStalenessBucket + 1);
  for (int b = 0; b < buckets; ++b) {
    c.categories.push_back(b == kMaxStalenessBucket ? absl::StrCat(b, "+") : absl::StrCat(b));
  }
  c.label_every = buckets > 16 ? 5 : 1;
  for (const RunRecord& r : runs) {
    std::vector<double> v(buckets, 0.0);
    double total = 0;
    for (int i = 0; i < r.summary.staleness_histogram_size(); ++i) {
      v[std::min(i, buckets - 1)] += r.summary.staleness_histogram(i);
      total += r.summary.staleness_histogram(i);
    }
    for (double& x : v) x = total > 0 ? x / total : 0.0;
    c.series_titles.push_back(r.label);
    c.values.push_back(std::move(v));
  }
  return c;
}

std::vector<std::string> Facts(const CompareOptions& options, const ClusterSpec& spec,
                               const std::vector<RunRecord>& runs, int64_t eval_every) {
  const ExperimentOptions& x = options.experiment;
  std::vector<std::string> facts = {
      absl::StrFormat("Cluster: %s, %d ps and %d workers, %s", options.cluster_spec_path,
                      spec.num_ps(), spec.num_workers(), DescribeNetwork(x)),
      absl::StrCat("Straggler: ", DescribeStraggler(x))};
  // The optimizer's settings are the same in every run unless they are
  // the modes' defaults (SGD's lr and momentum follow the mode).
  std::vector<std::string> rates, labelled;
  for (const RunRecord& r : runs) {
    if (!r.status.ok()) continue;
    const proto::RunSummary& s = r.summary;
    rates.push_back(absl::StrCat(DescribeRunOptimizer(s), ", learning rate ",
                                 DescribeLearningRate(s, options.lr_given)));
    labelled.push_back(absl::StrCat(r.label, ": ", rates.back()));
    if (rates.size() > 1) continue;
    facts.push_back(absl::StrFormat(
        "Training: %s on %s, %d epoch(s), %d steps per worker, batch %d per worker (global %d), "
        "seed %d",
        s.model(), s.device(), s.epochs(), s.steps_per_worker(), s.batch_size(), s.global_batch(),
        s.seed()));
  }
  if (!rates.empty()) {
    const bool same = std::all_of(rates.begin(), rates.end(),
                                  [&](const std::string& r) { return r == rates[0]; });
    facts.push_back(same ? absl::StrCat("Optimizer: ", rates[0], "; the same in every run")
                         : absl::StrCat("Optimizer, each mode's default (docs/training.md): ",
                                        absl::StrJoin(labelled, "; ")));
  }
  facts.push_back(
      x.command.empty()
          ? absl::StrFormat("Evaluation: the chief tests on the 10,000 test images every %d "
                            "steps and at each epoch end", eval_every)
          : absl::StrCat("Evaluation: what the command's chief logs (", absl::StrJoin(x.command, " "),
                         ")"));
  std::vector<std::string> modes;
  for (const ModeSpec& m : options.modes) modes.push_back(m.Describe());
  facts.push_back(absl::StrCat("Modes: ", absl::StrJoin(modes, ". "), "."));
  facts.push_back(absl::StrCat("Run directories: ", x.out_dir, "/<mode>/ (summary.json, evals.csv, "
                               "steps_worker*.csv, logs/)"));
  return facts;
}

std::string Report(const CompareOptions& options, const ClusterSpec& spec, const std::vector<RunRecord>& runs,
                   int64_t eval_every, const FigureDrawer& figures) {
  std::vector<std::string> labels;
  for (const ModeSpec& m : options.modes) labels.push_back(m.label);
  std::string out = ReportPreamble(absl::StrCat("pstrain compare: ", absl::StrJoin(labels, " vs ")),
                                   options.experiment.command_line, ReadMachineInfo(),
                                   Facts(options, spec, runs, eval_every));
  const std::vector<double> targets = ReportedTargets(options.experiment.target_accuracy);
  absl::StrAppend(&out, "## Results\n\n", CompareTable(runs, targets), "\n");
  for (const std::string& h : CompareHighlights(runs, targets)) absl::StrAppend(&out, "- ", h, "\n");
  absl::StrAppend(&out, "\n", EvaluationCost(runs));
  absl::StrAppend(&out, FiguresSection(figures.figures(), figures.notes()), HowToRead(true));
  return out;
}

}  // namespace

absl::Status RunCompare(const CompareOptions& options) {
  ASSIGN_OR_RETURN(const ClusterSpec spec, LoadSpec(options));
  const ExperimentOptions& x = options.experiment;
  RETURN_IF_ERROR(MakeDirs(x.out_dir));
  const int64_t eval_every = EvalEverySteps(x, StepsPerWorker(x, spec.num_workers()));
  std::vector<RunRecord> runs, finished;
  std::vector<std::string> failed;
  for (size_t i = 0; i < options.modes.size(); ++i) {
    const ModeSpec& m = options.modes[i];
    const ExperimentRun run = MakeRun(x, m.label, absl::StrFormat("[%d/%d] %s", i + 1, options.modes.size(), m.label),
                                      options.cluster_spec_path, absl::StrCat(x.out_dir, "/", m.DirName()),
                                      m, eval_every);
    ASSIGN_OR_RETURN(RunRecord record, RunExperiment(x, run));
    if (record.status.ok()) finished.push_back(record);
    if (!record.status.ok()) failed.push_back(m.label);
    runs.push_back(std::move(record));
  }
  FigureDrawer figures(x.out_dir + "/plots", "plots", x.gnuplot);
  figures.Add(AccuracyChart(finished), "Test accuracy against training time, all modes");
  figures.Add(LossChart(finished), "Training loss against step, all modes");
  figures.Add(StalenessChart(finished), "Staleness histogram of applied gradients, per mode");
  return FinishExperiment(x, Report(options, spec, runs, eval_every, figures), figures.notes(), failed,
                          runs.size());
}

}  // namespace pstrain

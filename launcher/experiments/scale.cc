#include "launcher/experiments/scale.h"

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/cluster_spec.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "launcher/experiments/report.h"
#include "launcher/experiments/report_scale.h"
#include "launcher/plan/plan.h"
#include "launcher/reporting/plot.h"
#include "launcher/supervisor/summary_printer.h"

namespace pstrain {
namespace {

constexpr int kFirstPlaceholderPort = 20000;

// A chart against the worker count, with a vertical line at the machine's
// core count when the axis spans it.
LineChart WorkerChart(const ScaleOptions& options, const std::string& name, const std::string& title,
                      const std::string& y_label) {
  LineChart c;
  c.name = name;
  c.title = title;
  c.x_label = "workers";
  c.y_label = y_label;
  c.y_min = 0.0;
  c.x_tics.assign(options.workers.begin(), options.workers.end());
  c.x_min = options.workers.front() - 0.5;
  c.x_max = options.workers.back() + 0.5;
  const int cores = ReadMachineInfo().cores;
  if (cores >= options.workers.front() && cores <= options.workers.back()) {
    c.x_marks.push_back({cores, absl::StrCat(cores, " cores (this machine)")});
  }
  return c;
}

// Images/s against workers, one line per ps count, each with its ideal
// (linear from its fewest workers) dashed.
LineChart ThroughputChart(const ScaleOptions& options, const std::vector<ScaleCell>& cells) {
  LineChart c = WorkerChart(options, "throughput", "Training throughput against workers", "train images/s");
  const std::vector<Scaling> scaling = ComputeScaling(cells);
  for (size_t p = 0; p < options.ps.size(); ++p) {
    Series measured{absl::StrCat(options.ps[p], " ps"), {}, false, static_cast<int>(p) + 1};
    Series ideal{absl::StrCat(options.ps[p], " ps, linear"), {}, true, static_cast<int>(p) + 1};
    for (size_t i = 0; i < cells.size(); ++i) {
      if (cells[i].ps != options.ps[p] || !scaling[i].speedup) continue;
      const double ips = cells[i].record.throughput.images_per_sec;
      measured.points.push_back({static_cast<double>(cells[i].workers), ips});
      ideal.points.push_back({static_cast<double>(cells[i].workers), ips / *scaling[i].efficiency});
    }
    c.series.push_back(std::move(measured));
    c.series.push_back(std::move(ideal));
  }
  return c;
}

LineChart TimeToAccuracyChart(const ScaleOptions& options, const std::vector<ScaleCell>& cells) {
  const std::string pct = Percent(options.experiment.target_accuracy);
  LineChart c = WorkerChart(options, "time_to_accuracy",
                            absl::StrCat("Time to ", pct, " test accuracy against workers"),
                            absl::StrCat("training seconds to ", pct));
  for (size_t p = 0; p < options.ps.size(); ++p) {
    Series s{absl::StrCat(options.ps[p], " ps"), {}, false, static_cast<int>(p) + 1};
    for (const ScaleCell& cell : cells) {
      if (cell.ps != options.ps[p] || !cell.record.status.ok()) continue;
      if (auto t = SecondsToAccuracy(cell.record.evals, options.experiment.target_accuracy)) {
        s.points.push_back({static_cast<double>(cell.workers), *t});
      }
    }
    c.series.push_back(std::move(s));
  }
  return c;
}

std::vector<std::string> Facts(const ScaleOptions& options, const std::vector<ScaleCell>& cells) {
  const ExperimentOptions& x = options.experiment;
  std::vector<std::string> facts = {
      absl::StrCat("Mode: ", options.mode.Describe()),
      absl::StrFormat("Matrix: %s ps x %s workers, %s", absl::StrJoin(options.ps, ","),
                      absl::StrJoin(options.workers, ","), DescribeNetwork(x)),
      absl::StrCat("Straggler: ", DescribeStraggler(x),
                   x.straggler_delay_ms.empty() ? "" : " (in the cells that have that worker)")};
  // The cell with the most workers: with one worker, async's default
  // momentum is sync's.
  for (auto c = cells.rbegin(); c != cells.rend(); ++c) {
    if (!c->record.status.ok()) continue;
    const proto::RunSummary& s = c->record.summary;
    const bool mode_default = !options.lr_given && IsSgdRun(s) && s.mode() != "sync";
    facts.push_back(absl::StrFormat(
        "Training: %s on %s, %d epoch(s), batch %d per worker, seed %d, %s%s; learning rate %s",
        s.model(), s.device(), s.epochs(), s.batch_size(), s.seed(), DescribeRunOptimizer(s),
        mode_default && s.num_workers() > 1 ? " (0.5 with one worker)" : "",
        options.lr_given ? "as --lr (column lr)"
        : !IsSgdRun(s)   ? "the optimizer's default (column lr)"
                         : absl::StrCat(DescribeSgdDefaultRate(s.mode(), "workers", "(workers - 1)", "momentum"),
                                        ", ", s.mode(), "'s default (column lr)")));
    break;
  }
  std::map<int, int64_t> every;  // by worker count
  for (const ScaleCell& c : cells) every[c.workers] = c.record.eval_every_steps;
  std::vector<std::string> evals;
  for (const auto& [workers, steps] : every) evals.push_back(absl::StrCat(steps, " (", workers, "w)"));
  facts.push_back(
      x.command.empty()
          ? absl::StrFormat("Evaluation: the chief tests on the 10,000 test images every %s steps "
                            "and at each epoch end",
                            absl::StrJoin(evals, ", "))
          : absl::StrCat("Evaluation: what the command's chief logs (", absl::StrJoin(x.command, " "),
                         ")"));
  facts.push_back(absl::StrCat("Run directories: ", x.out_dir, "/ps<P>_w<W>/; specs: ", x.out_dir, "/specs/"));
  return facts;
}

// What the predicted column says and rests on.
struct Predictions {
  std::string source;              // the calibration, in words
  std::vector<std::string> notes;  // the planner's, and cells it could not predict
};

// Predicts each finished cell from --calibrate runs or the first cell.
Predictions PredictCells(const ScaleOptions& options, std::vector<ScaleCell>* cells) {
  Predictions p;
  const int cores = std::max(1, ReadMachineInfo().cores);
  std::vector<std::string> dirs = options.calibrate;
  if (dirs.empty() && !cells->empty() && cells->front().record.status.ok()) {
    const ScaleCell& first = cells->front();
    dirs.push_back(first.record.run_dir);
    p.source = absl::StrFormat("the matrix's first cell (%d ps, %d worker%s), whose own row is then no "
                               "prediction but the model's fit to it",
                               first.ps, first.workers, first.workers == 1 ? "" : "s");
  } else {
    p.source = absl::StrCat("--calibrate: ", absl::StrJoin(dirs, ", "));
  }
  std::vector<CalibrationRun> calibration;
  for (const std::string& d : dirs) {
    auto run = ReadCalibrationRun(d, cores);
    if (!run.ok()) {
      p.notes.push_back(absl::StrCat("No predictions: ", run.status().message()));
      return p;
    }
    calibration.push_back(*std::move(run));
  }
  for (ScaleCell& c : *cells) {
    if (!c.record.status.ok()) continue;
    auto run = ReadCalibrationRun(c.record.run_dir, cores);
    auto rows = run.ok() ? CheckRuns(calibration, {*run}, kDefaultPsShare, &p.notes) : run.status();
    if (rows.ok()) {
      c.prediction = rows->front();
    } else {
      p.notes.push_back(absl::StrCat(c.record.label, ": no prediction: ", rows.status().message()));
    }
  }
  return p;
}

std::string PredictionSection(const std::vector<ScaleCell>& cells, const Predictions& p) {
  std::string out = absl::StrCat(
      "## Predicted against measured\n\n"
      "The predicted images/s are `pstrain plan`'s (docs/planning.md), calibrated from ",
      p.source, ". Measured here: images/s once steady (each worker past the first tenth of its steps, "
      "evaluation pauses left out, summed over the workers), which the whole run's figure above also counts "
      "the warm-up in.\n\n",
      PredictionTable(cells));
  for (const std::string& n : p.notes) absl::StrAppend(&out, "\n- ", n);
  return absl::StrCat(out, "\n");
}

std::string Report(const ScaleOptions& options, const std::vector<ScaleCell>& cells,
                   const FigureDrawer& figures, const Predictions& predictions) {
  const MachineInfo machine = ReadMachineInfo();
  std::string out = ReportPreamble(absl::StrCat("pstrain scale: ", options.mode.label),
                                   options.experiment.command_line, machine, Facts(options, cells));
  const std::vector<double> targets = ReportedTargets(options.experiment.target_accuracy);
  absl::StrAppend(&out, "## Results\n\n", ScaleTable(cells, machine.cores, targets), "\n");
  for (const std::string& s : ScaleSummary(cells, machine)) absl::StrAppend(&out, "- ", s, "\n");
  absl::StrAppend(&out, "\n", PredictionSection(cells, predictions));
  std::vector<RunRecord> runs;
  for (const ScaleCell& c : cells) runs.push_back(c.record);
  absl::StrAppend(&out, "\n", EvaluationCost(runs), FiguresSection(figures.figures(), figures.notes()), HowToRead(false),
                  "- Speedup: images/s over those of the fewest workers with the same ps count; "
                  "efficiency = speedup / (workers / that count). The dashed lines are linear "
                  "scaling.\n");
  return out;
}

// Throughput, time to accuracy (when a run reached it), every accuracy curve.
FigureDrawer DrawFigures(const ScaleOptions& options, const std::vector<ScaleCell>& cells) {
  std::vector<RunRecord> finished;
  for (const ScaleCell& c : cells) {
    if (c.record.status.ok()) finished.push_back(c.record);
  }
  FigureDrawer figures(options.experiment.out_dir + "/plots", "plots", options.experiment.gnuplot);
  figures.Add(ThroughputChart(options, cells), "Training throughput against the worker count");
  const LineChart time_chart = TimeToAccuracyChart(options, cells);
  if (HasData(time_chart)) {
    figures.Add(time_chart, absl::StrCat("Time to ", Percent(options.experiment.target_accuracy),
                                         " test accuracy against the worker count"));
  } else {
    figures.AddNote(absl::StrCat("No time-to-accuracy plot: no run reached ",
                                 Percent(options.experiment.target_accuracy),
                                 " test accuracy (--target_accuracy; train longer with --epochs)."));
  }
  figures.Add(AccuracyChart(finished), "Test accuracy against training time, every run");
  return figures;
}

absl::StatusOr<ScaleCell> RunCell(const ScaleOptions& options, int ps, int workers, int index, int total) {
  const ExperimentOptions& x = options.experiment;
  const std::string name = absl::StrFormat("ps%d_w%d", ps, workers);
  const std::string spec_path = absl::StrCat(x.out_dir, "/specs/", name, ".json");
  RETURN_IF_ERROR(WriteFileAtomic(spec_path, LocalSpecJson(ps, workers)));
  const std::string label = absl::StrFormat("%d ps, %d worker%s", ps, workers, workers == 1 ? "" : "s");
  ExperimentRun run = MakeRun(x, label, absl::StrFormat("[%d/%d] %s", index, total, label), spec_path,
                              absl::StrCat(x.out_dir, "/", name), options.mode,
                              EvalEverySteps(x, StepsPerWorker(x, workers)));
  // The generated specs have workers only; a straggler the cell does not
  // have (worker:1 of a 1-worker cell) is left out.
  run.straggler_delay_ms.clear();
  for (const auto& [task, delay] : x.straggler_delay_ms) {
    absl::string_view rank_text = task;
    int rank = -1;
    if (absl::ConsumePrefix(&rank_text, "worker:") && absl::SimpleAtoi(rank_text, &rank) && rank < workers) {
      run.straggler_delay_ms[task] = delay;
    }
  }
  ASSIGN_OR_RETURN(RunRecord record, RunExperiment(x, run));
  return ScaleCell{ps, workers, std::move(record), std::nullopt};
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCountList(absl::string_view text, absl::string_view flag, int max) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int n = 0;
    if (!absl::SimpleAtoi(item, &n) || n < 1 || n > max) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": \"", item, "\" (expected counts in 1..", max, ")"));
    }
    out.push_back(n);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": empty list"));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string LocalSpecJson(int ps, int workers) {
  return ClusterSpec::Local(ps, workers, kFirstPlaceholderPort).ToJson();
}

absl::Status RunScale(const ScaleOptions& options) {
  const ExperimentOptions& x = options.experiment;
  if (options.mode.backup_workers >= options.workers.front()) {
    return absl::InvalidArgumentError(absl::StrCat(options.mode.label, " needs more than ",
                                                   options.mode.backup_workers, " workers in every cell"));
  }
  RETURN_IF_ERROR(MakeDirs(x.out_dir + "/specs"));
  std::vector<ScaleCell> cells;
  std::vector<std::string> failed;
  const int total = static_cast<int>(options.ps.size() * options.workers.size());
  for (int ps : options.ps) {
    for (int workers : options.workers) {
      ASSIGN_OR_RETURN(ScaleCell cell, RunCell(options, ps, workers, static_cast<int>(cells.size()) + 1, total));
      if (!cell.record.status.ok()) failed.push_back(cell.record.label);
      cells.push_back(std::move(cell));
    }
  }
  const Predictions predictions = PredictCells(options, &cells);
  const FigureDrawer figures = DrawFigures(options, cells);
  return FinishExperiment(x, Report(options, cells, figures, predictions), figures.notes(), failed, cells.size());
}

}  // namespace pstrain

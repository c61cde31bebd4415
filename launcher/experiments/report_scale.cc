#include "launcher/experiments/report_scale.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "launcher/experiments/report.h"

namespace pstrain {
namespace {

std::optional<double> ImagesPerSec(const ScaleCell& c) {
  if (!c.record.status.ok() || !(c.record.throughput.images_per_sec > 0)) return std::nullopt;
  return c.record.throughput.images_per_sec;
}

std::string Times(const std::optional<double>& v, const absl::FormatSpec<double>& format) {
  return v ? absl::StrFormat(format, *v) : std::string("-");
}

}  // namespace

std::vector<Scaling> ComputeScaling(const std::vector<ScaleCell>& cells) {
  std::map<int, const ScaleCell*> baseline;  // by ps: the cell with the fewest workers
  for (const ScaleCell& c : cells) {
    auto [it, inserted] = baseline.emplace(c.ps, &c);
    if (!inserted && c.workers < it->second->workers) it->second = &c;
  }
  std::vector<Scaling> out;
  for (const ScaleCell& c : cells) {
    const ScaleCell& base = *baseline[c.ps];
    Scaling s;
    s.baseline_workers = base.workers;
    const std::optional<double> mine = ImagesPerSec(c), theirs = ImagesPerSec(base);
    if (mine && theirs) {
      s.speedup = *mine / *theirs;
      s.efficiency = *s.speedup * base.workers / c.workers;
    }
    out.push_back(s);
  }
  return out;
}

std::vector<std::optional<double>> AccuracyLost(const std::vector<ScaleCell>& cells) {
  const std::vector<Scaling> scaling = ComputeScaling(cells);
  std::vector<std::optional<double>> out(cells.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    const ScaleCell& c = cells[i];
    const auto base = std::find_if(cells.begin(), cells.end(), [&](const ScaleCell& b) {
      return b.ps == c.ps && b.workers == scaling[i].baseline_workers;
    });
    if (!c.record.status.ok() || base == cells.end() || !base->record.status.ok()) continue;
    const double lost = base->record.summary.final_test_accuracy() - c.record.summary.final_test_accuracy();
    if (lost >= kCollapseGap) out[i] = lost;
  }
  return out;
}

std::string CoreNote(int ps, int workers, int cores) {
  if (cores <= 0) return "";
  if (workers > cores) return absl::StrFormat("%d workers > %d cores", workers, cores);
  if (ps + workers > cores) {
    return absl::StrFormat("%d ps + %d worker%s > %d cores", ps, workers, workers == 1 ? "" : "s", cores);
  }
  return "";
}

std::string ScaleTable(const std::vector<ScaleCell>& cells, int cores, const std::vector<double>& targets) {
  const std::vector<Scaling> scaling = ComputeScaling(cells);
  const std::vector<std::optional<double>> lost = AccuracyLost(cells);
  std::vector<std::vector<std::string>> rows;
  bool all_from_one = true;
  for (size_t i = 0; i < cells.size(); ++i) {
    const ScaleCell& c = cells[i];
    const proto::RunSummary& s = c.record.summary;
    all_from_one = all_from_one && scaling[i].baseline_workers == 1;
    std::string note = CoreNote(c.ps, c.workers, cores);
    if (!c.record.status.ok()) {
      std::vector<std::string> row(9 + targets.size());  // as many as the header
      row[0] = absl::StrCat(c.ps);
      row[1] = absl::StrCat(c.workers);
      row[3] = "failed";
      row.back() = note.empty() ? "see below" : note;
      rows.push_back(std::move(row));
      continue;
    }
    if (scaling[i].baseline_workers != 1) absl::StrAppend(&note, note.empty() ? "" : "; ", "speedup over ",
                                                          scaling[i].baseline_workers, " workers");
    if (lost[i]) {
      note = absl::StrCat(absl::StrFormat("**model lost: %.2f below %d worker%s**", *lost[i],
                                          scaling[i].baseline_workers,
                                          scaling[i].baseline_workers == 1 ? "" : "s"),
                          note.empty() ? "" : "; ", note);
    }
    std::vector<std::string> row = {
        absl::StrCat(c.ps), absl::StrCat(c.workers), absl::StrFormat("%g", s.learning_rate()),
        absl::StrFormat("%.0f", c.record.throughput.images_per_sec),
        c.prediction ? absl::StrFormat("%.0f", c.prediction->predicted) : "-",
        Times(scaling[i].speedup, "%.2fx"), Times(scaling[i].efficiency, "%.2f")};
    for (double target : targets) {
      row.push_back(SecondsOrNotReached(SecondsToAccuracy(c.record.evals, target)));
    }
    row.push_back(absl::StrFormat("%.4f", s.final_test_accuracy()));
    row.push_back(note);
    rows.push_back(std::move(row));
  }
  std::vector<std::string> header = {"ps", "workers", "lr", "train images/s", "predicted images/s",
                                     all_from_one ? "speedup over 1 worker" : "speedup",
                                     "efficiency"};
  for (double target : targets) header.push_back(absl::StrCat("time to ", Percent(target)));
  header.push_back("final test acc");
  header.push_back("note");
  return MarkdownTable(header, rows);
}

std::string PredictionTable(const std::vector<ScaleCell>& cells) {
  std::vector<std::vector<std::string>> rows;
  for (const ScaleCell& c : cells) {
    if (!c.prediction) continue;
    const CheckRow& p = *c.prediction;
    rows.push_back({absl::StrCat(c.ps), absl::StrCat(c.workers), absl::StrFormat("%.0f", p.measured),
                    absl::StrFormat("%.0f", p.predicted), absl::StrFormat("%+.1f%%", 100 * p.error),
                    absl::StrCat(p.bound, p.calibration ? " (calibration run)" : "")});
  }
  if (rows.empty()) return "";
  return MarkdownTable({"ps", "workers", "measured images/s (steady)", "predicted images/s", "error", "bound"},
                       rows);
}

std::vector<std::string> ScaleSummary(const std::vector<ScaleCell>& cells, const MachineInfo& machine) {
  std::vector<std::string> out;
  const std::vector<std::optional<double>> lost = AccuracyLost(cells);
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!lost[i]) continue;
    const proto::RunSummary& s = cells[i].record.summary;
    out.push_back(absl::StrFormat(
        "**Finding: with %d ps, %d workers lost the model**: final test accuracy %.4f, %.2f below the "
        "fewest workers' with %d ps (lr %g, mean staleness %.1f). More workers trained faster but not "
        "the same model; in async and ssp the usual cause is a step too large for the staleness "
        "(docs/training.md says how the defaults set it).",
        cells[i].ps, cells[i].workers, s.final_test_accuracy(), *lost[i], cells[i].ps, s.learning_rate(),
        s.mean_staleness()));
  }
  std::vector<std::string> crowded;
  for (const ScaleCell& c : cells) {
    if (c.workers > machine.cores) crowded.push_back(absl::StrFormat("%d ps/%d workers", c.ps, c.workers));
  }
  if (!crowded.empty()) {
    out.push_back(absl::StrFormat(
        "This machine has %s. In %s the workers outnumber the cores: they take turns on the CPU "
        "(with the ps processes too), so those rows measure an oversubscribed machine, not how "
        "training scales with more hardware.",
        DescribeMachine(machine), absl::StrJoin(crowded, ", ")));
  } else {
    out.push_back(absl::StrFormat("This machine has %s; no run has more workers than cores.",
                                  DescribeMachine(machine)));
  }
  const std::vector<Scaling> scaling = ComputeScaling(cells);
  std::map<int, size_t> widest;  // by ps: the finished cell with the most workers
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!scaling[i].speedup) continue;
    auto [it, inserted] = widest.emplace(cells[i].ps, i);
    if (!inserted && cells[i].workers > cells[it->second].workers) it->second = i;
  }
  for (const auto& [ps, i] : widest) {
    const ScaleCell& c = cells[i];
    out.push_back(absl::StrFormat(
        "With %d ps, %d workers train %.0f images/s: %.2fx the throughput of %d worker%s, "
        "scaling efficiency %.2f.",
        ps, c.workers, c.record.throughput.images_per_sec, *scaling[i].speedup,
        scaling[i].baseline_workers, scaling[i].baseline_workers == 1 ? "" : "s", *scaling[i].efficiency));
  }
  for (const ScaleCell& c : cells) {
    if (!c.record.status.ok()) out.push_back(absl::StrCat(c.record.label, " failed: ", c.record.status.message()));
  }
  return out;
}

}  // namespace pstrain

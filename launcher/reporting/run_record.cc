#include "launcher/reporting/run_record.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/csv.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// The cells of `columns` in `path`, as numbers; the `optional` columns
// after them, each `missing` in every row of a file without it. DataLoss
// naming the file for a missing column or a cell that is not a number
// ("nan" is one).
absl::StatusOr<std::vector<std::vector<double>>> ReadColumns(const std::string& path,
                                                             const std::vector<std::string>& columns,
                                                             const std::vector<std::string>& optional = {},
                                                             double missing = 0) {
  ASSIGN_OR_RETURN(const CsvTable table, ReadCsv(path));
  std::vector<int> index;
  for (const std::string& name : columns) {
    index.push_back(table.Column(name));
    if (index.back() < 0) return absl::DataLossError(absl::StrCat(path, ": no column ", name));
  }
  for (const std::string& name : optional) index.push_back(table.Column(name));
  std::vector<std::vector<double>> rows;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    std::vector<double> row(index.size(), missing);
    for (size_t c = 0; c < index.size(); ++c) {
      if (index[c] < 0) continue;
      const std::string& cell = table.rows[r][index[c]];
      if (!absl::SimpleAtod(cell, &row[c])) {
        const std::string& name = c < columns.size() ? columns[c] : optional[c - columns.size()];
        return absl::DataLossError(absl::StrCat(path, ": row ", r + 2, ": ", name, " is \"", cell, "\""));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::Status ReadEvals(const std::string& path, std::vector<EvalSample>* out) {
  ASSIGN_OR_RETURN(const auto rows, ReadColumns(path, {"step", "train_seconds", "test_accuracy", "test_loss"}));
  for (const std::vector<double>& r : rows) out->push_back({static_cast<int64_t>(r[0]), r[1], r[2], r[3], r[1]});
  return absl::OkStatus();
}

absl::Status ReadSteps(const std::string& path, std::vector<StepRow>* out) {
  // Runs of older versions lack the later columns: wait_ms and ahead_ms
  // read as -1 there.
  ASSIGN_OR_RETURN(const auto rows,
                   ReadColumns(path, {"step", "unix_time", "loss", "examples", "compute_ms", "comm_ms"},
                               {"wait_ms", "ahead_ms"}, /*missing=*/-1));
  for (const std::vector<double>& r : rows) {
    out->push_back({static_cast<int64_t>(r[0]), r[1], r[2], static_cast<int64_t>(r[3]), r[4], r[5], r[6],
                    r[7]});
  }
  return absl::OkStatus();
}

struct Pause {
  double begin = 0;
  double end = 0;
  size_t eval = 0;  // index of its evaluation
};

// The chief's evaluation pauses: from the end of its step before an
// evaluation to the start of its next step.
std::vector<Pause> Pauses(const std::vector<StepRow>& chief, const std::vector<EvalSample>& evals) {
  std::vector<Pause> out;
  for (size_t i = 0; i < evals.size(); ++i) {
    const int64_t step = evals[i].step;
    if (step < 1 || step >= static_cast<int64_t>(chief.size())) continue;  // no step after it
    const double begin = chief[step - 1].end_unix_s, end = chief[step].start_unix_s();
    if (end > begin) out.push_back({begin, end, i});
  }
  return out;
}

// Entirely inside: a sync worker's step that straddles a pause (it waits
// out the pause for the chief's gradient) is not one of them.
bool Inside(const StepRow& row, const Pause& p) {
  return row.start_unix_s() >= p.begin && row.end_unix_s <= p.end;
}

// Steps of the workers other than the chief inside `p`.
int64_t OthersInside(const std::vector<std::vector<StepRow>>& steps, const Pause& p) {
  int64_t n = 0;
  for (size_t rank = 1; rank < steps.size(); ++rank) {
    n += std::count_if(steps[rank].begin(), steps[rank].end(), [&](const StepRow& r) { return Inside(r, p); });
  }
  return n;
}

}  // namespace

absl::Status ReadRunDir(const std::string& run_dir, RunRecord* record) {
  record->run_dir = run_dir;
  const std::string summary_path = run_dir + "/summary.json";
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(summary_path));
  RETURN_IF_ERROR(ParseJsonMessage(text, summary_path, &record->summary, /*ignore_unknown=*/true));
  RETURN_IF_ERROR(ReadEvals(run_dir + "/evals.csv", &record->evals));
  record->steps.assign(record->summary.num_workers(), {});
  for (size_t r = 0; r < record->steps.size(); ++r) {
    RETURN_IF_ERROR(ReadSteps(absl::StrCat(run_dir, "/steps_worker", r, ".csv"), &record->steps[r]));
  }
  record->throughput = MeasureThroughput(record->steps, record->evals);
  AdjustForPauses(record->steps, record->throughput, &record->evals);
  return absl::OkStatus();
}

std::vector<double> ReportedTargets(double target) {
  std::vector<double> out(std::begin(kAccuracyTargets), std::end(kAccuracyTargets));
  if (std::find(out.begin(), out.end(), target) == out.end()) {
    out.insert(std::upper_bound(out.begin(), out.end(), target), target);
  }
  return out;
}

std::optional<double> SecondsToAccuracy(const std::vector<EvalSample>& evals, double target) {
  for (const EvalSample& e : evals) {
    if (e.accuracy >= target) return e.seconds;
  }
  return std::nullopt;
}

std::vector<LossSample> MeanLossByStep(const std::vector<std::vector<StepRow>>& steps) {
  std::map<int64_t, std::pair<double, int>> by_step;
  for (const std::vector<StepRow>& rows : steps) {
    for (const StepRow& s : rows) {
      if (!std::isfinite(s.loss)) continue;
      by_step[s.step].first += s.loss;
      ++by_step[s.step].second;
    }
  }
  std::vector<LossSample> out;
  for (const auto& [step, sum_count] : by_step) out.push_back({step, sum_count.first / sum_count.second});
  return out;
}

std::vector<LossSample> MovingAverage(const std::vector<LossSample>& loss, int window) {
  std::vector<LossSample> out;
  double sum = 0;
  for (size_t i = 0; i < loss.size(); ++i) {
    sum += loss[i].loss;
    if (i >= static_cast<size_t>(window)) sum -= loss[i - window].loss;
    const size_t n = std::min(i + 1, static_cast<size_t>(window));
    out.push_back({loss[i].step, sum / static_cast<double>(n)});
  }
  return out;
}

Throughput MeasureThroughput(const std::vector<std::vector<StepRow>>& steps,
                             const std::vector<EvalSample>& evals) {
  Throughput t;
  if (steps.empty()) return t;
  const std::vector<Pause> pauses = Pauses(steps[0], evals);
  for (const Pause& p : pauses) {
    t.pause_seconds += p.end - p.begin;
    t.gradients_during_pauses += OthersInside(steps, p);
  }
  double first = std::numeric_limits<double>::max(), last = 0, images = 0;
  for (size_t rank = 0; rank < steps.size(); ++rank) {
    for (const StepRow& row : steps[rank]) {
      first = std::min(first, row.start_unix_s());
      last = std::max(last, row.end_unix_s);
      ++t.gradients;
      const bool during = rank != 0 && std::any_of(pauses.begin(), pauses.end(),
                                                   [&](const Pause& p) { return Inside(row, p); });
      if (!during) images += static_cast<double>(row.examples);
    }
  }
  if (last <= first) return t;
  t.train_seconds = std::max(1e-6, last - first - t.pause_seconds);
  t.images_per_sec = images / t.train_seconds;
  t.gradients_per_sec = static_cast<double>(t.gradients - t.gradients_during_pauses) / t.train_seconds;
  return t;
}

double SteadyImagesPerSecond(const RunRecord& record) {
  const std::vector<std::vector<StepRow>>& steps = record.steps;
  const std::vector<Pause> pauses = steps.empty() ? std::vector<Pause>() : Pauses(steps[0], record.evals);
  double total = 0;
  for (const std::vector<StepRow>& rows : steps) {
    if (rows.size() < 3) return record.throughput.images_per_sec;
    const double from = rows[rows.size() / 10].end_unix_s, to = rows.back().end_unix_s;
    double seconds = to - from, images = 0;
    for (const Pause& p : pauses) seconds -= std::max(0.0, std::min(p.end, to) - std::max(p.begin, from));
    for (const StepRow& row : rows) {
      const bool during = std::any_of(pauses.begin(), pauses.end(), [&](const Pause& p) { return Inside(row, p); });
      if (row.end_unix_s > from && !during) images += static_cast<double>(row.examples);
    }
    if (!(seconds > 0) || images <= 0) return record.throughput.images_per_sec;
    total += images / seconds;
  }
  return total > 0 ? total : record.throughput.images_per_sec;
}

void AdjustForPauses(const std::vector<std::vector<StepRow>>& steps, const Throughput& throughput,
                     std::vector<EvalSample>* evals) {
  for (EvalSample& e : *evals) e.seconds = e.train_seconds;
  if (steps.empty() || !(throughput.gradients_per_sec > 0)) return;
  // A pause's gradients reach the evaluations after it, not its own (which
  // tested the parameters of the pause's start).
  std::vector<int64_t> inside(evals->size(), 0);
  for (const Pause& p : Pauses(steps[0], *evals)) inside[p.eval] = OthersInside(steps, p);
  int64_t before = 0;
  for (size_t i = 0; i < evals->size(); ++i) {
    (*evals)[i].seconds += static_cast<double>(before) / throughput.gradients_per_sec;
    before += inside[i];
  }
}

}  // namespace pstrain

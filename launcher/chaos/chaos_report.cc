#include "launcher/chaos/chaos_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "google/protobuf/struct.pb.h"
#include "launcher/experiments/report.h"

namespace pstrain {
namespace {

using google::protobuf::Value;

bool IsHang(const absl::Status& s) { return s.code() == absl::StatusCode::kDeadlineExceeded; }

std::string Signed(double x) { return absl::StrFormat("%+.4f", x); }

std::string OrDash(const std::optional<double>& x) { return x ? Signed(*x) : std::string("-"); }

// The sent record of a planned fault, if it was sent.
const FaultRecord* SentOf(const ChaosRunRecord& run, const Fault& planned) {
  for (const FaultRecord& r : run.sent) {
    if (r.fault.at_s == planned.at_s && r.fault.at_progress == planned.at_progress &&
        r.fault.task == planned.task && r.fault.kind == planned.kind) {
      return &r;
    }
  }
  return nullptr;
}

std::vector<std::string> Row(const ChaosRunRecord& run, double baseline_accuracy) {
  const bool ok = run.status.ok();
  return {run.name,
          DescribeRunFaults(run),
          DescribeRunOutcome(run.status),
          absl::StrCat(run.restarts),
          ok ? absl::StrCat(run.updates_lost) : "-",
          ok ? absl::StrCat(run.recoveries) : "-",
          ok ? absl::StrFormat("%.4f", run.accuracy) : "-",
          ok ? Signed(run.accuracy - baseline_accuracy) : "-",
          absl::StrFormat("%.1f s", run.wall_s)};
}

Value Number(double x) {
  Value v;
  v.set_number_value(x);
  return v;
}

Value Text(const std::string& s) {
  Value v;
  v.set_string_value(s);
  return v;
}

Value NumberOrNull(const std::optional<double>& x) {
  if (x) return Number(*x);
  Value v;
  v.set_null_value(google::protobuf::NULL_VALUE);
  return v;
}

Value FaultJson(const Fault& f, const FaultRecord* sent) {
  Value v;
  auto& m = *v.mutable_struct_value()->mutable_fields();
  m["kind"] = Text(FaultKindName(f.kind));
  m["task"] = Text(f.task.ToString());
  if (f.at_progress >= 0) {
    m["planned_at_progress"] = Number(f.at_progress);
  } else {
    m["planned_at_s"] = Number(f.at_s);
  }
  if (f.kind == FaultKind::kStop) m["stop_s"] = Number(f.stop_s);
  if (f.kind == FaultKind::kLose) m["away_s"] = Number(f.stop_s);
  m["sent"] = Value();
  m["sent"].set_bool_value(sent != nullptr);
  if (sent != nullptr) m["sent_at_s"] = Number(sent->sent_s);
  if (sent != nullptr && f.at_progress >= 0) m["sent_at_progress"] = Number(sent->sent_progress);
  if (sent != nullptr && f.kind == FaultKind::kStop) m["resumed_at_s"] = Number(sent->resumed_s);
  return v;
}

Value RunJson(const ChaosRunRecord& run, double baseline_accuracy) {
  Value v;
  auto& m = *v.mutable_struct_value()->mutable_fields();
  m["name"] = Text(run.name);
  m["run_dir"] = Text(run.run_dir);
  Value& faults = m["faults"];
  faults.mutable_list_value();
  for (const Fault& f : run.planned) *faults.mutable_list_value()->add_values() = FaultJson(f, SentOf(run, f));
  m["outcome"] = Text(run.status.ok() ? "ok" : IsHang(run.status) ? "hang" : "failed");
  m["error"] = Text(std::string(run.status.message()));
  m["restarts"] = Number(run.restarts);
  m["wall_s"] = Number(run.wall_s);
  const bool ok = run.status.ok();
  m["updates_lost"] = NumberOrNull(ok ? std::optional<double>(run.updates_lost) : std::nullopt);
  m["recoveries"] = NumberOrNull(ok ? std::optional<double>(run.recoveries) : std::nullopt);
  m["final_test_accuracy"] = NumberOrNull(ok ? std::optional<double>(run.accuracy) : std::nullopt);
  m["accuracy_minus_baseline"] =
      NumberOrNull(ok ? std::optional<double>(run.accuracy - baseline_accuracy) : std::nullopt);
  return v;
}

Value TotalsJson(const ChaosTotals& t) {
  Value v;
  auto& m = *v.mutable_struct_value()->mutable_fields();
  m["runs"] = Number(t.runs);
  m["hangs"] = Number(t.hangs);
  m["failed_runs"] = Number(t.failed);
  m["restarts"] = Number(t.restarts);
  m["updates_lost"] = Number(t.updates_lost);
  m["accuracy_diff_min"] = NumberOrNull(t.accuracy_diff_min);
  m["accuracy_diff_median"] = NumberOrNull(t.accuracy_diff_median);
  m["accuracy_diff_max"] = NumberOrNull(t.accuracy_diff_max);
  m["baseline_accuracy"] = Number(t.baseline_accuracy);
  return v;
}

}  // namespace

ChaosTotals SumUpChaos(const ChaosRunRecord& baseline, const std::vector<ChaosRunRecord>& runs) {
  ChaosTotals t;
  t.baseline_accuracy = baseline.accuracy;
  std::vector<double> diffs;
  for (const ChaosRunRecord& r : runs) {
    ++t.runs;
    t.restarts += r.restarts;
    if (IsHang(r.status)) ++t.hangs;
    if (!r.status.ok() && !IsHang(r.status)) ++t.failed;
    if (!r.status.ok()) continue;
    t.updates_lost += r.updates_lost;
    diffs.push_back(r.accuracy - baseline.accuracy);
  }
  if (diffs.empty()) return t;
  std::sort(diffs.begin(), diffs.end());
  const size_t n = diffs.size();
  t.accuracy_diff_min = diffs.front();
  t.accuracy_diff_max = diffs.back();
  t.accuracy_diff_median = n % 2 == 1 ? diffs[n / 2] : (diffs[n / 2 - 1] + diffs[n / 2]) / 2;
  return t;
}

std::string DescribeRunOutcome(const absl::Status& status) {
  if (status.ok()) return "ok";
  return absl::StrCat(IsHang(status) ? "hang: " : "failed: ", status.message());
}

std::string DescribeRunFaults(const ChaosRunRecord& run) {
  if (run.planned.empty()) return "none";
  std::vector<std::string> parts;
  for (const Fault& f : run.planned) {
    const FaultRecord* sent = SentOf(run, f);
    if (sent == nullptr) {
      parts.push_back(absl::StrCat(DescribeFault(f), " (not sent)"));
      continue;
    }
    Fault actual = f;
    if (f.at_progress < 0) {
      actual.at_s = sent->sent_s;
      parts.push_back(DescribeFault(actual));
      continue;
    }
    actual.at_progress = sent->sent_progress;
    actual.at_s = 0;
    parts.push_back(absl::StrFormat("%s, sent at %.1f s", DescribeFault(actual), sent->sent_s));
  }
  return absl::StrJoin(parts, "; ");
}

std::string ChaosTotalsLine(const ChaosTotals& t) {
  std::string line = absl::StrFormat("chaos: %d runs, %d hangs, %d failed runs, %d restarts, %d updates lost; ",
                                     t.runs, t.hangs, t.failed, t.restarts, t.updates_lost);
  if (!t.accuracy_diff_median) {
    return absl::StrCat(line, absl::StrFormat("no run finished (baseline accuracy %.4f)", t.baseline_accuracy));
  }
  return absl::StrCat(line, absl::StrFormat("accuracy vs baseline %.4f: min %s, median %s, max %s",
                                            t.baseline_accuracy, Signed(*t.accuracy_diff_min),
                                            Signed(*t.accuracy_diff_median), Signed(*t.accuracy_diff_max)));
}

std::string ChaosReportMarkdown(const ChaosReportFacts& facts, const ChaosResult& result) {
  std::vector<std::string> all_facts = {absl::StrCat("Date: ", facts.date)};
  all_facts.insert(all_facts.end(), facts.facts.begin(), facts.facts.end());
  std::string out = ReportPreamble("pstrain chaos", facts.command_line, facts.machine, all_facts);
  const double base = result.baseline.accuracy;
  std::vector<std::vector<std::string>> rows = {Row(result.baseline, base)};
  for (const ChaosRunRecord& r : result.runs) rows.push_back(Row(r, base));
  absl::StrAppend(&out, "## Runs\n\n",
                  MarkdownTable({"run", "faults (target, time after start)", "exit status", "restarts",
                                 "updates lost", "recoveries", "test accuracy", "vs baseline", "wall time"},
                                rows),
                  "\n");
  const ChaosTotals& t = result.totals;
  absl::StrAppend(&out, "## Totals\n\n", "- Runs with faults: ", t.runs, "\n", "- Hangs (no end within the ",
                  "run timeout): ", t.hangs, "\n", "- Failed runs (any other error): ", t.failed, "\n",
                  "- Restarts: ", t.restarts, "\n", "- Updates lost (finished runs): ", t.updates_lost, "\n",
                  absl::StrFormat("- Test accuracy minus the baseline's (finished runs): min %s, median %s, "
                                  "max %s\n",
                                  OrDash(t.accuracy_diff_min), OrDash(t.accuracy_diff_median),
                                  OrDash(t.accuracy_diff_max)),
                  absl::StrFormat("- Baseline test accuracy: %.4f\n", t.baseline_accuracy));
  return out;
}

std::string ChaosReportJson(const ChaosReportFacts& facts, const ChaosResult& result) {
  Value v;
  auto& m = *v.mutable_struct_value()->mutable_fields();
  m["command"] = Text(facts.command_line);
  m["date"] = Text(facts.date);
  m["machine"] = Text(DescribeMachine(facts.machine));
  m["cores"] = Number(facts.machine.cores);
  m["cpu_model"] = Text(facts.machine.cpu_model);
  Value& list = m["facts"];
  list.mutable_list_value();
  for (const std::string& f : facts.facts) *list.mutable_list_value()->add_values() = Text(f);
  const double base = result.baseline.accuracy;
  m["baseline"] = RunJson(result.baseline, base);
  Value& runs = m["runs"];
  runs.mutable_list_value();
  for (const ChaosRunRecord& r : result.runs) *runs.mutable_list_value()->add_values() = RunJson(r, base);
  m["totals"] = TotalsJson(result.totals);
  return ToJson(v);
}

}  // namespace pstrain

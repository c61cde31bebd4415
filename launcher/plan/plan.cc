#include "launcher/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "common/wire_codec.h"
#include "launcher/plan/plan_accuracy.h"
#include "launcher/reporting/markdown.h"
#include "launcher/reporting/plot.h"
#include "launcher/supervisor/netns_harness.h"
#include "models/net_spec.h"

namespace pstrain {
namespace {

constexpr int kMaxHostCores = 4096;
constexpr double kMB = 1e6;

// Another ps "pays" where it adds at least this much.
constexpr double kPaysGain = 1.10;

const char* ModeName(bool sync) { return sync ? "sync" : "async"; }

proto::PlanCost CostRecord(const LinearCost& c) {
  proto::PlanCost r;
  r.set_fixed_ms(c.fixed_ms);
  r.set_per_mb_ms(c.per_byte_ms * kMB);
  return r;
}

std::string DescribeCost(const LinearCost& c, const char* per) {
  return absl::StrFormat("%.3f ms + %.3f ms per MB %s", c.fixed_ms, c.per_byte_ms * kMB, per);
}

double Percentile(const std::vector<double>& sorted, double q) {
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())))];
}

// The one model the runs trained, or the one asked for.
absl::StatusOr<std::string> PlannedModel(const PlanOptions& o, const std::vector<CalibrationRun>& runs) {
  if (!o.model.empty()) return o.model;
  std::set<std::string> models;
  for (const CalibrationRun& r : runs) models.insert(r.shape.model);
  if (models.size() == 1) return *models.begin();
  return absl::InvalidArgumentError(absl::StrCat("the calibration runs trained several models (",
                                                 absl::StrJoin(models, ", "),
                                                 "): say whose compute to plan with --model"));
}

const CalibrationRun& FirstOf(const std::vector<CalibrationRun>& runs, const std::string& model) {
  for (const CalibrationRun& r : runs) {
    if (r.shape.model == model) return r;
  }
  return runs.front();
}

// --compute_ms: the measured distribution scaled to the mean asked for.
void ScaleCompute(double compute_ms, PlanCalibration* cal, std::vector<std::string>* notes) {
  const double measured = cal->mean_before_push_ms() + cal->ahead_ms;
  if (!(compute_ms > 0) || !(measured > 0)) return;
  const double f = compute_ms / measured;
  for (double& b : cal->before_push_ms) b *= f;
  cal->ahead_ms *= f;
  notes->push_back(absl::StrFormat("Compute per step: %.1f ms as --compute_ms asks, the measured %.1f ms "
                                   "scaled by %.3g (its spread with it).", compute_ms, measured, f));
}

proto::PlanCalibrationRecord CalibrationRecord(const PlanOptions& o, const PlanCalibration& cal,
                                               const std::string& model, bool insecure, int host_cores,
                                               const std::vector<std::string>& notes) {
  proto::PlanCalibrationRecord r;
  for (const std::string& d : o.calibrate) r.add_runs(d);
  r.set_model(model);
  r.set_batch_size(cal.batch_size);
  r.set_compute_ms(cal.mean_before_push_ms() + cal.ahead_ms);
  r.set_before_push_ms(cal.mean_before_push_ms());
  r.set_before_push_p99_ms(Percentile(cal.before_push_ms, 0.99));
  r.set_ahead_ms(cal.ahead_ms);
  r.set_gap_ms(cal.gap_ms);
  *r.mutable_ps_request() = CostRecord(cal.ps_request);
  *r.mutable_latency() = CostRecord(cal.latency);
  *r.mutable_worker_comm_cpu() = CostRecord(cal.worker_comm_cpu);
  r.set_sharing_cost(cal.sharing_cost);
  r.set_busy_core_wait_ms(cal.busy_core_wait_ms);
  r.set_barrier_share(cal.barrier_share);
  r.set_core_spread(cal.core_spread);
  r.set_insecure(insecure);
  r.set_host_cores(host_cores);
  for (const std::string& n : notes) r.add_notes(n);
  return r;
}

double Total(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) t += x;
  return t;
}

proto::PlanCellRecord CellRecord(const PlanOptions& o, const PlanCell& cell, const PlanPrediction& p) {
  proto::PlanCellRecord r;
  r.set_workers(cell.workers);
  r.set_ps(cell.ps);
  r.set_mode(ModeName(cell.sync));
  r.set_link_rate(o.link_rate);
  r.set_images_per_second(p.images_per_second);
  r.set_step_ms(p.step_ms);
  proto::PlanSplitRecord* s = r.mutable_split();
  s->set_compute_ms(p.split.compute_ms);
  s->set_barrier_ms(p.split.barrier_ms);
  s->set_sharing_ms(p.split.sharing_ms);
  s->set_transfer_ms(p.split.transfer_ms);
  s->set_ps_ms(p.split.ps_ms);
  s->set_other_ms(p.split.other_ms);
  s->set_bound_ms(p.split.bound_ms);
  r.set_bound(p.bound);
  r.set_host_cpu_utilisation(p.host_cpu_utilisation);
  for (double u : p.ps_core_utilisation) r.add_ps_core_utilisation(u);
  for (double u : p.ps_link_utilisation) r.add_ps_link_utilisation(u);
  r.set_staleness(p.staleness);
  r.set_push_bytes_per_step(Total(cell.push_bytes));
  r.set_pull_bytes_per_step(Total(cell.pull_bytes));
  return r;
}

// next_ps_gain of every cell: its images/s with the next ps count.
void SetGains(proto::PlanRecord* plan) {
  std::map<std::tuple<std::string, int, int>, double> ips;  // (mode, workers, ps)
  for (const proto::PlanCellRecord& c : plan->cells()) ips[{c.mode(), c.workers(), c.ps()}] = c.images_per_second();
  for (proto::PlanCellRecord& c : *plan->mutable_cells()) {
    auto it = ips.upper_bound({c.mode(), c.workers(), c.ps()});
    if (it == ips.end() || std::get<0>(it->first) != c.mode() || std::get<1>(it->first) != c.workers()) continue;
    if (c.images_per_second() > 0) c.set_next_ps_gain(it->second / c.images_per_second());
  }
}

// Each cell's time to o.target_accuracy (launcher/plan/plan_accuracy.h), and a
// note for each mode no calibration run gives the curve of.
void SetTimesToTarget(const PlanOptions& o, const std::vector<CalibrationRun>& runs, Plan* plan) {
  proto::PlanRecord& r = plan->record;
  r.set_target_accuracy(o.target_accuracy);
  const std::vector<AccuracyCurve> curves = CurvesToTarget(runs, o.target_accuracy);
  for (bool sync : o.modes) {
    bool any = false;
    for (proto::PlanCellRecord& c : *r.mutable_cells()) {
      if (c.mode() != ModeName(sync) || !(c.images_per_second() > 0)) continue;
      const std::optional<AccuracyCurve> curve = CurveFor(curves, sync, c.workers());
      if (!curve) continue;
      any = true;
      c.set_seconds_to_target(curve->images / c.images_per_second());
      c.set_target_curve(curve->run_dir);
    }
    if (!any) {
      plan->notes.push_back(absl::StrFormat(
          "No time to %s in %s: no %s calibration run reached it (calibrate with one that trains "
          "longer, or lower --target_accuracy).",
          Percent(o.target_accuracy), ModeName(sync), ModeName(sync)));
    }
  }
}

// Per worker count: the mode and ps count with the least time to the target.
std::vector<std::string> FirstToTarget(const proto::PlanRecord& plan) {
  std::map<int, const proto::PlanCellRecord*> first;
  for (const proto::PlanCellRecord& c : plan.cells()) {
    if (!(c.seconds_to_target() > 0)) continue;
    auto [it, inserted] = first.emplace(c.workers(), &c);
    if (!inserted && c.seconds_to_target() < it->second->seconds_to_target()) it->second = &c;
  }
  std::vector<std::string> out;
  for (const auto& [workers, c] : first) {
    out.push_back(absl::StrFormat("%d worker%s: %s with %d ps, %.1f s (%.0f images/s; the curve of %s)", workers,
                                  workers == 1 ? "" : "s", c->mode(), c->ps(), c->seconds_to_target(),
                                  c->images_per_second(), c->target_curve()));
  }
  return out;
}

std::string Pct(double u) { return absl::StrFormat("%.0f%%", 100 * u); }

double MaxOf(const google::protobuf::RepeatedField<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, x);
  return m;
}

std::string ModeTable(const proto::PlanRecord& plan, const std::string& mode, bool one_host) {
  std::vector<std::string> header = {"workers", "ps", "images/s", "step ms", "compute", "barrier", "sharing",
                                     "transfer", "ps service", "other", "bound wait", "bound",
                                     "ps core (max)", "ps link (max)"};
  if (one_host) header.push_back("host CPU");
  if (mode == "async") header.push_back("staleness");
  header.push_back(absl::StrCat("time to ", Percent(plan.target_accuracy())));
  std::vector<std::vector<std::string>> rows;
  for (const proto::PlanCellRecord& c : plan.cells()) {
    if (c.mode() != mode) continue;
    const proto::PlanSplitRecord& s = c.split();
    auto ms = [](double v) { return absl::StrFormat("%.1f", v); };
    std::vector<std::string> row = {absl::StrCat(c.workers()), absl::StrCat(c.ps()),
                                    absl::StrFormat("%.0f", c.images_per_second()), ms(c.step_ms()),
                                    ms(s.compute_ms()), ms(s.barrier_ms()), ms(s.sharing_ms()),
                                    ms(s.transfer_ms()), ms(s.ps_ms()), ms(s.other_ms()), ms(s.bound_ms()),
                                    c.bound(), Pct(MaxOf(c.ps_core_utilisation())),
                                    plan.link_rate().empty() ? "-" : Pct(MaxOf(c.ps_link_utilisation()))};
    if (one_host) row.push_back(Pct(c.host_cpu_utilisation()));
    if (mode == "async") row.push_back(absl::StrFormat("%.1f", c.staleness()));
    row.push_back(c.seconds_to_target() > 0 ? absl::StrFormat("%.1f s", c.seconds_to_target()) : "-");
    rows.push_back(std::move(row));
  }
  return MarkdownTable(header, rows);
}

// Per mode and worker count: the fewest ps within 5% of the best, what
// bounds it, and what the next ps would add.
std::vector<std::string> PsAdvice(const proto::PlanRecord& plan, const std::string& mode) {
  std::map<int, std::vector<const proto::PlanCellRecord*>> by_workers;
  for (const proto::PlanCellRecord& c : plan.cells()) {
    if (c.mode() == mode) by_workers[c.workers()].push_back(&c);
  }
  std::vector<std::string> out;
  for (const auto& [workers, cells] : by_workers) {
    double best = 0;
    for (const proto::PlanCellRecord* c : cells) best = std::max(best, c->images_per_second());
    const proto::PlanCellRecord* enough = cells.front();
    for (const proto::PlanCellRecord* c : cells) {
      if (c->images_per_second() >= 0.95 * best) {
        enough = c;
        break;
      }
    }
    std::string line = absl::StrFormat("%d worker%s: %d ps (%.0f images/s, bound: %s)", workers,
                                       workers == 1 ? "" : "s", enough->ps(), enough->images_per_second(),
                                       enough->bound());
    std::vector<std::string> pays;
    for (const proto::PlanCellRecord* c : cells) {
      if (c->next_ps_gain() >= kPaysGain) pays.push_back(absl::StrFormat("%d -> next +%.0f%%", c->ps(), 100 * (c->next_ps_gain() - 1)));
    }
    if (!pays.empty()) absl::StrAppend(&line, "; another ps pays at ", absl::StrJoin(pays, ", "));
    out.push_back(line);
  }
  return out;
}

// Images/s against workers, one line per ps count, the bound cells marked.
LineChart PlanChart(const PlanOptions& o, const proto::PlanRecord& plan, const std::string& mode) {
  LineChart c;
  c.name = absl::StrCat("plan_", mode);
  c.title = absl::StrFormat("%s, %s: predicted images/s against workers", plan.model(), mode);
  c.x_label = "workers";
  c.y_label = "train images/s (predicted)";
  c.y_min = 0.0;
  c.x_tics.assign(o.workers.begin(), o.workers.end());
  c.log_x = o.workers.back() > 4 * o.workers.front();
  Series ps_bound{"bound by a ps (core or link)", {}, false, 1, 6};
  Series other_bound{"bound by the host's CPU or a worker's link", {}, false, 8, 4};
  for (size_t p = 0; p < o.ps.size(); ++p) {
    Series s{absl::StrCat(o.ps[p], " ps"), {}, false, static_cast<int>(p) + 2};
    for (const proto::PlanCellRecord& cell : plan.cells()) {
      if (cell.mode() != mode || cell.ps() != o.ps[p]) continue;
      const std::pair<double, double> point = {cell.workers(), cell.images_per_second()};
      s.points.push_back(point);
      if (absl::StartsWith(cell.bound(), "ps ")) ps_bound.points.push_back(point);
      if (cell.bound() == "host CPU" || cell.bound() == "worker link") other_bound.points.push_back(point);
    }
    c.series.push_back(std::move(s));
  }
  c.series.push_back(std::move(ps_bound));
  c.series.push_back(std::move(other_bound));
  return c;
}

std::string Question(const proto::PlanRecord& plan, const PlanCalibration& cal, const PlanOptions& o) {
  std::string link = plan.link_rate().empty()
                         ? "no link limit (the calibration's loopback: transfers cost CPU only)"
                         : absl::StrCat(plan.link_rate(), " links, ",
                                        plan.link_kind() == "nic"
                                            ? "each host's NIC carrying that each way"
                                            : "only each task's egress shaped, with a 10 ms bucket "
                                              "(tc tbf, as --isolate=netns)");
  const std::string where =
      o.placement == Placement::kOneHost
          ? absl::StrFormat("every task on one host of %d cores (as `pstrain launch` runs them)", plan.host_cores())
          : "each task on a host of its own";
  const proto::PlanCellRecord& any = plan.cells(0);
  // A script's job: its bytes are what its calibration runs' ps tasks
  // counted (dense tensors and embedding rows), not a parameter count's.
  const bool script = absl::StartsWith(plan.model(), kScriptModel);
  std::vector<std::string> lines = {
      absl::StrFormat(
          "Model: %s%s; compute per step of %d images: %.1f ms (%s's, %s)", plan.model(),
          script ? "" : absl::StrFormat(", %.0f parameters", plan.params()), cal.batch_size,
          cal.mean_before_push_ms() + cal.ahead_ms, plan.calibration().model(),
          o.compute_ms > 0 ? "scaled by --compute_ms" : "measured"),
      script ? absl::StrFormat("A worker's step moves %.2f MB up and %.2f MB down (what the "
                               "calibration runs' ps tasks received and sent a worker step: dense "
                               "tensors and embedding rows)",
                               any.push_bytes_per_step() / kMB, any.pull_bytes_per_step() / kMB)
             : absl::StrFormat(
                   "A worker's step moves %.2f MB up (--wire=%s) and %.2f MB down (f32)",
                   any.push_bytes_per_step() / kMB, plan.wire(), any.pull_bytes_per_step() / kMB),
      absl::StrCat("Network: ", link), absl::StrCat("Placement: ", where),
      absl::StrCat("Security: ", plan.security() == "curve"
                                     ? "CURVE (encrypted), as the calibration's costs"
                                     : "--insecure, as the calibration's costs")};
  std::string out = "## The question\n\n";
  for (const std::string& l : lines) absl::StrAppend(&out, "- ", l, "\n");
  return out;
}

std::string CalibrationSection(const proto::PlanRecord& plan, const PlanCalibration& cal) {
  const proto::PlanCalibrationRecord& r = plan.calibration();
  std::string out = "## Calibration\n\n";
  absl::StrAppend(&out, "- Runs: ", absl::StrJoin(r.runs(), ", "), "\n");
  absl::StrAppend(&out, absl::StrFormat("- Compute (%s, batch %d): before the push %.2f ms mean, %.2f ms p99; "
                                        "run ahead during the push/pull %.2f ms; between steps %.2f ms\n",
                                        r.model(), r.batch_size(), r.before_push_ms(), r.before_push_p99_ms(),
                                        r.ahead_ms(), r.gap_ms()));
  absl::StrAppend(&out, "- The ps's CPU: ", DescribeCost(cal.ps_request, "per request (push + pull)"), "\n");
  absl::StrAppend(&out, "- A worker's CPU beyond compute: ", DescribeCost(cal.worker_comm_cpu, "per step"), "\n");
  absl::StrAppend(&out, "- A worker's remaining latency: ",
                  DescribeCost(cal.latency, "of the largest request (push + pull of a shard)"), "\n");
  absl::StrAppend(
      &out, absl::StrFormat("- Sharing a core: +%.1f%% CPU per step per additional worker on it; "
                            "where workers outnumber cores unevenly, a round's computes spread "
                            "%.0f%% of the way from ceil(W / H) to W / H a core\n",
                            100 * cal.sharing_cost, 100 * cal.core_spread));
  absl::StrAppend(
      &out, absl::StrFormat("- A full host: the compute waits %.2f ms a step per worker on a core "
                            "(times 1 + 1/2 + ... + 1/P with P ps) beyond its CPU, once every core "
                            "has a worker; a sync round waits for %.0f%% of what the slowest "
                            "worker's wait adds\n",
                            cal.busy_core_wait_ms, 100 * cal.barrier_share));
  if (!cal.backward_leads.empty()) {
    std::vector<std::string> leads;
    for (const auto& [begin, f] : cal.backward_leads) {
      // A lead that rounds to 0% says nothing.
      if (f >= 0.005) leads.push_back(absl::StrFormat("from float %d on, %.0f%%", begin, 100 * f));
    }
    if (!leads.empty()) {
      absl::StrAppend(
          &out,
          "- Pushes during backward (--overlap): a shard may leave once its gradient is final, "
          "this far ahead of the end of the compute before the push: ",
          absl::StrJoin(leads, "; "), "\n");
    }
  }
  for (const std::string& n : r.notes()) absl::StrAppend(&out, "- ", n, "\n");
  return out;
}

std::string PlanMarkdown(const PlanOptions& o, const Plan& plan, const FigureDrawer& figures) {
  const proto::PlanRecord& r = plan.record;
  std::string out = absl::StrCat("# pstrain plan: ", r.model(), "\n\n", "Command: `", r.command(), "`\n\n",
                                 Question(r, plan.calibration, o), "\n", CalibrationSection(r, plan.calibration),
                                 "\n");
  for (bool sync : o.modes) {
    const std::string mode = ModeName(sync);
    absl::StrAppend(&out, "## ", mode, "\n\n", ModeTable(r, mode, o.placement == Placement::kOneHost), "\n");
    absl::StrAppend(&out, "Fewest ps within 5% of the best:\n\n");
    for (const std::string& line : PsAdvice(r, mode)) absl::StrAppend(&out, "- ", line, "\n");
    out += "\n";
  }
  const std::vector<std::string> first = FirstToTarget(r);
  absl::StrAppend(&out, "## First to ", Percent(r.target_accuracy()), "\n\n");
  if (first.empty()) {
    absl::StrAppend(&out, "No calibration run reached ", Percent(r.target_accuracy()),
                    " test accuracy: no time to it is predicted.\n\n");
  } else {
    absl::StrAppend(&out, "The mode and ps count that reach ", Percent(r.target_accuracy()),
                    " test accuracy first, per worker count:\n\n");
    for (const std::string& line : first) absl::StrAppend(&out, "- ", line, "\n");
    absl::StrAppend(&out,
                    "\nA time to the target is the images the calibration run of the same mode with the nearest "
                    "worker count had trained on when it first reached it, over the cell's images/s. It "
                    "assumes those images do not depend on the worker count: true while the learning rate "
                    "keeps a step's progress per image (the defaults' rule, docs/training.md), optimistic "
                    "far from the calibration's worker count (sync: fewer, larger updates; async: more "
                    "staleness). A calibration run of each mode near the counts asked about narrows it.\n\n");
  }
  absl::StrAppend(&out, FiguresSection(figures.figures(), figures.notes()));
  absl::StrAppend(&out,
                  "\n## How to read it\n\n"
                  "- Times are ms per step of every worker (sync: a round) or of one worker (async); the split "
                  "adds up to the step: compute (b + a), barrier (waiting for the slowest of the workers: the "
                  "order statistic of the measured compute), sharing (workers sharing cores on one host), "
                  "transfer (the links, less what the forward ahead hid), ps service, other (a worker's "
                  "remaining latency and the gap between steps), and bound wait (the binding resource's excess "
                  "over that path).\n"
                  "- bound: the resource whose demand per round sets the pace (ps core, ps link, worker link, "
                  "host CPU; the bound wait is then above 0), or else the largest part of the step: compute "
                  "(with the barrier and shared cores), ps core (in sync the ps serves the round's requests "
                  "one after another) or links. Utilisations are per round.\n"
                  "- The model, what it assumes and what it leaves out: docs/planning.md "
                  "(launcher/plan/plan_model.h has the formulas).\n");
  return out;
}

}  // namespace

absl::StatusOr<std::vector<bool>> ParsePlanModes(const std::string& text) {
  std::vector<bool> out;
  for (absl::string_view m : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    if (m != "sync" && m != "async") {
      return absl::InvalidArgumentError(absl::StrCat("--mode: \"", m, "\" (plan predicts sync and async)"));
    }
    if (std::find(out.begin(), out.end(), m == "sync") == out.end()) out.push_back(m == "sync");
  }
  if (out.empty()) return absl::InvalidArgumentError("--mode: empty list");
  return out;
}

absl::StatusOr<LinkKind> ParseLinkKind(const std::string& text) {
  if (text == "nic") return LinkKind::kNic;
  if (text == "netns") return LinkKind::kNetns;
  return absl::InvalidArgumentError(absl::StrCat("--link_kind: \"", text, "\" (expected nic or netns)"));
}

absl::StatusOr<Placement> ParsePlacement(const std::string& text) {
  if (text == "one_host") return Placement::kOneHost;
  if (text == "host_per_task") return Placement::kHostPerTask;
  return absl::InvalidArgumentError(
      absl::StrCat("--placement: \"", text, "\" (expected one_host or host_per_task)"));
}

const char* LinkKindName(LinkKind kind) { return kind == LinkKind::kNic ? "nic" : "netns"; }
const char* PlacementName(Placement p) { return p == Placement::kOneHost ? "one_host" : "host_per_task"; }

std::vector<std::string> RepeatedFlagValues(int argc, char** argv, const std::string& name) {
  std::vector<std::string> out;
  const std::string eq = absl::StrCat("--", name, "="), bare = absl::StrCat("--", name);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    std::string value;
    if (absl::StartsWith(arg, eq)) {
      value = arg.substr(eq.size());
    } else if (arg == bare && i + 1 < argc) {
      value = argv[++i];
    } else {
      continue;
    }
    for (absl::string_view v : absl::StrSplit(value, ',', absl::SkipEmpty())) out.emplace_back(v);
  }
  return out;
}

absl::Status ValidatePlanOptions(const PlanOptions& o) {
  if (o.calibrate.empty()) {
    return absl::InvalidArgumentError("plan needs --calibrate=RUN_DIR (a run of `pstrain launch`; repeat it for more)");
  }
  if (o.out.empty()) return absl::InvalidArgumentError("plan needs --out=DIR");
  if (o.workers.empty() || o.ps.empty() || o.modes.empty()) {
    return absl::InvalidArgumentError("--workers, --ps and --mode need at least one value each");
  }
  if (!o.link_rate.empty()) RETURN_IF_ERROR(RateBytesPerSecond(o.link_rate).status());
  if (o.link_rate.empty() && o.link == LinkKind::kNetns) {
    return absl::InvalidArgumentError("--link_kind=netns needs --link_rate");
  }
  if (o.params < 0) return absl::InvalidArgumentError("--params must be >= 1 (floats of the model)");
  if (o.host_cores < 0 || o.host_cores > kMaxHostCores) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host_cores must be in 1..", kMaxHostCores, " (0: the calibration host's)"));
  }
  if (o.default_host_cores < 1 || o.default_host_cores > kMaxHostCores) {
    return absl::InvalidArgumentError(absl::StrCat("--runs_host_cores must be in 1..", kMaxHostCores,
                                                   " (0: this machine's)"));
  }
  if (!(o.ps_share > 0) || o.ps_share > 1) {
    return absl::InvalidArgumentError("--ps_share must be in (0, 1] (the ps's share of a 1-worker push/pull)");
  }
  if (!(o.compute_ms >= 0) || o.compute_ms > 1e7) {
    return absl::InvalidArgumentError("--compute_ms must be > 0 (ms per step; 0: the measured compute)");
  }
  if (!o.model.empty() && !models::GetNetSpec(o.model).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model: \"", o.model, "\" (expected ",
                                                   absl::StrJoin(models::ModelNames(), ", "), ")"));
  }
  if (!o.wire.empty()) {
    if (absl::Status s = ParseWireEncoding(o.wire).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--wire: ", s.message()));
    }
  }
  for (const std::string& d : o.calibrate) {
    if (!FileExists(d + "/summary.json")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--calibrate=", d, ": no summary.json there (not the directory of a finished run)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> MakePlan(const PlanOptions& o) {
  RETURN_IF_ERROR(ValidatePlanOptions(o));
  std::vector<CalibrationRun> runs;
  for (const std::string& d : o.calibrate) {
    ASSIGN_OR_RETURN(CalibrationRun run, ReadCalibrationRun(d, o.default_host_cores));
    runs.push_back(std::move(run));
  }
  ASSIGN_OR_RETURN(const std::string model, PlannedModel(o, runs));
  bool all_insecure = true;
  for (const CalibrationRun& r : runs) all_insecure = all_insecure && r.insecure;
  const bool insecure = o.insecure.value_or(all_insecure);
  Plan plan;
  ASSIGN_OR_RETURN(plan.calibration, Calibrate(runs, model, insecure, o.ps_share, &plan.notes));
  ScaleCompute(o.compute_ms, &plan.calibration, &plan.notes);
  const CalibrationRun& first = FirstOf(runs, model);
  ModelShape shape = first.shape;
  shape.params = o.params;
  if (!o.wire.empty()) shape.wire = o.wire;
  if (o.params > 0 && shape.shard_strategy != "balanced") {
    plan.notes.push_back("--params: the shards are balanced (one flat tensor), whatever the runs' strategy.");
    shape.shard_strategy = "balanced";
  }
  const int host_cores = o.host_cores > 0 ? o.host_cores : first.host_cores;
  double rate = 0;
  if (!o.link_rate.empty()) {
    ASSIGN_OR_RETURN(rate, RateBytesPerSecond(o.link_rate));
  }
  proto::PlanRecord& r = plan.record;
  r.set_command(o.command_line);
  r.set_model(o.params > 0 ? "params" : model);
  r.set_wire(shape.wire);
  r.set_shard_strategy(shape.shard_strategy);
  r.set_link_rate(o.link_rate);
  r.set_link_kind(LinkKindName(o.link));
  r.set_placement(PlacementName(o.placement));
  r.set_host_cores(host_cores);
  r.set_security(insecure ? "insecure" : "curve");
  for (bool sync : o.modes) {
    for (int ps : o.ps) {
      PlanCell cell{1, ps, sync, rate, o.link, o.placement, host_cores, {}, {}, {}};
      RETURN_IF_ERROR(StepBytes(shape, ps, &cell.push_bytes, &cell.pull_bytes, &cell.shard_begin));
      for (int workers : o.workers) {
        cell.workers = workers;
        *r.add_cells() = CellRecord(o, cell, Predict(plan.calibration, cell));
      }
    }
  }
  r.set_params(r.cells(0).pull_bytes_per_step() / 4);  // pulls are f32, every float
  SetGains(&r);
  SetTimesToTarget(o, runs, &plan);
  // Last: the notes of every step above.
  *r.mutable_calibration() = CalibrationRecord(o, plan.calibration, model, insecure, first.host_cores, plan.notes);
  return plan;
}

absl::StatusOr<std::vector<CheckRow>> CheckRuns(const std::vector<CalibrationRun>& calibration,
                                                const std::vector<CalibrationRun>& runs, double ps_share,
                                                std::vector<std::string>* notes) {
  std::map<std::pair<std::string, bool>, PlanCalibration> by_model;  // (model, insecure)
  std::set<std::string> calibration_dirs;
  for (const CalibrationRun& c : calibration) calibration_dirs.insert(c.run_dir);
  std::vector<CheckRow> rows;
  for (const CalibrationRun& run : runs) {
    const std::pair<std::string, bool> key = {run.shape.model, run.insecure};
    if (by_model.count(key) == 0) {
      std::vector<std::string> own;
      ASSIGN_OR_RETURN(by_model[key], Calibrate(calibration, run.shape.model, run.insecure, ps_share, &own));
      for (const std::string& n : own) {
        if (std::find(notes->begin(), notes->end(), n) == notes->end()) notes->push_back(n);
      }
    }
    const PlanPrediction p = Predict(by_model[key], run.cell);
    CheckRow row;
    row.run_dir = run.run_dir;
    row.cell = absl::StrFormat("%s %s, %d ps, %d worker%s, %s", run.shape.model, ModeName(run.cell.sync),
                               run.cell.ps, run.cell.workers, run.cell.workers == 1 ? "" : "s",
                               run.link_rate.empty() ? "no link limit" : absl::StrCat(run.link_rate, " netns"));
    if (run.shape.wire != "f32") absl::StrAppend(&row.cell, ", --wire=", run.shape.wire);
    if (run.insecure) absl::StrAppend(&row.cell, ", --insecure");
    row.calibration = calibration_dirs.count(run.run_dir) > 0;
    row.predicted = p.images_per_second;
    row.measured = run.steady_images_per_second;
    row.error = row.measured > 0 ? row.predicted / row.measured - 1 : 0;
    row.bound = p.bound;
    const PlanCalibration& cal = by_model[key];
    const double per_core = static_cast<double>(run.cell.workers) / run.host_cores;
    const double bytes = Total(run.cell.push_bytes) + Total(run.cell.pull_bytes);
    const double stretch = 1 + cal.sharing_cost * std::max(0.0, per_core - 1);
    const double expected = (cal.mean_before_push_ms() + cal.ahead_ms + cal.worker_comm_cpu.At(bytes)) * stretch;
    const double expected_compute = (cal.mean_before_push_ms() + cal.ahead_ms) * stretch;
    if (run.worker_cpu_ms > 0 && expected > 0) {
      row.cpu_ratio = run.worker_cpu_ms / expected;
    } else if (run.compute_ms > 0 && expected_compute > 0) {
      row.cpu_ratio = run.compute_ms / expected_compute;  // no task_cpu.csv: the step log's compute
    }
    if (row.cpu_ratio > 0) {
      PlanCalibration at_speed = cal;
      for (double& b : at_speed.before_push_ms) b *= row.cpu_ratio;
      at_speed.ahead_ms *= row.cpu_ratio;
      for (LinearCost* cost : {&at_speed.ps_request, &at_speed.worker_comm_cpu}) {
        cost->fixed_ms *= row.cpu_ratio;
        cost->per_byte_ms *= row.cpu_ratio;
      }
      row.predicted_at_run_speed = Predict(at_speed, run.cell).images_per_second;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string CheckTable(const std::vector<CheckRow>& rows, double tolerance) {
  // The runs of each cell, in the order the cells first appear.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const CheckRow*>> by_cell;
  for (const CheckRow& r : rows) {
    const std::string key = absl::StrCat(r.cell, r.calibration ? " (calibration)" : "");
    if (by_cell[key].empty()) order.push_back(key);
    by_cell[key].push_back(&r);
  }
  std::vector<std::vector<std::string>> table;
  int held_out = 0, within = 0, with_speed = 0, within_at_speed = 0;
  for (const std::string& key : order) {
    const std::vector<const CheckRow*>& runs = by_cell[key];
    double measured = 0;
    std::vector<std::string> each, cpu;
    for (const CheckRow* r : runs) {
      measured += r->measured / static_cast<double>(runs.size());
      each.push_back(absl::StrFormat("%.0f (%+.0f%%)", r->measured, 100 * r->error));
      cpu.push_back(r->cpu_ratio > 0 ? absl::StrFormat("%.2f (%+.0f%%)", r->cpu_ratio,
                                                       100 * (r->predicted_at_run_speed / r->measured - 1))
                                     : "-");
    }
    const double error = measured > 0 ? runs.front()->predicted / measured - 1 : 0;
    table.push_back({key, absl::StrFormat("%.0f", runs.front()->predicted), absl::StrFormat("%.0f", measured),
                     absl::StrFormat("%+.1f%%", 100 * error), absl::StrJoin(each, ", "), absl::StrJoin(cpu, ", "),
                     runs.front()->bound});
    if (runs.front()->calibration) continue;
    ++held_out;
    if (std::fabs(error) <= tolerance) ++within;
    double at_speed = 0;  // the mean of the runs' predictions at their speed
    for (const CheckRow* r : runs) at_speed += r->predicted_at_run_speed / static_cast<double>(runs.size());
    if (!std::all_of(runs.begin(), runs.end(), [](const CheckRow* r) { return r->cpu_ratio > 0; })) continue;
    ++with_speed;
    if (std::fabs(at_speed / measured - 1) <= tolerance) ++within_at_speed;
  }
  std::vector<std::string> header = {"cell", "predicted images/s", "measured images/s", "error",
                                     "each run (its error)", "CPU per step / calibration's (error at that speed)",
                                     "bound (predicted)"};
  if (order.size() == rows.size()) {  // one run a cell: "each run" says it again
    header.erase(header.begin() + 4);
    for (std::vector<std::string>& row : table) row.erase(row.begin() + 4);
  }
  return absl::StrCat(
      MarkdownTable(header, table),
      absl::StrFormat("\n%d of %d held-out cells within %.0f%% of the measured images/s (the mean of their "
                      "runs)",
                      within, held_out, 100 * tolerance),
      with_speed > 0 ? absl::StrFormat("; at each run's own speed, %d of %d", within_at_speed, with_speed) : "",
      ".\n");
}

namespace {

constexpr double kCheckTolerance = 0.15;

absl::Status RunCheck(const PlanOptions& o) {
  std::vector<CalibrationRun> calibration, held_out;
  for (const std::string& d : o.calibrate) {
    ASSIGN_OR_RETURN(CalibrationRun run, ReadCalibrationRun(d, o.default_host_cores));
    calibration.push_back(std::move(run));
  }
  for (const std::string& d : o.check) {
    auto run = ReadCalibrationRun(d, o.default_host_cores);
    if (!run.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--check: ", run.status().message()));
    }
    held_out.push_back(*std::move(run));
  }
  std::vector<std::string> notes;
  ASSIGN_OR_RETURN(const std::vector<CheckRow> rows, CheckRuns(calibration, held_out, o.ps_share, &notes));
  const std::string table = CheckTable(rows, kCheckTolerance);
  std::string md = absl::StrCat("# pstrain plan --check\n\nCommand: `", o.command_line, "`\n\n",
                                "Calibration: ", absl::StrJoin(o.calibrate, ", "), "\n\n", table);
  if (!notes.empty()) absl::StrAppend(&md, "\nNotes:\n\n");
  for (const std::string& n : notes) absl::StrAppend(&md, "- ", n, "\n");
  absl::StrAppend(&md, "\nMeasured: images/s once steady (each worker's images past the first tenth of its "
                       "steps over its time, evaluation pauses left out, summed over the workers), the mean "
                       "of the cell's runs. CPU per step / calibration's: a worker's CPU time per step in the "
                       "run over what the calibration runs took (with the sharing of cores); for a run "
                       "without task_cpu.csv, its compute time per step from the step log over the "
                       "calibration's: above 1, the host computed slower than when it calibrated; in "
                       "brackets, the error of the prediction with every calibrated CPU time scaled by it.\n");
  RETURN_IF_ERROR(MakeDirs(o.out));
  RETURN_IF_ERROR(WriteFileAtomic(o.out + "/check.md", md));
  std::printf("%s", table.c_str());
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  std::printf("pstrain plan: wrote %s/check.md\n", o.out.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace

absl::Status RunPlan(const PlanOptions& o) {
  if (!o.check.empty()) {
    RETURN_IF_ERROR(ValidatePlanOptions(o));
    return RunCheck(o);
  }
  ASSIGN_OR_RETURN(const Plan plan, MakePlan(o));
  RETURN_IF_ERROR(MakeDirs(o.out));
  FigureDrawer figures(o.out + "/plots", "plots", o.gnuplot);
  for (bool sync : o.modes) {
    figures.Add(PlanChart(o, plan.record, ModeName(sync)),
                absl::StrFormat("Predicted images/s against workers, %s, one line per ps count", ModeName(sync)));
  }
  RETURN_IF_ERROR(WriteFileAtomic(o.out + "/plan.json", ToJson(plan.record)));
  RETURN_IF_ERROR(WriteFileAtomic(o.out + "/plan.md", PlanMarkdown(o, plan, figures)));
  std::printf("pstrain plan: %d cells predicted; %s/plan.md, %s/plan.json\n", plan.record.cells_size(),
              o.out.c_str(), o.out.c_str());
  for (const std::string& n : figures.notes()) std::printf("pstrain plan: %s\n", n.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace pstrain

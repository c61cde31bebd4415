#include "launcher/plan/plan_calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/shard_plan.h"
#include "common/status_macros.h"
#include "common/wire_codec.h"
#include "launcher/supervisor/netns_harness.h"
#include "launcher/supervisor/task_cpu.h"
#include "models/net_spec.h"
#include "proto/run_summary.pb.h"

namespace pstrain {
namespace {

absl::Status Unusable(const std::string& run_dir, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--calibrate=", run_dir, ": ", why));
}

// The steady window: every worker past a tenth of its steps (the warm-up
// SteadyImagesPerSecond leaves out), to the first worker's last step.
std::pair<double, double> SteadyWindow(const RunRecord& r) {
  double from = 0, to = std::numeric_limits<double>::max();
  for (const std::vector<StepRow>& rows : r.steps) {
    from = std::max(from, rows[rows.size() / 10].end_unix_s);
    to = std::min(to, rows.back().end_unix_s);
  }
  return {from, to};
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// The whole training: the first step's start to the last step's end.
std::pair<double, double> TrainingWindow(const RunRecord& r) {
  double from = std::numeric_limits<double>::max(), to = 0;
  for (const std::vector<StepRow>& rows : r.steps) {
    from = std::min(from, rows.front().start_unix_s());
    to = std::max(to, rows.back().end_unix_s);
  }
  return {from, to};
}

// Two CPU samples of `samples` inside the steady window, or (a short run)
// inside the training.
std::optional<std::pair<CpuSample, CpuSample>> CpuWindow(const RunRecord& r, const std::vector<CpuSample>& samples) {
  const auto [from, to] = SteadyWindow(r);
  if (auto within = SamplesWithin(samples, from, to)) return within;
  const auto [first, last] = TrainingWindow(r);
  return SamplesWithin(samples, first, last);
}

// Steps of `rows` that end in (from, to].
int64_t StepsBetween(const std::vector<StepRow>& rows, double from, double to) {
  return std::count_if(rows.begin(), rows.end(),
                       [&](const StepRow& s) { return s.end_unix_s > from && s.end_unix_s <= to; });
}

// From task_cpu.csv: each ps's CPU per request (every worker step is one
// request to each ps), and a worker's CPU per step. Leaves them unset when
// a task has too few samples.
void ReadCpu(const std::map<std::string, std::vector<CpuSample>>& cpu, CalibrationRun* run) {
  const RunRecord& record = run->record;
  for (int k = 0; k < run->cell.ps; ++k) {
    auto it = cpu.find(absl::StrCat("ps:", k));
    const auto within = it == cpu.end() ? std::nullopt : CpuWindow(record, it->second);
    int64_t requests = 0;
    for (const std::vector<StepRow>& rows : record.steps) {
      if (within) requests += StepsBetween(rows, within->first.unix_s, within->second.unix_s);
    }
    if (requests <= 0) return run->ps_cpu_ms_per_request.clear();
    run->ps_cpu_ms_per_request.push_back((within->second.cpu_seconds - within->first.cpu_seconds) * 1e3 /
                                         static_cast<double>(requests));
  }
  double cpu_ms = 0;
  int64_t steps = 0;
  for (const auto& [task, samples] : cpu) {
    if (absl::StartsWith(task, "ps:")) continue;
    // A spec with a chief numbers its workers from rank 1 (rank 0 is the
    // chief's); without one, worker i is rank i.
    int index = 0;
    if (!absl::SimpleAtoi(task.substr(task.find(':') + 1), &index)) continue;
    const int rank = absl::StartsWith(task, "worker:") && cpu.count("chief:0") > 0 ? index + 1 : index;
    if (rank < 0 || rank >= static_cast<int>(record.steps.size())) continue;
    const auto within = CpuWindow(record, samples);
    if (!within) continue;
    cpu_ms += (within->second.cpu_seconds - within->first.cpu_seconds) * 1e3;
    steps += StepsBetween(record.steps[rank], within->first.unix_s, within->second.unix_s);
  }
  if (steps > 0) run->worker_cpu_ms = cpu_ms / static_cast<double>(steps);
}

// Compute and communication of a run's steady steps.
struct StepStats {
  std::vector<double> before_push;  // b_i
  double ahead = 0, gap = 0, compute = 0, comm = 0;
  double wait = 0;  // -1: a step log without the column (an older launcher's)
  std::vector<std::pair<int64_t, double>> leads;  // PlanCalibration::backward_leads
};

// The chief's backward_leads over its mean b (summary.json), offsets
// ascending; empty where the run recorded none.
std::vector<std::pair<int64_t, double>> LeadFractions(const proto::RunSummary& summary) {
  const proto::StepPhases& p = summary.chief_step_ms();
  const double b = p.compute_ms() - p.ahead_ms();
  std::vector<std::pair<int64_t, double>> leads;
  if (!(b > 0)) return leads;
  for (const proto::BackwardLead& l : p.backward_leads()) {
    // Offsets are whole floats of the flat vector (a double in the JSON).
    if (!(l.begin() >= 0 && l.begin() < 9e15 && l.lead_ms() >= 0)) continue;
    leads.emplace_back(static_cast<int64_t>(l.begin()), std::min(1.0, l.lead_ms() / b));
  }
  std::sort(leads.begin(), leads.end());
  return leads;
}

StepStats ReadStepStats(const RunRecord& record) {
  const auto [from, to] = SteadyWindow(record);
  StepStats st;
  std::vector<double> gaps;
  for (const std::vector<StepRow>& rows : record.steps) {
    for (size_t i = 1; i < rows.size(); ++i) {
      const StepRow& s = rows[i];
      if (s.end_unix_s <= from || s.end_unix_s > to) continue;
      const double a = std::max(0.0, s.ahead_ms);  // -1: a version without the column
      st.before_push.push_back(std::max(0.0, s.compute_ms - a));
      st.compute += s.compute_ms;
      st.comm += s.comm_ms;
      if (s.wait_ms < 0 || st.wait < 0) {
        st.wait = -1;
      } else {
        st.wait += s.wait_ms;
      }
      st.ahead += a;
      gaps.push_back((s.end_unix_s - rows[i - 1].end_unix_s) * 1e3 - s.compute_ms - s.comm_ms);
    }
  }
  const double n = static_cast<double>(st.before_push.size());
  if (n > 0) {
    st.compute /= n;
    st.comm /= n;
    if (st.wait > 0) st.wait /= n;
    st.ahead /= n;
  } else {
    st.wait = -1;  // no steady step: nothing said of the barrier
  }
  // The median: a gap that holds an evaluation is not a step's.
  st.gap = std::max(0.0, Median(gaps));
  return st;
}

// The compute of `runs` pooled: b_i of them all, a weighted by steps, the
// median gap. Each run's b_i and a are first scaled to the runs' median
// speed (the median of their median b_i): a shared host's speed drifts, and
// one calibration run that drew a slow (or fast) minute would otherwise
// move every prediction by its share of the steps. Each run keeps its own
// spread (its stragglers), at the typical speed.
StepStats Pooled(const std::vector<const CalibrationRun*>& runs) {
  std::vector<StepStats> each;
  std::vector<double> own;  // [run] its median b_i (0: no steps)
  std::vector<double> medians;
  for (const CalibrationRun* run : runs) {
    each.push_back(ReadStepStats(run->record));
    own.push_back(Median(each.back().before_push));
    if (!each.back().before_push.empty()) medians.push_back(own.back());
  }
  const double typical = Median(medians);
  StepStats pooled;
  std::vector<double> gaps;
  for (size_t r = 0; r < each.size(); ++r) {
    const StepStats& st = each[r];
    const double scale = own[r] > 0 && typical > 0 ? typical / own[r] : 1.0;
    for (double b : st.before_push) pooled.before_push.push_back(b * scale);
    pooled.ahead += st.ahead * scale * static_cast<double>(st.before_push.size());
    gaps.push_back(st.gap);
  }
  if (!pooled.before_push.empty()) pooled.ahead /= static_cast<double>(pooled.before_push.size());
  pooled.gap = Median(gaps);
  // The leads: each offset's mean fraction over the runs that recorded it.
  absl::btree_map<int64_t, std::pair<double, int>> leads;
  for (const CalibrationRun* run : runs) {
    for (const auto& [begin, f] : LeadFractions(run->record.summary)) {
      leads[begin].first += f;
      ++leads[begin].second;
    }
  }
  for (const auto& [begin, sum] : leads) pooled.leads.emplace_back(begin, sum.first / sum.second);
  std::sort(pooled.before_push.begin(), pooled.before_push.end());
  return pooled;
}

void SetCompute(const StepStats& st, PlanCalibration* cal) {
  cal->before_push_ms = st.before_push;
  cal->ahead_ms = st.ahead;
  cal->gap_ms = st.gap;
  cal->backward_leads = st.leads;
}

bool Uncrowded(const CalibrationRun& r) { return r.cell.workers + r.cell.ps <= r.host_cores; }

double WorkerBytes(const CalibrationRun& r) {
  double b = 0;
  for (size_t k = 0; k < r.cell.push_bytes.size(); ++k) b += r.cell.push_bytes[k] + r.cell.pull_bytes[k];
  return b;
}

// The largest request's bytes: the push and the pull of one shard.
double RequestBytes(const CalibrationRun& r) {
  double b = 0;
  for (size_t k = 0; k < r.cell.push_bytes.size(); ++k) b = std::max(b, r.cell.push_bytes[k] + r.cell.pull_bytes[k]);
  return b;
}

// The ps's CPU per request and a worker's beyond its compute, from
// task_cpu.csv of `costed`; then lat, what the model leaves of each
// uncrowded run's step time.
void CostsFromCpu(const std::vector<const CalibrationRun*>& costed, PlanCalibration* cal,
                  std::vector<std::string>* notes) {
  std::vector<std::pair<double, double>> ps_points, cpu_points;
  for (const CalibrationRun* r : costed) {
    for (int k = 0; k < r->cell.ps; ++k) {
      ps_points.push_back({r->cell.push_bytes[k] + r->cell.pull_bytes[k], r->ps_cpu_ms_per_request[k]});
    }
    if (Uncrowded(*r)) cpu_points.push_back({WorkerBytes(*r), std::max(0.0, r->worker_cpu_ms - r->compute_ms)});
  }
  cal->ps_request = FitLinearCost(ps_points);
  cal->worker_comm_cpu = cpu_points.empty() ? LinearCost{} : FitLinearCost(cpu_points);
  if (cpu_points.empty()) notes->push_back("No calibration run had a core per task: a worker's CPU for its pushes and pulls is taken as 0.");
  std::vector<std::pair<double, double>> lat_points;
  for (const CalibrationRun* r : costed) {
    if (!Uncrowded(*r) || !(r->steady_images_per_second > 0)) continue;
    PlanCalibration own = *cal;
    SetCompute(Pooled({r}), &own);
    own.batch_size = r->record.summary.batch_size();
    own.latency = {};
    const PlanPrediction p = Predict(own, r->cell);
    if (p.split.bound_ms > 0) continue;  // a resource set its time, not its latency
    const double measured_ms = r->cell.workers * own.batch_size / r->steady_images_per_second * 1e3;
    lat_points.push_back({RequestBytes(*r), std::max(0.0, measured_ms - p.step_ms)});
  }
  if (lat_points.empty()) {
    notes->push_back("No calibration run's step time was its latency alone (each was bound by a resource): "
                     "the latency beyond the ps's work and the links is taken as 0.");
  } else {
    cal->latency = FitLinearCost(lat_points);
  }
  const bool one_size = std::all_of(ps_points.begin(), ps_points.end(), [&](const auto& p) {
    return std::fabs(p.first - ps_points.front().first) <= 1e-6 * ps_points.front().first;
  });
  if (one_size) {
    notes->push_back("Every calibration request had the same size: the ps's cost is taken as per byte only "
                     "(calibrate with another model or ps count to measure its fixed cost).");
  }
}

// Without task_cpu.csv: s and lat from the step logs of the 1-worker runs
// without a link limit, whose push/pull time beyond the forward ahead is
// lat + s (launcher/plan/plan_model.h), `share` of it the ps's.
absl::Status CostsFromSteps(const std::vector<CalibrationRun>& runs, bool insecure, double share,
                            PlanCalibration* cal, std::vector<std::string>* notes) {
  std::vector<std::pair<double, double>> points;
  for (const CalibrationRun& r : runs) {
    if (r.insecure != insecure || r.cell.workers != 1 || r.link_bytes_per_s > 0 || !Uncrowded(r)) continue;
    points.push_back({RequestBytes(r), r.comm_ms});
  }
  const char* security = insecure ? "with --insecure" : "with encryption (CURVE)";
  if (points.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no calibration run ", security, " recorded its tasks' CPU (task_cpu.csv, written by `pstrain launch`), "
        "and none ran 1 worker without a link limit, whose step log would give the costs instead: give one"));
  }
  const LinearCost comm = FitLinearCost(points);
  cal->ps_request = {share * comm.fixed_ms, share * comm.per_byte_ms};
  cal->latency = {(1 - share) * comm.fixed_ms, (1 - share) * comm.per_byte_ms};
  cal->worker_comm_cpu = {0, share * comm.per_byte_ms};
  notes->push_back(absl::StrFormat(
      "No calibration run %s recorded its tasks' CPU (task_cpu.csv): the costs come from the step logs of "
      "its %zu 1-worker run(s) without a link limit, whose push/pull took %.3f ms + %.3f ms per MB of the "
      "request beyond what the forward ahead hid. The ps's share of it (--ps_share) is %.2f: its service, "
      "which the other workers' requests queue for; the rest is the worker's latency, and a worker's CPU "
      "per MB is the ps's.",
      security, points.size(), comm.fixed_ms, comm.per_byte_ms * 1e6, share));
  return absl::OkStatus();
}

// e: a worker's CPU per step where workers shared cores, against alone:
// the growth over the additional workers per core, fitted through the
// origin over the runs (a run with few more workers than cores, whose
// growth is mostly noise, weighs little).
void SetSharingCost(const std::vector<const CalibrationRun*>& of_model, const std::string& model, bool insecure,
                    PlanCalibration* cal, std::vector<std::string>* notes) {
  std::vector<std::pair<double, double>> sharing;  // (additional workers per core, growth)
  for (const CalibrationRun* r : of_model) {
    const double per_core = static_cast<double>(r->cell.workers) / r->host_cores;
    if (per_core <= 1 || r->insecure != insecure || r->worker_cpu_ms < 0) continue;
    const double alone = cal->mean_before_push_ms() + cal->ahead_ms + cal->worker_comm_cpu.At(WorkerBytes(*r));
    if (alone > 0) sharing.emplace_back(per_core - 1, r->worker_cpu_ms / alone - 1);
  }
  if (sharing.empty()) {
    notes->push_back(absl::StrCat("No calibration run of ", model, " had more workers than cores: workers "
                                  "sharing a core are taken to slow each other by the sharing alone (no cost "
                                  "of caches or switches)."));
    return;
  }
  double xy = 0, xx = 0;
  for (const auto& [x, y] : sharing) {
    xy += x * y;
    xx += x * x;
  }
  cal->sharing_cost = std::max(0.0, xy / xx);
  notes->push_back(absl::StrFormat("Sharing a core (%s): a worker's CPU per step grows by %.1f%% per "
                                   "additional worker on its core (from %zu run(s) with more workers than "
                                   "cores).",
                                   model, 100 * cal->sharing_cost, sharing.size()));
}

// sigma: how evenly the scheduler spread a sync round's computes, from the
// runs of the model without a link limit whose workers outnumbered the
// cores unevenly (after SetSharingCost), but those the compute alone came
// from (`baseline`). What a round waits for is its
// slowest worker's compute: each worker's compute_ms plus the time the ps
// held its push for the others (wait_ms) is that, where they start
// together. A link-limited round starts its workers apart (their replies
// end at different times), which says less.
void SetCoreSpread(const std::vector<const CalibrationRun*>& of_model,
                   const std::vector<const CalibrationRun*>& baseline, const std::string& model,
                   bool insecure, PlanCalibration* cal, std::vector<std::string>* notes) {
  std::vector<double> spreads;
  const double alone = cal->mean_before_push_ms() + cal->ahead_ms;
  for (const CalibrationRun* r : of_model) {
    const int w = r->cell.workers, h = r->host_cores;
    if (!r->sync || r->insecure != insecure || r->link_bytes_per_s > 0 || w <= h || w % h == 0 ||
        !(alone > 0) || !(r->compute_ms > 0) ||
        std::find(baseline.begin(), baseline.end(), r) != baseline.end()) {
      continue;
    }
    const double per_core = static_cast<double>(w) / h;
    const double most = (w + h - 1) / h;
    const double slowest = r->compute_ms + std::max(0.0, r->wait_ms);  // -1: no wait_ms column
    const double k = slowest / (alone * (1 + cal->sharing_cost * (per_core - 1)));
    spreads.push_back(std::clamp((most - k) / (most - per_core), 0.0, 1.0));
  }
  if (spreads.empty()) {
    notes->push_back(absl::StrCat(
        "No sync calibration run of ", model,
        " without a link limit had workers outnumbering the cores unevenly (such as 3 on 2): a "
        "round's workers sharing cores are taken to compute ceil(W / H) to the busiest core; such "
        "a run measures how evenly the scheduler spreads them."));
    return;
  }
  cal->core_spread = Mean(spreads);
  notes->push_back(absl::StrFormat(
      "Workers outnumbering cores (%s): a round's computes spread %.0f%% of the way from "
      "ceil(W / H) to W / H a core (from %zu sync run(s) without a link limit).",
      model, 100 * cal->core_spread, spreads.size()));
}

// q: what a full host adds to a worker's compute, per worker on its core
// and per H_P of the run's ps (after SetSharingCost). Runs with as many
// workers as cores measure it directly: their compute beyond the
// calibration's alone, over H_P. Runs with more workers than cores give it
// only through the CPU of k workers on a core, which overstates their
// compute when it holds waits (a forward's row pulls: one worker waits
// while another computes); they are used when no run has as many workers
// as cores. The runs the compute alone came from (`baseline`) say nothing
// of it. Then rho (plan_model.h), from the runs with as many workers as
// cores.
void SetBusyCoreWait(const std::vector<const CalibrationRun*>& of_model,
                     const std::vector<const CalibrationRun*>& baseline, const std::string& model,
                     bool insecure, PlanCalibration* cal, std::vector<std::string>* notes) {
  std::vector<const CalibrationRun*> full_runs;
  std::vector<double> crowded;
  const double alone = cal->mean_before_push_ms() + cal->ahead_ms;
  for (const CalibrationRun* r : of_model) {
    if (r->insecure != insecure || r->cell.workers < r->host_cores ||
        std::find(baseline.begin(), baseline.end(), r) != baseline.end()) {
      continue;
    }
    if (r->cell.workers == r->host_cores) {
      full_runs.push_back(r);
      continue;
    }
    const double per_core = static_cast<double>(r->cell.workers) / r->host_cores;
    const double k = WorkersPerCore(*cal, r->cell.workers, r->host_cores);
    const double cpu = k * alone * (1 + cal->sharing_cost * (per_core - 1));
    crowded.push_back(std::max(0.0, r->compute_ms - cpu) / (k * Harmonic(r->cell.ps)));
  }
  std::vector<double> waits;
  for (const CalibrationRun* r : full_runs) {
    waits.push_back(std::max(0.0, r->compute_ms - alone) / Harmonic(r->cell.ps));
  }
  if (waits.empty()) waits = crowded;
  if (waits.empty()) {
    notes->push_back(absl::StrCat(
        "No calibration run of ", model,
        " (but those its compute alone came from) had a worker on every core: what a full host "
        "adds to a step's compute is taken as nothing (a forward that asks the ps for rows, such "
        "as a script's embedding pulls, waits once every core has a worker: calibrate with a run "
        "of as many workers as cores)."));
    return;
  }
  cal->busy_core_wait_ms = Mean(waits);
  notes->push_back(
      absl::StrFormat("A full host (%s): a step's compute waits %.2f ms more per worker on its "
                      "core (and H_P with P ps) than its CPU takes, once every core has a worker "
                      "(from %zu run(s) with %s cores).",
                      model, cal->busy_core_wait_ms, waits.size(),
                      full_runs.empty() ? "more workers than" : "as many workers as"));
  // rho: of what the slowest worker's wait adds to a sync round when the
  // waits are independent and memoryless, the share the runs with as many
  // workers as cores waited at the barrier (wait_ms) beyond the spread of
  // b. Each worker's wait is the last of its P ps' (q H_P), so the slowest
  // of W is the last of W P: q (H_WP - H_P) beyond the mean.
  std::vector<double> shares;
  for (const CalibrationRun* r : full_runs) {
    if (!r->sync || r->wait_ms < 0 || r->link_bytes_per_s > 0) continue;
    const int w = r->cell.workers, p = r->cell.ps;
    const double spread = OrderStatisticMean(cal->before_push_ms, w) - cal->mean_before_push_ms();
    const double independent = cal->busy_core_wait_ms * (Harmonic(w * p) - Harmonic(p));
    // A wait this small against the compute says nothing of its shape.
    if (independent < std::max(0.05, 0.01 * alone)) continue;
    shares.push_back(std::clamp((r->wait_ms - spread) / independent, 0.0, 1.0));
  }
  if (shares.empty()) {
    if (cal->busy_core_wait_ms > 0) {
      notes->push_back(absl::StrFormat(
          "A sync barrier on a full host (%s): no calibration run says how much of the slowest "
          "worker's wait a sync round waits for (a sync run with as many workers as cores, no link "
          "limit, a step log with wait_ms, and a wait of at least 0.05 ms and 1%% of the compute); "
          "taken as all of it, as for independent waits.",
          model));
    }
    return;
  }
  cal->barrier_share = Mean(shares);
  notes->push_back(absl::StrFormat(
      "A sync barrier on a full host (%s): the runs with as many workers as cores waited at it "
      "%.0f%% of what the slowest worker's wait adds when the waits are independent (less where "
      "the compute ends at a barrier of its own, such as the workers' average in .grad).",
      model, 100 * cal->barrier_share));
}

// "pytorch (examples/pytorch/dlrm.py)": the script a launcher's command
// line ran (its first argument ending in .py after "--"), or its command.
std::string ScriptModelName(const std::string& command) {
  const size_t dashes = command.find(" -- ");
  std::string script = dashes == std::string::npos ? command : command.substr(dashes + 4);
  for (absl::string_view word : absl::StrSplit(script, ' ', absl::SkipEmpty())) {
    if (absl::EndsWith(word, ".py")) return absl::StrCat(kScriptModel, " (", word, ")");
  }
  return absl::StrCat(kScriptModel, " (", script, ")");
}

// A script's job: its name, and the bytes a worker's step moved, from what
// its ps tasks received and sent over the workers' steps.
absl::Status MeasuredShape(const std::string& run_dir, const RunRecord& record, ModelShape* shape) {
  const proto::RunSummary& summary = record.summary;
  double received = 0, sent = 0;
  for (const proto::ShardSummary& s : summary.shards()) {
    received += static_cast<double>(s.bytes_received());
    sent += static_cast<double>(s.bytes_sent());
  }
  int64_t steps = 0;
  for (const std::vector<StepRow>& rows : record.steps) steps += static_cast<int64_t>(rows.size());
  if (summary.shards_size() != summary.num_ps() || received <= 0 || sent <= 0 || steps <= 0) {
    return Unusable(run_dir,
                    "a script's run whose summary.json does not say the bytes its ps tasks "
                    "received and sent (a run of an older launcher?)");
  }
  shape->model = ScriptModelName(summary.command());
  shape->step_push_bytes = received / static_cast<double>(steps);
  shape->step_pull_bytes = sent / static_cast<double>(steps);
  return absl::OkStatus();
}

}  // namespace

absl::Status StepBytes(const ModelShape& shape, int num_ps, std::vector<double>* push,
                       std::vector<double>* pull, std::vector<int64_t>* begins) {
  begins->clear();
  if (shape.step_push_bytes > 0 && shape.params == 0) {
    if (num_ps < 1) return absl::InvalidArgumentError("no ps");
    push->assign(static_cast<size_t>(num_ps), shape.step_push_bytes / num_ps);
    pull->assign(static_cast<size_t>(num_ps), shape.step_pull_bytes / num_ps);
    return absl::OkStatus();
  }
  std::vector<TensorSlot> tensors;
  std::string name = shape.model;
  if (shape.params > 0) {
    tensors.push_back({"params", shape.params});
    name = absl::StrCat("params:", shape.params);
  } else {
    auto net = models::GetNetSpec(shape.model);
    if (!net.ok()) return absl::InvalidArgumentError(net.status().message());
    ASSIGN_OR_RETURN(const std::vector<models::ParamSpec> specs, models::NetParamSpecs(*net));
    for (const models::ParamSpec& s : specs) tensors.push_back({s.name, s.size});
  }
  ASSIGN_OR_RETURN(const ShardStrategy strategy, ParseShardStrategy(shape.shard_strategy));
  ASSIGN_OR_RETURN(const ShardPlan plan, ShardPlan::Create(name, tensors, num_ps, strategy));
  ASSIGN_OR_RETURN(const WireEncoding wire, ParseWireEncoding(shape.wire));
  push->clear();
  pull->clear();
  for (const ShardRange& r : plan.ranges()) {
    const size_t n = static_cast<size_t>(r.size());
    const uint64_t k = wire.kind == proto::TOPK ? TopKCount(wire.topk_ratio, n) : 0;
    push->push_back(static_cast<double>(EncodedBytes(wire.kind, n, k)));
    pull->push_back(4.0 * static_cast<double>(n));
    if (shape.params == 0) begins->push_back(r.begin);
  }
  return absl::OkStatus();
}

absl::StatusOr<CalibrationRun> ReadCalibrationRun(const std::string& run_dir, int default_host_cores) {
  CalibrationRun run;
  run.run_dir = run_dir;
  if (absl::Status s = ReadRunDir(run_dir, &run.record); !s.ok()) {
    return Unusable(run_dir, absl::StrCat("not the directory of a finished run: ", s.message()));
  }
  const proto::RunSummary& summary = run.record.summary;
  if (summary.mode() != "sync" && summary.mode() != "async") {
    return Unusable(run_dir, absl::StrCat("a ", summary.mode(), " run; plan calibrates from sync and async runs"));
  }
  if (summary.backup_workers() > 0) return Unusable(run_dir, "a run with backup workers");
  for (const std::vector<StepRow>& rows : run.record.steps) {
    if (rows.size() < 10) return Unusable(run_dir, "fewer than 10 steps per worker: too few for a steady rate");
  }
  run.sync = summary.mode() == "sync";
  run.insecure = summary.insecure();
  run.link_rate = summary.link_rate();
  if (!run.link_rate.empty()) {
    ASSIGN_OR_RETURN(run.link_bytes_per_s, RateBytesPerSecond(run.link_rate));
    run.link = LinkKind::kNetns;  // --link_rate is --isolate=netns's
  }
  run.host_cores = summary.host_cores() > 0 ? summary.host_cores() : default_host_cores;
  run.shape = {summary.model(), 0, summary.wire().empty() ? "f32" : summary.wire(),
               summary.shard_strategy().empty() ? "balanced" : summary.shard_strategy()};
  if (summary.model() == kScriptModel)
    RETURN_IF_ERROR(MeasuredShape(run_dir, run.record, &run.shape));
  run.cell = {summary.num_workers(),
              summary.num_ps(),
              run.sync,
              run.link_bytes_per_s,
              run.link,
              Placement::kOneHost,
              run.host_cores,
              {},
              {},
              {}};
  RETURN_IF_ERROR(StepBytes(run.shape, run.cell.ps, &run.cell.push_bytes, &run.cell.pull_bytes,
                            &run.cell.shard_begin));
  run.steady_images_per_second = SteadyImagesPerSecond(run.record);
  const StepStats st = ReadStepStats(run.record);
  run.compute_ms = st.compute;
  run.comm_ms = st.comm;
  run.wait_ms = st.wait;
  auto cpu = ReadTaskCpu(run_dir);
  if (cpu.ok()) ReadCpu(*cpu, &run);
  if (!cpu.ok() && !absl::IsNotFound(cpu.status())) return Unusable(run_dir, cpu.status().message());
  return run;
}

absl::StatusOr<PlanCalibration> Calibrate(const std::vector<CalibrationRun>& runs, const std::string& model,
                                          bool insecure, double ps_share, std::vector<std::string>* notes) {
  std::vector<const CalibrationRun*> costed;  // the security asked for, with task_cpu.csv
  std::vector<const CalibrationRun*> of_model;
  for (const CalibrationRun& r : runs) {
    if (r.insecure == insecure && !r.ps_cpu_ms_per_request.empty() && r.worker_cpu_ms >= 0) costed.push_back(&r);
    if (r.shape.model == model) of_model.push_back(&r);
  }
  if (of_model.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no calibration run trained ", model,
                                                   ": give a run of it (--calibrate), or --model"));
  }
  // The compute: runs of the model in which every task had a core.
  std::vector<const CalibrationRun*> compute_runs;
  for (const CalibrationRun* r : of_model) {
    if (Uncrowded(*r)) compute_runs.push_back(r);
  }
  if (compute_runs.empty()) {
    int fewest = of_model.front()->cell.workers;
    for (const CalibrationRun* r : of_model) fewest = std::min(fewest, r->cell.workers);
    for (const CalibrationRun* r : of_model) {
      if (r->cell.workers == fewest) compute_runs.push_back(r);
    }
    notes->push_back(absl::StrFormat(
        "Every run of %s had more tasks than its host had cores: its compute is taken from the runs with "
        "%d worker(s), where the cores were shared.", model, fewest));
  }
  PlanCalibration cal;
  SetCompute(Pooled(compute_runs), &cal);
  cal.batch_size = compute_runs.front()->record.summary.batch_size();
  for (const CalibrationRun* r : compute_runs) {
    if (r->record.summary.batch_size() != cal.batch_size) {
      return absl::InvalidArgumentError(absl::StrCat("the calibration runs of ", model,
                                                     " differ in --batch_size: give runs of one batch size"));
    }
  }
  if (costed.empty()) {
    RETURN_IF_ERROR(CostsFromSteps(runs, insecure, ps_share, &cal, notes));
  } else {
    CostsFromCpu(costed, &cal, notes);
  }
  SetSharingCost(of_model, model, insecure, &cal, notes);
  SetCoreSpread(of_model, compute_runs, model, insecure, &cal, notes);
  SetBusyCoreWait(of_model, compute_runs, model, insecure, &cal, notes);
  return cal;
}

}  // namespace pstrain

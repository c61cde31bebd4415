#include "launcher/plan/plan_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "glog/logging.h"

namespace pstrain {
namespace {

// TCP over IPv4 over Ethernet with a 1500-byte MTU: 1448 bytes of payload
// (timestamps on) in a 1514-byte frame, which is what a link (and tc)
// counts.
constexpr double kFrameBytesPerPayloadByte = 1514.0 / 1448.0;

// The ms a link takes to carry a burst of B payload bytes (0 without a link
// limit). The netns bucket is full at a burst's start: when a step is
// longer than the link needs for its bytes (T > B / R) the link earns more
// tokens than it spends, up to the bucket; when it is not, the rate bound
// (RateMs) sets the step instead.
double LinkMs(const PlanCell& cell, double bytes) {
  if (cell.link_bytes_per_s <= 0) return 0;
  double b = bytes * kFrameBytesPerPayloadByte;
  if (cell.link == LinkKind::kNetns) b -= std::max(64.0 * 1024, cell.link_bytes_per_s / 100);
  return std::max(0.0, b) / cell.link_bytes_per_s * 1e3;
}

// Plain rate, no bucket: what a link can carry over a whole round.
double RateMs(const PlanCell& cell, double bytes) {
  return cell.link_bytes_per_s > 0 ? bytes * kFrameBytesPerPayloadByte / cell.link_bytes_per_s * 1e3 : 0;
}

double Sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

// What a cell's shape costs, before the mode decides how it adds up.
struct Costs {
  double k = 1;                   // workers per core
  double stretch = 1;             // of CPU times, cores shared
  double b = 0, a = 0;            // compute before the push, and ahead
  double worker_bytes = 0;        // sum_k (u_k + d_k)
  std::vector<double> s;          // [ps] s_k
  std::vector<double> s_push;     // [ps] of s_k, the push's part (the rest is the reply's)
  double lat = 0, w = 0;
  double wait = 0;                // k q H_P: a full host's wait in the compute
  bool ps_own_core = false;       // no worker needs the ps's core (it works while they compute)
};

Costs CostsOf(const PlanCalibration& cal, const PlanCell& cell) {
  Costs c;
  if (cell.placement == Placement::kOneHost) {
    c.k = WorkersPerCore(cal, cell.workers, cell.host_cores);
    const double per_core = static_cast<double>(cell.workers) / cell.host_cores;
    c.stretch = 1 + cal.sharing_cost * std::max(0.0, per_core - 1);
    if (cell.workers >= cell.host_cores) c.wait = c.k * cal.busy_core_wait_ms * Harmonic(cell.ps);
  }
  c.ps_own_core = cell.placement == Placement::kHostPerTask || cell.workers + cell.ps <= cell.host_cores;
  c.b = cal.mean_before_push_ms() * c.stretch;
  c.a = cal.ahead_ms * c.stretch;
  c.worker_bytes = Sum(cell.push_bytes) + Sum(cell.pull_bytes);
  double request_bytes = 0;  // the largest request's
  for (int j = 0; j < cell.ps; ++j) {
    const double u = cell.push_bytes[j], d = cell.pull_bytes[j];
    request_bytes = std::max(request_bytes, u + d);
    c.s.push_back(cal.ps_request.At(u + d) * c.stretch);
    c.s_push.push_back((cal.ps_request.fixed_ms / 2 + cal.ps_request.per_byte_ms * u) * c.stretch);
  }
  c.lat = cal.latency.At(request_bytes);
  c.w = cal.worker_comm_cpu.At(c.worker_bytes) * c.stretch;
  return c;
}

// up_k of the header: when each shard's push has crossed the worker's own
// link, in ms from the end of its compute before the push, whose wall time
// is `compute_ms`.
std::vector<double> PushEnds(const PlanCalibration& cal, const PlanCell& cell, double compute_ms) {
  const size_t P = cell.push_bytes.size();
  std::vector<double> lead(P, 0.0);  // how long before the end shard k leaves
  // With one ps the worker sends its one shard at the end.
  if (P > 1 && cell.shard_begin.size() == P) {
    for (size_t k = 0; k < P; ++k) lead[k] = cal.LeadFraction(cell.shard_begin[k]) * compute_ms;
  }
  std::vector<size_t> order(P);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return lead[x] > lead[y]; });
  std::vector<double> end(P, 0.0);
  double free_at = -std::numeric_limits<double>::infinity();  // the link's
  for (size_t i = 0; i < P;) {
    size_t j = i;  // [i, j): the shards that leave together
    double bytes = 0;
    for (; j < P && lead[order[j]] == lead[order[i]]; ++j) bytes += cell.push_bytes[order[j]];
    const double leaves = -lead[order[i]];
    // A link idle before the push has its bucket; a busy one, its rate.
    free_at = leaves >= free_at ? leaves + LinkMs(cell, bytes) : free_at + RateMs(cell, bytes);
    for (; i < j; ++i) end[order[i]] = free_at;
  }
  return end;
}

struct Bound {
  double ms = 0;
  std::string name;
};

// The largest demand of a round (W steps) on one resource, and which.
Bound ResourceBound(const PlanCell& cell, const Costs& c) {
  const double W = cell.workers;
  Bound worst;
  auto consider = [&](double ms, const char* name) {
    if (ms > worst.ms) worst = {ms, name};
  };
  if (cell.placement == Placement::kOneHost) {
    consider(W * (c.b + c.a + c.w + Sum(c.s)) / cell.host_cores, "host CPU");
  }
  for (int j = 0; j < cell.ps; ++j) {
    consider(W * c.s[j], "ps core");
    consider(RateMs(cell, W * cell.pull_bytes[j]), "ps link");
    if (cell.link == LinkKind::kNic) consider(RateMs(cell, W * cell.push_bytes[j]), "ps link");
  }
  consider(RateMs(cell, Sum(cell.push_bytes)), "worker link");
  if (cell.link == LinkKind::kNic) consider(RateMs(cell, Sum(cell.pull_bytes)), "worker link");
  return worst;
}

void Utilisations(const PlanCell& cell, const Costs& c, double round_ms, PlanPrediction* p) {
  const double W = cell.workers;
  if (cell.placement == Placement::kOneHost) {
    p->host_cpu_utilisation = W * (c.b + c.a + c.w + Sum(c.s)) / (cell.host_cores * round_ms);
  }
  for (int j = 0; j < cell.ps; ++j) {
    p->ps_core_utilisation.push_back(W * c.s[j] / round_ms);
    double link = RateMs(cell, W * cell.pull_bytes[j]);
    if (cell.link == LinkKind::kNic) link = std::max(link, RateMs(cell, W * cell.push_bytes[j]));
    p->ps_link_utilisation.push_back(link / round_ms);
  }
}

// One ps's part of a sync round: its W pushes (each through its ingress
// and its core), then, the version complete, its W replies (its core and
// its egress), each side a flow shop: one request's stages and W - 1 times
// the slowest. The replies end together (the I/O thread interleaves their
// CURVE pieces; TCP flows share a link), so every worker starts its next
// step at once and the next pushes do not overlap these replies. A ps with
// a core of its own serves the faster workers' pushes while the slowest
// computes (`early`: M_W - b).
struct SyncPs {
  double ps = 0;     // its core's part (the first request's, and the queue where the core is slowest)
  double links = 0;  // the queues where a link is slowest
  double last = 0;   // the last reply's transfer
  double total() const { return ps + links + last; }
};

SyncPs SyncPsTime(const PlanCell& cell, const Costs& c, int j, double early) {
  const double W = cell.workers;
  const double in = cell.link == LinkKind::kNic ? RateMs(cell, cell.push_bytes[j]) : 0;
  const double out = LinkMs(cell, W * cell.pull_bytes[j]) / W;
  const double s_in = c.s_push[j], s_out = c.s[j] - s_in;
  const double push_queue = std::max(0.0, (W - 1) * std::max(in, s_in) - early);
  const double reply_queue = (W - 1) * std::max(s_out, out);
  SyncPs t;
  t.ps = s_in + s_out + (in > s_in ? 0 : push_queue) + (out > s_out ? 0 : reply_queue);
  t.links = (in > s_in ? push_queue : 0) + (out > s_out ? reply_queue : 0);
  t.last = out;
  return t;
}

// phase1 + phase2 + g of the header, with its split.
double SyncRoundMs(const PlanCalibration& cal, const PlanCell& cell, const Costs& c, PlanSplit* split) {
  const double m_w = OrderStatisticMean(cal.before_push_ms, cell.workers) * c.stretch;
  // Each worker's wait is the last of its P ps' memoryless waits (k q
  // H_P); the slowest worker's, the last of W P: k q H_WP. The barrier
  // waits for it (rho of what it adds, where the compute ends at a barrier
  // of its own).
  const double slowest_wait =
      c.wait > 0 ? c.wait + cal.barrier_share * c.k * cal.busy_core_wait_ms *
                                (Harmonic(cell.workers * cell.ps) - Harmonic(cell.ps))
                 : 0;
  const double compute = std::max(m_w, c.k * c.b);
  const double phase1 = compute + slowest_wait;
  const std::vector<double> up = PushEnds(cal, cell, compute);  // the worker's own pushes
  const double early = c.ps_own_core ? std::max(0.0, m_w - c.b) : 0;
  const double ahead = c.k * c.a;
  // The ps that ends last: its end from the end of the compute, and its
  // core's part of that.
  double after = 0;
  double ps = 0;
  for (int j = 0; j < cell.ps; ++j) {
    const SyncPs t = SyncPsTime(cell, c, j, early);
    double last = t.last;
    if (cell.link == LinkKind::kNic) last = std::max(last, RateMs(cell, Sum(cell.pull_bytes)));
    // A ps whose core a worker needs serves once the compute ends (as
    // `early` has it); its shard's push may have crossed the link before.
    const double served = (c.ps_own_core ? up[j] : std::max(0.0, up[j])) + t.ps + t.links;
    const double ends = std::max(served + last, std::max(0.0, served) + ahead);
    if (j == 0 || ends > after) {
      after = ends;
      ps = t.ps;
    }
  }
  split->compute_ms = (c.b + c.a) / c.stretch;
  split->barrier_ms = std::max(0.0, m_w - c.b) + slowest_wait - c.wait;
  split->sharing_ms = phase1 - std::max(m_w, c.b) - (slowest_wait - c.wait) + (c.k - 1) * c.a +
                      (c.b + c.a) * (1 - 1 / c.stretch);
  split->ps_ms = std::min(ps, after - ahead);
  split->transfer_ms = after - ahead - split->ps_ms;
  split->other_ms = c.lat + cal.gap_ms;
  return phase1 + c.lat + after + cal.gap_ms;
}

// One worker's step, alone, then queued behind the other W - 1 workers at
// each shared server (each ps's core and link) by Bard and Schweitzer's
// approximate mean value analysis: a request finds (W - 1) D / T of the
// others' work there, so T = T0 + Q / T with Q = (W - 1) sum_r D_r^2.
double AsyncStepMs(const PlanCalibration& cal, const PlanCell& cell, const Costs& c, PlanSplit* split) {
  double q_ps = 0, q_link = 0;
  const double others = cell.workers - 1;
  const std::vector<double> up = PushEnds(cal, cell, c.b);
  // The shard whose reply ends last: its end from the end of b, and its
  // ps's part of that.
  double after = 0;
  double ps = 0;
  for (int j = 0; j < cell.ps; ++j) {
    q_ps += others * c.s[j] * c.s[j];
    q_link += others * std::pow(RateMs(cell, cell.pull_bytes[j]), 2);
    if (cell.link == LinkKind::kNic) q_link += others * std::pow(RateMs(cell, cell.push_bytes[j]), 2);
    double down = LinkMs(cell, cell.pull_bytes[j]);
    if (cell.link == LinkKind::kNic) down = std::max(down, RateMs(cell, Sum(cell.pull_bytes)));
    const double served = (c.ps_own_core ? up[j] : std::max(0.0, up[j])) + c.s[j];
    const double ends = std::max(served + down, std::max(0.0, served) + c.a);
    if (j == 0 || ends > after) {
      after = ends;
      ps = c.s[j];
    }
  }
  const double alone = c.b + c.wait + c.lat + after + cal.gap_ms;
  const double step = (alone + std::sqrt(alone * alone + 4 * (q_ps + q_link))) / 2;
  split->compute_ms = (c.b + c.a) / c.stretch;
  split->sharing_ms = (c.b + c.a) * (1 - 1 / c.stretch) + c.wait;
  const double ps_part = std::min(ps, after - c.a);
  split->transfer_ms = after - c.a - ps_part + q_link / step;
  split->ps_ms = ps_part + q_ps / step;
  split->other_ms = c.lat + cal.gap_ms;
  return step;
}

// What a step that no resource saturates waits for most: the compute
// (with the barrier and the sharing of cores), the ps's service (in sync,
// every worker's request one after another) or the links.
const char* PathBound(const PlanSplit& s) {
  const double compute = s.compute_ms + s.barrier_ms + s.sharing_ms;
  if (s.ps_ms > compute && s.ps_ms >= s.transfer_ms) return "ps core";
  if (s.transfer_ms > compute) return "links";
  return "compute";
}

}  // namespace

LinearCost FitLinearCost(const std::vector<std::pair<double, double>>& points) {
  CHECK(!points.empty());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double n = static_cast<double>(points.size());
  const double var = sxx - sx * sx / n;
  LinearCost through_origin{0, sxx > 0 ? std::max(0.0, sxy / sxx) : 0};
  if (sxx <= 0) return {std::max(0.0, sy / n), 0};  // every point at 0 bytes
  if (!(var > 1e-9 * sxx)) return through_origin;    // one size: per byte
  const double slope = (sxy - sx * sy / n) / var;
  const double intercept = (sy - slope * sx) / n;
  if (slope < 0) return {std::max(0.0, sy / n), 0};
  if (intercept < 0) return through_origin;
  return {intercept, slope};
}

double PlanCalibration::mean_before_push_ms() const {
  return before_push_ms.empty() ? 0 : Sum(before_push_ms) / before_push_ms.size();
}

double WorkersPerCore(const PlanCalibration& cal, int workers, int host_cores) {
  if (workers <= host_cores) return 1;
  const double most = (workers + host_cores - 1) / host_cores;
  return most -
         std::clamp(cal.core_spread, 0.0, 1.0) * (most - static_cast<double>(workers) / host_cores);
}

double PlanCalibration::LeadFraction(int64_t begin) const {
  double f = 0;
  for (const auto& [offset, fraction] : backward_leads) {
    if (offset > begin) break;
    f = fraction;
  }
  return f;
}

double Harmonic(int n) {
  double h = 0;
  for (int i = 1; i <= n; ++i) h += 1.0 / i;
  return h;
}

double OrderStatisticMean(const std::vector<double>& sorted, int n) {
  CHECK(!sorted.empty());
  const double N = static_cast<double>(sorted.size());
  double mean = 0, below = 0;  // below: P(max of n <= x_(j-1)) = ((j-1)/N)^n
  for (size_t j = 1; j <= sorted.size(); ++j) {
    const double at_most = std::pow(j / N, n);
    mean += sorted[j - 1] * (at_most - below);
    below = at_most;
  }
  return mean;
}

PlanPrediction Predict(const PlanCalibration& cal, const PlanCell& cell) {
  CHECK_GE(cell.workers, 1);
  CHECK_GE(cell.ps, 1);
  CHECK_GE(cell.host_cores, 1);
  CHECK_EQ(cell.push_bytes.size(), static_cast<size_t>(cell.ps));
  CHECK_EQ(cell.pull_bytes.size(), static_cast<size_t>(cell.ps));
  PlanPrediction p;
  const Costs c = CostsOf(cal, cell);
  const double path = cell.sync ? SyncRoundMs(cal, cell, c, &p.split) : AsyncStepMs(cal, cell, c, &p.split);
  // An async worker's step, against the resources' demand per round of W
  // steps: the same time when the resource is the limit.
  const Bound bound = ResourceBound(cell, c);
  p.step_ms = std::max(path, bound.ms);
  p.bound = bound.ms > path ? bound.name : PathBound(p.split);
  p.split.bound_ms = p.step_ms - path;
  p.images_per_second = cell.workers * cal.batch_size / p.step_ms * 1e3;
  Utilisations(cell, c, p.step_ms, &p);
  if (!cell.sync) {
    const double s_max = *std::max_element(c.s.begin(), c.s.end());
    p.staleness = (cell.workers - 1) * std::max(0.0, 1 - s_max / p.step_ms);
  }
  return p;
}

}  // namespace pstrain

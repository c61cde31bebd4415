#pragma once

// The model behind `pstrain plan` and the "predicted" column of `pstrain
// scale`: images/s of a cluster shape, from what calibration runs measured
// (launcher/plan/plan_calibration.h) and the bytes the shard plan and --wire put
// on the wire. docs/planning.md states it for users, with its validation.
//
// A worker's step, as the trainer runs it (worker/trainer.cc): compute
// before the push (b: backward, and the forward unless it ran ahead), the
// push/pull to every shard at once, and while the replies come in the next
// step's forward (a, "forward ahead"). Every time below is a mean in ms.
//
// Calibrated (PlanCalibration), from steps_worker*.csv, task_cpu.csv and the
// shard plan of each calibration run:
//   b_i    samples of compute_ms - ahead_ms; b = their mean
//   a      mean ahead_ms
//   g      the gap between one step's end and the next one's start
//   lat(B) worker latency of a push/pull that is neither the ps's work nor
//          a link: comm_ms - s(B_k) - links, over runs; fixed + per byte
//          of the largest request (B = max_k (u_k + d_k))
//   s(B)   the ps's CPU per request of B bytes (push + pull) = fixed +
//          per byte, fitted over every ps of every run (task_cpu.csv)
//   w(B)   a worker process's CPU per step beyond its compute (the I/O
//          thread: CURVE, copies) = fixed + per byte
//   f(o)   --overlap: how long before the end of b the gradient from flat
//          offset o on was final, over b (summary.json's backward_leads,
//          which the CPU model records with any ps count), averaged over
//          the runs b comes from
// Runs without task_cpu.csv (an older launcher's) give s and lat from the
// step logs instead: the comm_ms of their 1-worker runs without a link
// limit, c(B) = fixed + per byte of the request (at W = 1 on loopback the
// model's comm is lat + s), of which a share sigma (--ps_share, 0.5:
// CURVE's work is the same at either end of a connection) is the ps's:
// s = sigma c, lat = (1 - sigma) c, and w per byte = s per byte.
//   e      what sharing a core costs: a worker's CPU per step grows by
//          e per additional worker on its core (caches, switches), fitted
//          through the origin over the calibration runs with more workers
//          than cores; 0 without one
//   q      what a full host adds to a step's compute beyond its CPU, per
//          worker on a core and ps: the compute of a script whose forward
//          asks every ps for rows (embedding pulls) waits, once every core
//          has a worker, for the last of the P ps to get a core; waits of
//          mean q each, memoryless, make that q H_P (H_P = 1 + 1/2 + ... +
//          1/P). From calibration runs with as many workers as cores
//          (not those b and a came from): their mean compute_ms over
//          b + a, per H_P; without one, from
//          the runs with more: their mean compute_ms over k (b + a)
//          (1 + e (W / H - 1)), per k H_P (which reads too little where a
//          worker's wait is filled by another's compute); 0 without either
//          (and about 0 for a compute that asks nothing)
//   sigma  how evenly the host's scheduler spreads a round's computes where
//          workers outnumber cores unevenly (3 on 2): 0 where each core
//          keeps its own workers, and the round waits for the cores with
//          ceil(W / H) of them (short computes: the scheduler moves a task
//          between cores only every few ms); 1 where it spreads them all
//          (W / H a core: processor sharing). From the sync calibration
//          runs without a link limit whose W is more than H and not a
//          multiple of it: the round's slowest compute (each worker's
//          compute_ms plus the time the ps held its push for the others,
//          wait_ms) over (b + a)(1 + e (W / H - 1)) is k, set between the
//          two (a compute that also waits on a full host, q, reads as
//          less spread); 0 without one
//   rho    of what the slowest of W workers' waits adds beyond their mean,
//          the share a sync round waits for: 1 for independent memoryless
//          waits (each worker's the last of its P ps', q H_P; the slowest
//          of W, the last of W P: q (H_WP - H_P) more); less where the
//          compute ends at a barrier of its own (a script that averages
//          .grad before step(): the last worker's REDUCE answers them all).
//          From the sync calibration runs with as many workers as cores
//          and no link limit: their barrier wait (wait_ms: the ps held the
//          push) beyond M_W - b, over q (H_WP - H_P), within [0, 1]; a
//          run whose q (H_WP - H_P) is under 0.05 ms or 1% of b + a, or
//          whose step log has no wait_ms, says nothing of it. 1 without
//          one
// A cost measured at one size only is taken as per byte (fixed = 0).
//
// The cell (PlanCell): W workers, P ps, shard k's push u_k and pull d_k
// bytes, a link of R bytes/s (or none), H cores. On one host (what
// `pstrain launch` runs) k = ceil(W / H) - sigma (ceil(W / H) - W / H)
// workers share a core (W > H; else 1), and every
// CPU time (b_i, a, w, s) is stretched by 1 + e (W / H - 1) when W > H,
// and when W >= H each step's compute takes k q H_P more (a wait, not
// CPU: not in the host CPU bound); with a host per task, k = 1 and no host CPU
// bound applies.
//   L(B)     = f B / R on a NIC (each way); under --isolate=netns's tc tbf,
//              which shapes only each task's egress with a 10 ms bucket,
//              max(0, f B - max(64 KiB, R / 100)) / R. f = 1514 / 1448:
//              TCP/IPv4/Ethernet frames of a 1500-byte MTU around the payload
//   up_k     = when a worker's push to shard k has crossed its own link,
//              from the end of its compute: L(sum_k u_k) for every k
//              without --overlap's leads; with them shard k leaves f_k C
//              before the end (f_k: PlanCalibration::LeadFraction of its
//              first offset; C the compute's wall time, max(M_W, k b) in
//              sync, b in async), the link takes the pushes in the order
//              they leave (those that leave together share it and end
//              together; one that finds it idle gets its bucket), so up_k
//              may be negative; with one ps, no leads (the worker sends
//              its one shard at the end). A ps's core part starts at
//              up_k where it has a core of its own, else at max(0, up_k)
//   in_k     = f u_k / R on a NIC, else 0   a push through ps k's ingress
//   out_k    = L(W d_k) / W                 a reply through ps k's egress
//   s_k      = s(u_k + d_k)
// sync, a round (every worker one step, the barrier per version):
//   phase1   = max(M_W, k b) + k q (H_P + rho (H_WP - H_P))
//                              M_W = E[max of W draws of b_i] (the order
//                              statistic of the measured distribution,
//                              stragglers included: OrderStatisticMean);
//                              the barrier waits for the slowest worker's
//                              wait (an approximation where k > 1)
//   phase2   = lat + max_k max(v_k + push_k + reply_k + last_k,
//                              max(0, v_k + push_k + reply_k) + k a)
//              (v_k = up_k with a core of its own, else max(0, up_k))
//   last_k   = max(out_k, f sum_k d_k / R on a NIC)
//   push_k   = s_in + max(0, (W - 1) max(in_k, s_in) - early)
//   reply_k  = s_out + (W - 1) max(s_out, out_k)
//              (s_in: s_k's push part, half its fixed cost and its cost
//              per byte of u_k; s_out = s_k - s_in. Each ps takes its W
//              pushes, then, the version complete, sends its W replies;
//              each side a flow shop of two stages per request: one
//              request's stages and W - 1 times the slowest. A ps with a
//              core no worker needs (a host of its own, or W + P <= H)
//              serves the faster workers' pushes while the slowest still
//              computes: early = M_W - b, else 0. The last reply's
//              transfer overlaps the forward ahead)
//   T        = phase1 + phase2 + g
// async, one worker's step: alone,
//   T0       = b + k q H_P + lat + max_k max(v_k + s_k + down_k, max(0, v_k + s_k) + a) + g
//   down_k   = L(d_k), and f sum_k d_k / R on a NIC
// then queued behind the other workers at each ps's core and link (Bard and
// Schweitzer's approximate mean value analysis: a request finds (W - 1) D/T
// of the others' work at a server of demand D):
//   T        = T0 + (W - 1) sum_r D_r^2 / T,   D_r = s_k, d_k / R (and u_k / R on a NIC)
// Bounds (per round of W steps); the cell's time is the largest of T and:
//   host CPU (one host)  W (c + w + sum_k s_k) / H,   c = b + a
//   ps k's core          W s_k        (its requests are served one by one)
//   ps k's link          W f u_k / R (NIC only), W f d_k / R
//   a worker's link      f sum_k u_k / R, and f sum_k d_k / R on a NIC
// images/s = W batch / time. Async staleness = (W - 1)(1 - max_k s_k /
// time): the other workers' updates between a worker's pull and its push.
//
// Ignored: the gradient encoding's own CPU (--wire), sync's one apply per version being
// cheaper than W, a ps's several I/O threads serving requests at once,
// protocol headers, the switch between hosts, congestion control and loss,
// cores that slow each other below one worker per core (SMT, memory
// bandwidth, the clock under load), and the scheduling delays of more than
// two busy threads per core.
//
// Thread safety: pure functions.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pstrain {

// cost(B) = fixed_ms + per_byte_ms * B.
struct LinearCost {
  double fixed_ms = 0;
  double per_byte_ms = 0;
  double At(double bytes) const { return fixed_ms + per_byte_ms * bytes; }
};

// (bytes, ms) points -> the least-squares line with both terms >= 0;
// through the origin when every point has the same bytes (or one point).
// REQUIRES: points non-empty.
LinearCost FitLinearCost(const std::vector<std::pair<double, double>>& points);

struct PlanCalibration {
  std::vector<double> before_push_ms;  // b_i, sorted ascending, non-empty
  double ahead_ms = 0;                 // a
  double gap_ms = 0;                   // g
  int batch_size = 128;
  LinearCost latency;                  // lat(B), B = the largest request's bytes (push + pull of a shard)
  LinearCost ps_request;               // s(B), B = one request's bytes
  LinearCost worker_comm_cpu;          // w(B), B = one worker's bytes of a step
  double sharing_cost = 0;             // e
  double busy_core_wait_ms = 0;        // q
  double barrier_share = 1;            // rho
  double core_spread = 0;              // sigma
  // --overlap: (flat offset, f): the gradient from the offset on is final
  // a fraction f of b before b ends, offsets ascending; empty where the
  // runs recorded none (every push leaves at the end of b)
  std::vector<std::pair<int64_t, double>> backward_leads;

  double mean_before_push_ms() const;  // b
  // f of the shard that begins at `begin`: the largest offset's at or
  // below it (0: none).
  double LeadFraction(int64_t begin) const;
};

// k of the header: how many workers' computes a core carries in a round of
// W workers on H cores (1 where W <= H).
double WorkersPerCore(const PlanCalibration& cal, int workers, int host_cores);

enum class LinkKind {
  kNic,    // a host's link carries R each way (a real network)
  kNetns,  // tc tbf on each task's egress only, 10 ms bucket (--isolate=netns)
};

enum class Placement {
  kOneHost,      // every task on one host of host_cores cores (pstrain launch)
  kHostPerTask,  // each task on a host of its own
};

struct PlanCell {
  int workers = 1;
  int ps = 1;
  bool sync = true;
  double link_bytes_per_s = 0;  // R; 0: no link limit
  LinkKind link = LinkKind::kNic;
  Placement placement = Placement::kOneHost;
  int host_cores = 1;           // H
  std::vector<double> push_bytes;  // [shard] u_k, one worker's step
  std::vector<double> pull_bytes;  // [shard] d_k
  std::vector<int64_t> shard_begin;  // [shard] its first flat offset; empty: unknown (no overlap)
};

// Where a step's (sync: a round's) time goes; the parts add up to step_ms.
struct PlanSplit {
  double compute_ms = 0;      // b + a
  double barrier_ms = 0;      // sync: M_W - b and k q rho (H_WP - H_P), waiting for the slowest
  double sharing_ms = 0;      // one host: compute stretched by k workers per core
  double transfer_ms = 0;     // up, in, and the part of down that a did not hide
  double ps_ms = 0;           // the ps's service (sync: of all W requests)
  double other_ms = 0;        // lat + g
  double bound_ms = 0;        // waiting on the binding resource (the bound over T)
};

struct PlanPrediction {
  double images_per_second = 0;
  double step_ms = 0;          // a round of W steps (sync) or one worker's step (async)
  PlanSplit split;
  // The resource whose demand per round sets the time ("host CPU", "ps
  // core", "ps link", "worker link"), or, when none does, the largest part
  // of the step's path: "compute" (with the barrier and the sharing of
  // cores), "ps core" (sync: the W requests served one by one) or "links".
  std::string bound;
  double host_cpu_utilisation = 0;         // one host: of its H cores
  std::vector<double> ps_core_utilisation;  // [ps] of one core
  std::vector<double> ps_link_utilisation;  // [ps] the busier direction; 0 without a link limit
  double staleness = 0;        // async: mean updates between a worker's pull and its push
};

// H_n = 1 + 1/2 + ... + 1/n: the expected last of n memoryless waits, in
// units of their mean.
double Harmonic(int n);

// E[max of n independent draws] from the empirical distribution of
// `sorted` (ascending, non-empty): sum_j x_(j) ((j/N)^n - ((j-1)/N)^n).
double OrderStatisticMean(const std::vector<double>& sorted, int n);

// REQUIRES: cell.workers, cell.ps, cell.host_cores >= 1 and push_bytes,
// pull_bytes of size cell.ps.
PlanPrediction Predict(const PlanCalibration& calibration, const PlanCell& cell);

}  // namespace pstrain

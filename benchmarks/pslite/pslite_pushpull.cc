// ps-lite's round trip, for the side-by-side of benchmarks/pslite_compare.sh:
// each worker ZPushPulls n floats under one key to one server whose handler
// adds them into its copy and answers with that copy (a summing server,
// ps-lite's own default handler's work, for one key of length n), so each
// round trip moves n floats each way, as a pstrain worker's PUSH_PULL does
// (benchmarks/wire_bench.cc).
//
// Built against ps-lite (github.com/dmlc/ps-lite) by the script; run as
// ps-lite's three roles through its DMLC_* environment, with as many
// workers as DMLC_NUM_WORKER says (the script does).
//
//   pslite_pushpull SIZES SECONDS     SIZES: comma-separated float counts
//
// The workers time the same seconds: a barrier of every worker before each
// timed run. Each worker prints, per size, the median over 3 timed runs of
// SECONDS each:
//   RESULT system=pslite floats=N workers=W worker=RANK bytes_per_s=B round_trips_per_s=R
// (bytes both ways, this worker's; the script sums the workers').

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "benchmarks/pslite/pslite_timing.h"
#include "ps/ps.h"

namespace {

void Serve() {
  auto* server = new ps::KVServer<float>(0);
  auto* store = new std::unordered_map<ps::Key, std::vector<float>>();
  server->set_request_handle([store](const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                                     ps::KVServer<float>* self) {
    std::vector<float>& value = (*store)[data.keys[0]];
    const size_t n = data.vals.size();
    ps::KVPairs<float> reply;
    if (meta.push) {
      if (value.size() != n) value.assign(n, 0.0f);
      for (size_t i = 0; i < n; ++i) value[i] += data.vals[i];
    }
    if (meta.pull) {
      reply.keys = data.keys;
      reply.vals.CopyFrom(value.data(), value.size());
      reply.lens = ps::SArray<int>(1, static_cast<int>(value.size()));
    }
    self->Response(meta, reply);
  });
  // The server object lives until the process exits (Finalize waits for
  // the workers' barrier first).
}

void Measure(const std::vector<int64_t>& sizes, double seconds) {
  ps::KVWorker<float> worker(0, 0);
  for (size_t s = 0; s < sizes.size(); ++s) {
    const int64_t n = sizes[s];
    ps::SArray<ps::Key> keys(1, static_cast<ps::Key>(s));
    ps::SArray<float> grads(n, 0.5f);
    ps::SArray<int> lens(1, static_cast<int>(n));
    ps::SArray<float> params;
    auto round_trip = [&] { worker.Wait(worker.ZPushPull(keys, grads, &params, &lens)); };
    for (int i = 0; i < 5; ++i) round_trip();
    if (static_cast<int64_t>(params.size()) != n) {
      std::fprintf(stderr, "pslite_pushpull: %lld floats back, not %lld\n",
                   static_cast<long long>(params.size()), static_cast<long long>(n));
      std::exit(1);
    }
    const double trips_per_s = pslite_bench::MedianTripsPerSecond(round_trip, seconds);
    pslite_bench::PrintResult(n, trips_per_s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SIZES SECONDS\n", argv[0]);
    return 2;
  }
  const std::vector<int64_t> sizes = pslite_bench::ParseSizes(argv[1]);
  const double seconds = std::atof(argv[2]);
  ps::Start(0);
  if (ps::IsServer()) Serve();
  if (ps::IsWorker()) Measure(sizes, seconds);
  ps::Finalize(0, true);
  return 0;
}

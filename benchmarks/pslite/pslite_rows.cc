// ps-lite's keyed rows, for benchmarks/pslite_compare.sh with EMBEDDING_DIM
// set: the walk of wire_bench's rows client (benchmarks/wire_bench.cc,
// RunRowsClient) through ps-lite's own keyed calls. Each round trip pulls
// n / D rows of D floats by key (ZPull: the rows come back) and pushes a
// gradient row for each (ZPush: acknowledged); the server holds a row per
// key, made at its first touch, and applies SGD to it (row -= 0.25 x
// gradient, a push of 0.5 everywhere: 0.125 a visit, exact in f32), as a
// pstrain ps applies a table's rows. Each worker owns ROWS_PER_WORKER keys
// (the same mixer as wire_bench's, so the same ids) and walks them in
// blocks of n / D (other keys for each size), keys sorted within a block
// (ps-lite requires it); one
// pass over every key before timing makes every row. A pulled block is
// checked against the rows it must hold (0 less 0.125 a visit) at the first
// and the last round trip.
//
// Built against ps-lite (github.com/dmlc/ps-lite) by the script; run as
// ps-lite's three roles through its DMLC_* environment.
//
//   pslite_rows SIZES DIM ROWS_PER_WORKER SECONDS   SIZES: float counts, each
//                                                    a multiple of DIM
//
// With PSLITE_OVERLAP=1 in the environment, each round trip pushes the
// block pulled the trip before and pulls the next block at once behind it,
// both in flight together (ps-lite's server takes a connection's requests
// in order, so the pull sees the push): ps-lite's best idiom for a loop
// that knows its next keys, one round trip a step.
//
// Each worker prints, per size, the median over 3 timed runs of SECONDS,
// every worker's run after a barrier of all:
//   RESULT system=pslite floats=N workers=W worker=RANK bytes_per_s=B round_trips_per_s=R
// (row bytes both ways, this worker's; the script sums the workers').

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "benchmarks/pslite/pslite_timing.h"
#include "ps/ps.h"

namespace {

constexpr float kStep = 0.25f * 0.5f;  // lr x gradient

// wire_bench.cc's RowId: splitmix64 of (rank, i), 63 bits.
ps::Key RowId(int rank, int64_t i) {
  uint64_t z =
      (static_cast<uint64_t>(rank) << 40) + static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return (z ^ (z >> 31)) >> 1;
}

void Serve(int dim) {
  auto* server = new ps::KVServer<float>(0);
  auto* store = new std::unordered_map<ps::Key, std::vector<float>>();
  server->set_request_handle([store, dim](const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                                          ps::KVServer<float>* self) {
    const size_t n = data.keys.size();
    ps::KVPairs<float> reply;
    if (meta.push) {
      if (data.vals.size() != n * dim) {
        std::fprintf(stderr, "pslite_rows: a push of %zu floats for %zu keys\n", data.vals.size(),
                     n);
        std::exit(1);
      }
      for (size_t i = 0; i < n; ++i) {
        std::vector<float>& row = (*store)[data.keys[i]];
        if (row.empty()) row.assign(dim, 0.0f);
        const float* g = data.vals.data() + i * dim;
        for (int j = 0; j < dim; ++j) row[j] -= 0.25f * g[j];  // kStep where g is 0.5
      }
    }
    if (meta.pull) {
      reply.keys = data.keys;
      reply.vals.resize(n * dim);
      for (size_t i = 0; i < n; ++i) {
        std::vector<float>& row = (*store)[data.keys[i]];
        if (row.empty()) row.assign(dim, 0.0f);
        std::memcpy(reply.vals.data() + i * dim, row.data(), dim * sizeof(float));
      }
    }
    self->Response(meta, reply);
  });
  // The server object lives until the process exits (Finalize waits for
  // the workers' barrier first).
}

void Measure(const std::vector<int64_t>& sizes, int dim, int64_t per_worker, double seconds) {
  ps::KVWorker<float> worker(0, 0);
  const char* overlap_env = std::getenv("PSLITE_OVERLAP");
  const bool overlap = overlap_env != nullptr && std::string(overlap_env) == "1";
  const int rank = ps::MyRank();
  for (size_t s = 0; s < sizes.size(); ++s) {
    const int64_t n = sizes[s];
    const int64_t rows = n / dim;
    const int64_t blocks = per_worker / rows;
    if (rows * dim != n || blocks * rows != per_worker) {
      std::fprintf(stderr, "pslite_rows: %lld floats are not whole blocks of rows\n",
                   static_cast<long long>(n));
      std::exit(2);
    }
    std::vector<ps::SArray<ps::Key>> keys(blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      std::vector<ps::Key> block;
      for (int64_t j = 0; j < rows; ++j) {
        block.push_back(RowId(rank + 256 * static_cast<int>(s), b * rows + j));
      }
      std::sort(block.begin(), block.end());
      keys[b].CopyFrom(block.data(), block.size());
    }
    ps::SArray<float> grads(n, 0.5f);
    ps::SArray<float> pulled;
    int64_t trip = 0;
    bool primed = false;  // overlap: the first block pulled
    auto round_trip = [&] {
      const ps::SArray<ps::Key>& k = keys[trip % blocks];
      if (!overlap) {
        worker.Wait(worker.ZPull(k, &pulled));
        worker.Wait(worker.ZPush(k, grads));
      } else {
        if (!primed) worker.Wait(worker.ZPull(k, &pulled));
        primed = true;
        const int push = worker.ZPush(k, grads);
        const int pull = worker.ZPull(keys[(trip + 1) % blocks], &pulled);
        worker.Wait(push);
        worker.Wait(pull);
      }
      ++trip;
    };
    // The block just pulled holds 0 less kStep per earlier visit (with
    // overlap, the next block, pushed trip / blocks times so far).
    auto check = [&] {
      if (static_cast<int64_t>(pulled.size()) != n) {
        std::fprintf(stderr, "pslite_rows: %zu floats back, not %lld\n", pulled.size(),
                     static_cast<long long>(n));
        std::exit(1);
      }
      float want = 0.0f;
      const int64_t visits = overlap ? trip / blocks : (trip - 1) / blocks;
      for (int64_t v = 0; v < visits; ++v) want -= kStep;
      for (int64_t i = 0; i < n; ++i) {
        if (pulled[i] != want) {
          std::fprintf(stderr, "pslite_rows: a row holds %g, not %g\n", pulled[i], want);
          std::exit(1);
        }
      }
    };
    round_trip();
    check();
    while (trip < blocks) round_trip();
    const double trips_per_s = pslite_bench::MedianTripsPerSecond(round_trip, seconds);
    check();
    pslite_bench::PrintResult(n, trips_per_s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s SIZES DIM ROWS_PER_WORKER SECONDS\n", argv[0]);
    return 2;
  }
  const std::vector<int64_t> sizes = pslite_bench::ParseSizes(argv[1]);
  const int dim = std::atoi(argv[2]);
  const int64_t per_worker = std::atoll(argv[3]);
  const double seconds = std::atof(argv[4]);
  if (dim < 1 || per_worker < 1) return 2;
  ps::Start(0);
  if (ps::IsServer()) Serve(dim);
  if (ps::IsWorker()) Measure(sizes, dim, per_worker, seconds);
  ps::Finalize(0, true);
  return 0;
}

#pragma once

// What benchmarks/pslite/'s ps-lite programs share: their size lists, their
// timing (every worker times the same seconds) and their RESULT lines,
// which benchmarks/pslite_compare.sh reads.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "ps/ps.h"

namespace pslite_bench {

// "21840,65536" -> {21840, 65536}.
inline std::vector<int64_t> ParseSizes(const char* text) {
  std::vector<int64_t> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) sizes.push_back(std::stoll(item));
  return sizes;
}

// Round trips per second of `round_trip`: the median of 3 runs of
// `seconds`, each begun by a barrier of every worker.
template <typename RoundTrip>
double MedianTripsPerSecond(RoundTrip round_trip, double seconds) {
  std::vector<double> rates;
  for (int run = 0; run < 3; ++run) {
    ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
    int64_t trips = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (elapsed < seconds) {
      round_trip();
      ++trips;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    rates.push_back(trips / elapsed);
  }
  std::sort(rates.begin(), rates.end());
  return rates[1];
}

// This worker's RESULT line for round trips of `floats` each way.
inline void PrintResult(int64_t floats, double trips_per_s) {
  std::printf(
      "RESULT system=pslite floats=%lld workers=%d worker=%d bytes_per_s=%.0f "
      "round_trips_per_s=%.1f\n",
      static_cast<long long>(floats), ps::NumWorkers(), ps::MyRank(),
      trips_per_s * static_cast<double>(floats) * 8, trips_per_s);
  std::fflush(stdout);
}

}  // namespace pslite_bench

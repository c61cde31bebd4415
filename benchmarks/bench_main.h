#pragma once

// The main of pstrain's benchmark binaries: Google Benchmark's, with the
// binary's reporter (console output plus its RESULT lines) and the
// benchmarks it registers at run time:
//
//   int main(int argc, char** argv) {
//     pstrain::ImagesPerSecReporter reporter;
//     return pstrain::RunBenchmarks(argc, argv, &reporter, &RegisterAll);
//   }

#include "benchmark/benchmark.h"

namespace pstrain {

// Parses the benchmark flags (1 for one it does not know), calls
// `register_benchmarks` (may be null: the BENCHMARK() macros' alone), runs
// what --benchmark_filter selects with `reporter`, and returns main's exit
// code.
inline int RunBenchmarks(int argc, char** argv, benchmark::BenchmarkReporter* reporter,
                         void (*register_benchmarks)() = nullptr) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (register_benchmarks != nullptr) register_benchmarks();
  benchmark::RunSpecifiedBenchmarks(reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace pstrain

#pragma once

// Console output plus one machine-readable line per successful run (and per
// aggregate, stat=mean|median|stddev, under --benchmark_repetitions):
//
//   RESULT model=mnist_cnn backend=cpu op=forward_backward batch=128 images_per_sec=N
//
// for benchmarks named "<model>/<backend>/<op>" with the batch as their
// first argument and items_per_second counting images. Shared by the model
// benchmarks of every backend so that their lines compare directly.

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmark/benchmark.h"

namespace pstrain {

class ImagesPerSecReporter : public benchmark::ConsoleReporter {
 public:
  // No colour: escape codes would land at the start of RESULT lines.
  ImagesPerSecReporter() : ConsoleReporter(OO_None) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      const auto rate = run.counters.find("items_per_second");
      if (run.error_occurred || rate == run.counters.end()) continue;
      if (run.aggregate_name == "cv") continue;  // a ratio, not images/s
      const std::vector<std::string> name = absl::StrSplit(run.run_name.function_name, '/');
      if (name.size() != 3) continue;
      const std::string stat =
          run.run_type == Run::RT_Aggregate ? absl::StrCat(" stat=", run.aggregate_name) : "";
      const std::vector<std::string> args = absl::StrSplit(run.run_name.args, '/');
      GetOutputStream() << "RESULT model=" << name[0] << " backend=" << name[1] << " op=" << name[2]
                        << " batch=" << args[0] << stat
                        << " images_per_sec=" << std::llround(rate->second.value) << std::endl;
    }
  }
};

}  // namespace pstrain

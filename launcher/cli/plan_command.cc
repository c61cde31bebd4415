// `pstrain plan`: its flags and the PlanOptions they make.

#include "launcher/cli/commands.h"

#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "flags/task_flags.h"
#include "launcher/cli/shared_flags.h"
#include "launcher/experiments/experiment.h"
#include "launcher/experiments/scale.h"
#include "launcher/plan/plan.h"

ABSL_FLAG(std::vector<std::string>, check, {},
          "plan: run directories to predict in their own cells against what they measured (repeat the flag "
          "or separate with commas); writes OUT/check.md");
ABSL_FLAG(std::string, link_kind, "nic",
          "plan: nic (each host's link carries --link_rate each way) or netns (only each task's egress "
          "is shaped, with a 10 ms bucket: what --isolate=netns --link_rate emulates)");
ABSL_FLAG(std::string, placement, "one_host",
          "plan: one_host (every task on one host of --host_cores cores, as `pstrain launch` runs them) "
          "or host_per_task");
ABSL_FLAG(int, host_cores, 0, "plan: cores of each host (0: the calibration host's)");
ABSL_FLAG(int, runs_host_cores, 0,
          "plan: cores of the host that made the --calibrate and --check runs, for runs whose summary.json "
          "does not record it (an older launcher's; 0: this machine's)");
ABSL_FLAG(double, ps_share, pstrain::kDefaultPsShare,
          "plan: for runs without task_cpu.csv, the ps's share of a 1-worker run's push/pull time (its "
          "service, which other workers queue for; the rest is the worker's latency), in (0, 1]");
ABSL_FLAG(int64_t, params, 0,
          "plan: a model of this many parameters (floats), with the compute of --model (0: --model's own)");
ABSL_FLAG(double, compute_ms, 0,
          "plan: a step's compute, mean ms, the measured distribution scaled to it (0: as measured)");

namespace pstrain {
namespace {

// `pstrain plan`: flags -> PlanOptions (validated by RunPlan).
absl::StatusOr<PlanOptions> PlanOptionsFromFlags(int argc, char** argv) {
  const std::set<std::string> given = FlagsOnCommandLine(argc, argv);
  auto flag = [&](const char* name) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    return given.count(name) != 0 && f != nullptr ? f->CurrentValue() : std::string();
  };
  PlanOptions o;
  o.calibrate = RepeatedFlagValues(argc, argv, "calibrate");
  o.check = RepeatedFlagValues(argc, argv, "check");
  if (given.count("workers")) {
    ASSIGN_OR_RETURN(o.workers, ParseCountList(absl::GetFlag(FLAGS_workers), "workers", 65536));
  }
  if (given.count("ps")) {
    ASSIGN_OR_RETURN(o.ps, ParseCountList(absl::GetFlag(FLAGS_ps), "ps", 4096));
  }
  if (given.count("mode")) {
    ASSIGN_OR_RETURN(o.modes, ParsePlanModes(flag("mode")));
  }
  o.link_rate = absl::GetFlag(FLAGS_link_rate);
  ASSIGN_OR_RETURN(o.link, ParseLinkKind(absl::GetFlag(FLAGS_link_kind)));
  ASSIGN_OR_RETURN(o.placement, ParsePlacement(absl::GetFlag(FLAGS_placement)));
  o.host_cores = absl::GetFlag(FLAGS_host_cores);
  o.model = flag("model");
  o.params = absl::GetFlag(FLAGS_params);
  if (given.count("params") && o.params < 1) return absl::InvalidArgumentError("--params must be >= 1");
  o.compute_ms = absl::GetFlag(FLAGS_compute_ms);
  if (given.count("compute_ms") && !(o.compute_ms > 0)) return absl::InvalidArgumentError("--compute_ms must be > 0");
  o.wire = flag("wire");
  if (given.count("insecure")) o.insecure = InsecureFlag();
  o.out = absl::GetFlag(FLAGS_out);
  o.gnuplot = absl::GetFlag(FLAGS_gnuplot);
  o.command_line = absl::StrJoin(std::vector<std::string>(argv, argv + argc), " ");
  o.ps_share = absl::GetFlag(FLAGS_ps_share);
  o.target_accuracy = absl::GetFlag(FLAGS_target_accuracy);
  if (!(o.target_accuracy > 0 && o.target_accuracy <= 1)) {
    return absl::InvalidArgumentError("--target_accuracy must be in (0, 1]");
  }
  const int runs_host_cores = absl::GetFlag(FLAGS_runs_host_cores);
  o.default_host_cores = runs_host_cores != 0         ? runs_host_cores
                         : ReadMachineInfo().cores > 0 ? ReadMachineInfo().cores
                                                       : 1;
  return o;
}

}  // namespace

absl::Status RunPlanCommand(int argc, char** argv) {
  ASSIGN_OR_RETURN(const PlanOptions o, PlanOptionsFromFlags(argc, argv));
  return RunPlan(o);
}

}  // namespace pstrain

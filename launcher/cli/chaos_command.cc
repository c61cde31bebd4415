// `pstrain chaos`: its flags, and the exit status from how the runs
// survived.

#include "launcher/cli/commands.h"

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "flags/task_flags.h"
#include "launcher/chaos/chaos.h"
#include "worker/train_flags.h"

ABSL_FLAG(int, runs, pstrain::ChaosOptions().runs,
          "chaos: runs with faults, after the undisturbed baseline");
ABSL_FLAG(std::string, faults, "kill,stop",
          "chaos: fault kinds to draw from, comma-separated: kill (SIGKILL), stop (SIGSTOP, then SIGCONT "
          "after 1 s to 2 x --peer_timeout_s), lose (SIGKILL, and no restart for as long: a lost "
          "machine)");
ABSL_FLAG(std::vector<std::string>, fault_targets, {},
          "chaos: the tasks faults may hit, comma-separated types (ps, chief, worker) or tasks "
          "(worker:1); empty: every task of the spec");
ABSL_FLAG(int, max_faults_per_run, pstrain::ChaosOptions().max_faults_per_run,
          "chaos: 1, or 2 to give a quarter of the runs two faults");
ABSL_FLAG(double, run_timeout_s, pstrain::ChaosOptions().run_timeout_s,
          "chaos: a run not finished after this many seconds is a hang (0: 4 x the baseline's wall "
          "time + 60 s)");

namespace pstrain {
namespace {

// Chaos runs need checkpoints to recover from: every 50 steps unless
// --checkpoint_every_steps or --checkpoint_every_s is given.
constexpr int64_t kChaosCheckpointEverySteps = 50;

}  // namespace

absl::Status RunChaosCommand(int argc, char** argv, const Cancellation& stop) {
  ASSIGN_OR_RETURN(TrainOptions train, TrainOptionsFromFlags());
  const std::set<std::string> given = FlagsOnCommandLine(argc, argv);
  if (!given.count("checkpoint_every_steps") && !given.count("checkpoint_every_s")) {
    train.checkpoint_every_steps = kChaosCheckpointEverySteps;
  }
  ChaosOptions o;
  ASSIGN_OR_RETURN(o.experiment, ExperimentOptionsFromFlags(train, "chaos", argc, argv, stop));
  o.cluster_spec_path = ClusterSpecFlag();
  if (o.cluster_spec_path.empty()) return absl::InvalidArgumentError("chaos needs --cluster_spec=FILE");
  o.runs = absl::GetFlag(FLAGS_runs);
  ASSIGN_OR_RETURN(o.fault_kinds, ParseFaultKinds(absl::GetFlag(FLAGS_faults)));
  o.max_faults_per_run = absl::GetFlag(FLAGS_max_faults_per_run);
  o.fault_targets = absl::GetFlag(FLAGS_fault_targets);
  o.run_timeout_s = absl::GetFlag(FLAGS_run_timeout_s);
  std::printf("pstrain chaos: a baseline and %d runs with faults of %s, output in %s\n", o.runs,
              o.cluster_spec_path.c_str(), o.experiment.out_dir.c_str());
  std::fflush(stdout);
  ASSIGN_OR_RETURN(const ChaosResult result, RunChaos(o));
  std::printf("%s\n", ChaosTotalsLine(result.totals).c_str());
  std::fflush(stdout);
  const ChaosTotals& t = result.totals;
  if (t.hangs == 0 && t.failed == 0) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(t.hangs, " of ", t.runs, " runs hung and ", t.failed,
                                         " failed; see ", o.experiment.out_dir, "/report.md"));
}

}  // namespace pstrain

// `pstrain compare` and `pstrain scale`: their flags, and the options every
// experiment takes from the flags (`pstrain chaos` too).

#include "launcher/cli/commands.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "flags/task_flags.h"
#include "launcher/cli/shared_flags.h"
#include "launcher/experiments/compare.h"
#include "launcher/experiments/mode_spec.h"
#include "launcher/experiments/scale.h"
#include "launcher/plan/plan.h"
#include "launcher/supervisor/straggler.h"
#include "worker/train_flags.h"

ABSL_FLAG(std::string, modes, "sync,async,ssp:2",
          "compare: update modes, comma-separated: sync, sync+backup:B, async, ssp:S (+slr: "
          "staleness-aware lr, for async and ssp)");
ABSL_FLAG(int, eval_points, pstrain::ScaleOptions().experiment.eval_points,
          "compare/scale: about this many test evaluations per run when --eval_every_steps is 0");

namespace pstrain {
namespace {

// The mode of `train` in compare's syntax ("ssp:2", "sync+backup:1").
absl::StatusOr<ModeSpec> ModeOf(const TrainOptions& train) {
  std::string text = UpdateModeName(train.mode);
  if (train.mode == proto::SSP) absl::StrAppend(&text, ":", train.staleness);
  if (train.backup_workers > 0) absl::StrAppend(&text, "+backup:", train.backup_workers);
  if (train.staleness_lr && train.mode != proto::SYNC) absl::StrAppend(&text, "+slr");
  return ParseModeSpec(text);
}

}  // namespace

absl::StatusOr<ExperimentOptions> ExperimentOptionsFromFlags(const TrainOptions& train,
                                                              const std::string& command, int argc,
                                                              char** argv,
                                                              const Cancellation& stop) {
  ExperimentOptions x;
  x.cancel = &stop;
  x.out_dir = absl::GetFlag(FLAGS_out);
  if (x.out_dir.empty()) {
    x.out_dir = absl::StrCat("runs/", command, "-",
                             absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()));
  }
  x.bin_dir = BinDir();
  ASSIGN_OR_RETURN(x.command, CommandAfterDashes(argc, argv));
  if (const char* python_path = std::getenv("PYTHONPATH")) x.python_path = python_path;
  x.train = train;
  ASSIGN_OR_RETURN(x.ps, PsOptionsFor(train));
  x.secret_file = SecretFileFlag();
  x.insecure = InsecureFlag();
  x.straggler_items = absl::GetFlag(FLAGS_straggler);
  ASSIGN_OR_RETURN(x.straggler_delay_ms, ParseStragglerItems(x.straggler_items));
  ASSIGN_OR_RETURN(x.max_restarts, MaxRestartsFlag());
  x.isolate = absl::GetFlag(FLAGS_isolate);
  x.link_rate = absl::GetFlag(FLAGS_link_rate);
  if (!x.link_rate.empty() && x.isolate.empty()) {
    return absl::InvalidArgumentError("--link_rate needs --isolate=netns");
  }
  x.target_accuracy = absl::GetFlag(FLAGS_target_accuracy);
  if (!(x.target_accuracy > 0 && x.target_accuracy <= 1)) {
    return absl::InvalidArgumentError("--target_accuracy must be in (0, 1]");
  }
  x.eval_points = absl::GetFlag(FLAGS_eval_points);
  if (x.eval_points < 1) return absl::InvalidArgumentError("--eval_points must be >= 1");
  x.gnuplot = absl::GetFlag(FLAGS_gnuplot);
  x.command_line = absl::StrJoin(std::vector<std::string>(argv, argv + argc), " ");
  x.progress = stdout;
  x.rewrite_progress = isatty(STDOUT_FILENO) != 0;
  return x;
}

absl::Status RunCompareCommand(int argc, char** argv, const Cancellation& stop) {
  ASSIGN_OR_RETURN(const TrainOptions train, TrainOptionsFromFlags());
  CompareOptions o;
  ASSIGN_OR_RETURN(o.experiment, ExperimentOptionsFromFlags(train, "compare", argc, argv, stop));
  o.cluster_spec_path = ClusterSpecFlag();
  if (o.cluster_spec_path.empty()) return absl::InvalidArgumentError("compare needs --cluster_spec=FILE");
  ASSIGN_OR_RETURN(o.modes, ParseModeList(absl::GetFlag(FLAGS_modes)));
  o.lr_given = train.lr > 0;
  std::printf("pstrain compare: %zu runs of %s, output in %s\n", o.modes.size(), o.cluster_spec_path.c_str(),
              o.experiment.out_dir.c_str());
  return RunCompare(o);
}

absl::Status RunScaleCommand(int argc, char** argv, const Cancellation& stop) {
  ASSIGN_OR_RETURN(const TrainOptions train, TrainOptionsFromFlags());
  ScaleOptions o;
  ASSIGN_OR_RETURN(o.experiment, ExperimentOptionsFromFlags(train, "scale", argc, argv, stop));
  ASSIGN_OR_RETURN(o.workers, ParseCountList(absl::GetFlag(FLAGS_workers), "workers", 256));
  ASSIGN_OR_RETURN(o.ps, ParseCountList(absl::GetFlag(FLAGS_ps), "ps", 64));
  ASSIGN_OR_RETURN(o.mode, ModeOf(train));
  o.lr_given = train.lr > 0;
  o.calibrate = RepeatedFlagValues(argc, argv, "calibrate");
  std::printf("pstrain scale: %zu runs (%s), output in %s\n", o.ps.size() * o.workers.size(),
              o.mode.label.c_str(), o.experiment.out_dir.c_str());
  return RunScale(o);
}

}  // namespace pstrain

// `pstrain keygen`, `timeline`, `export`, `evaluate` and `predict`: the
// tools around a run, and their flags.

#include "launcher/cli/commands.h"

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "export/commands.h"
#include "flags/task_flags.h"
#include "launcher/cli/shared_flags.h"
#include "launcher/reporting/timeline_chart.h"
#include "transport/job_secret.h"

ABSL_FLAG(std::string, checkpoint, "",
          "export/evaluate: which parameters of --run_dir: '' (final_params.f32), latest, ckpt-N, N "
          "or a checkpoint directory");
ABSL_FLAG(std::string, format, "onnx", "export: the model format (onnx)");
ABSL_FLAG(std::string, steps, "",
          "timeline: the steps to draw, A:B (inclusive) or one step A");
ABSL_FLAG(bool, invert, false,
          "predict: the images are dark on light (MNIST's are a white digit on black)");

namespace pstrain {
namespace {

// export and evaluate: the run directory and data flags as given on the
// command line ('' when not given: the run's record decides).
SavedModelCommand SavedModelCommandFromFlags(int argc, char** argv) {
  const std::set<std::string> given = FlagsOnCommandLine(argc, argv);
  SavedModelCommand c;
  auto flag = [&](const char* name) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
    return given.count(name) != 0 && f != nullptr ? f->CurrentValue() : std::string();
  };
  c.run_dir = flag("run_dir");
  c.data_dir = flag("data_dir");
  c.dataset = flag("dataset");
  c.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  c.format = absl::GetFlag(FLAGS_format);
  c.out = absl::GetFlag(FLAGS_out);
  return c;
}

}  // namespace

absl::Status RunKeygen() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("keygen needs --out=FILE");
  RETURN_IF_ERROR(JobSecret::Generate().WriteNewFile(out));
  std::printf("pstrain: wrote a new job secret to %s (mode 0600); give every task of the job "
              "--secret_file=%s\n", out.c_str(), out.c_str());
  return absl::OkStatus();
}

// pstrain timeline RUN_DIR --steps=A:B --out=FILE.png (or --run_dir=RUN_DIR).
absl::Status RunTimelineCommand(const std::vector<std::string>& positional) {
  TimelineChartOptions o;
  if (positional.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", positional[1], "\""));
  }
  const absl::CommandLineFlag* run_dir = absl::FindCommandLineFlag("run_dir");
  o.run_dir = !positional.empty() ? positional[0] : run_dir != nullptr ? run_dir->CurrentValue() : "";
  if (o.run_dir.empty()) return absl::InvalidArgumentError("timeline needs RUN_DIR");
  if (absl::GetFlag(FLAGS_steps).empty()) return absl::InvalidArgumentError("timeline needs --steps=A:B");
  RETURN_IF_ERROR(ParseStepRange(absl::GetFlag(FLAGS_steps), &o));
  o.out = absl::GetFlag(FLAGS_out);
  if (o.out.empty()) o.out = absl::StrCat(o.run_dir, "/timeline_steps_", o.first_step, "-", o.last_step, ".png");
  o.gnuplot = absl::GetFlag(FLAGS_gnuplot);
  RETURN_IF_ERROR(DrawTimelineChart(o));
  std::printf("pstrain: wrote %s\n", o.out.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status RunSavedModelCommand(const std::string& command, int argc, char** argv) {
  const SavedModelCommand c = SavedModelCommandFromFlags(argc, argv);
  return command == "export" ? RunExport(c) : RunEvaluate(c);
}

absl::Status RunPredictCommand(int argc, char** argv, const std::vector<std::string>& images) {
  return RunPredict(SavedModelCommandFromFlags(argc, argv), images, absl::GetFlag(FLAGS_invert));
}

}  // namespace pstrain

// `pstrain keygen`, `timeline`, `export`, `evaluate`, `predict` and
// `reshard`: the tools around a run, and their flags.

#include "launcher/cli/commands.h"

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "export/commands.h"
#include "flags/task_flags.h"
#include "launcher/cli/shared_flags.h"
#include "launcher/reporting/timeline_chart.h"
#include "ps_server/reshard.h"
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
  if (absl::Status s = JobSecret::Generate().WriteNewFile(out); !s.ok()) {
    // A file already there is the user's to move (exit 2), not a failure.
    if (absl::IsAlreadyExists(s)) return absl::InvalidArgumentError(s.message());
    return s;
  }
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

namespace {

// RUN_DIR/cluster_spec.json with `num_ps` ps tasks: the first ones as
// they were, more on the last one's host at the ports after the spec's
// highest (a resume with --free_ports picks free ones anyway).
absl::Status RewriteSpecPs(const std::string& path, int num_ps) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  ASSIGN_OR_RETURN(google::protobuf::Value spec, ParseJson(text, path));
  auto* cluster = spec.mutable_struct_value()->mutable_fields();
  auto c = cluster->find("cluster");
  if (c == cluster->end() || !c->second.has_struct_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no \"cluster\" object"));
  }
  auto* jobs = c->second.mutable_struct_value()->mutable_fields();
  auto ps = jobs->find("ps");
  if (ps == jobs->end() || !ps->second.has_list_value() ||
      ps->second.list_value().values_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no \"ps\" tasks"));
  }
  int max_port = 0;
  std::string host = "localhost";  // the last ps's, below
  for (const auto& [name, tasks] : *jobs) {
    if (!tasks.has_list_value()) continue;
    for (const google::protobuf::Value& address : tasks.list_value().values()) {
      const std::vector<std::string> parts = absl::StrSplit(address.string_value(), ':');
      int port = 0;
      if (parts.size() == 2 && absl::SimpleAtoi(parts[1], &port)) max_port = std::max(max_port, port);
    }
  }
  auto* list = ps->second.mutable_list_value()->mutable_values();
  const std::string& last = list->Get(list->size() - 1).string_value();
  if (last.find(':') != std::string::npos) host = last.substr(0, last.find(':'));
  while (list->size() > num_ps) list->RemoveLast();
  while (list->size() < num_ps) list->Add()->set_string_value(absl::StrCat(host, ":", ++max_port));
  return WriteFileAtomic(path, ToJson(spec));
}

}  // namespace

absl::Status RunReshardCommand(const std::vector<std::string>& positional) {
  if (positional.size() != 1) {
    return absl::InvalidArgumentError("reshard needs RUN_DIR (a run of pstrain launch) and --ps=N");
  }
  int num_ps = 0;
  if (!absl::SimpleAtoi(absl::GetFlag(FLAGS_ps), &num_ps) || num_ps < 1 || num_ps > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("reshard: --ps=", absl::GetFlag(FLAGS_ps),
                                                   " is not a ps count (1 to 4096)"));
  }
  const std::string run_dir = positional[0];
  ASSIGN_OR_RETURN(const ReshardResult r, ReshardCheckpoint(run_dir + "/checkpoints", num_ps));
  if (r.from_ps == r.to_ps) {
    std::printf("pstrain: ckpt-%lld of %s is already for %d ps: nothing to do\n",
                static_cast<long long>(r.step), run_dir.c_str(), num_ps);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(RewriteSpecPs(run_dir + "/cluster_spec.json", num_ps));
  std::printf(
      "pstrain: ckpt-%lld of %s cut again for %d ps (was %d), %lld embedding rows moved, %d "
      "older checkpoints removed; %s/cluster_spec.json lists %d ps. Continue it with: pstrain "
      "launch --resume=%s\n",
      static_cast<long long>(r.step), run_dir.c_str(), r.to_ps, r.from_ps,
      static_cast<long long>(r.rows), r.removed, run_dir.c_str(), r.to_ps, run_dir.c_str());
  return absl::OkStatus();
}

}  // namespace pstrain

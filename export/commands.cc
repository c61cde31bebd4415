#include "export/commands.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "export/evaluate.h"
#include "export/onnx_export.h"
#include "export/saved_model.h"
#include "models/net_spec.h"

namespace pstrain {
namespace {

std::string Describe(const SavedModel &m) {
  return m.step < 0 ? m.source : absl::StrCat(m.source, " (step ", m.step, ")");
}

}  // namespace

absl::Status RunExport(const SavedModelCommand &command) {
  if (command.format != "onnx") {
    return absl::InvalidArgumentError(absl::StrCat("--format=", command.format, ": expected onnx"));
  }
  ASSIGN_OR_RETURN(const SavedModel saved, LoadSavedModel(command.run_dir, command.checkpoint));
  ASSIGN_OR_RETURN(const models::NetSpec net, models::GetNetSpec(saved.model));
  OnnxExportOptions options;
  options.norm = NormalizationFor(saved.dataset);
  options.metadata["pstrain.source"] = saved.source;
  options.metadata["pstrain.dataset"] = saved.dataset.empty() ? "mnist" : saved.dataset;
  if (saved.step >= 0) options.metadata["pstrain.checkpoint_step"] = absl::StrCat(saved.step);
  if (saved.recorded_accuracy >= 0) {
    options.metadata["pstrain.test_accuracy"] = absl::StrFormat("%.4f", saved.recorded_accuracy);
  }
  ASSIGN_OR_RETURN(const std::string bytes, ExportOnnx(net, saved.params, options));
  const std::string out = command.out.empty() ? command.run_dir + "/model.onnx" : command.out;
  RETURN_IF_ERROR(WriteFileAtomic(out, bytes));
  std::printf(
      "pstrain: wrote %s (ONNX, opset %d, %zu bytes): %s, %zu "
      "parameters, from %s\n",
      out.c_str(), kOnnxOpset, bytes.size(), saved.model.c_str(), saved.params.size(),
      Describe(saved).c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status RunEvaluate(const SavedModelCommand &command) {
  ASSIGN_OR_RETURN(const SavedModel saved, LoadSavedModel(command.run_dir, command.checkpoint));
  std::string dataset = !command.dataset.empty() ? command.dataset : saved.dataset;
  if (dataset.empty()) dataset = "mnist";
  if (dataset != "mnist" && dataset != "fashion_mnist") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset=", dataset, ": expected mnist or fashion_mnist"));
  }
  std::string data_dir = !command.data_dir.empty() ? command.data_dir : saved.data_dir;
  if (data_dir.empty()) data_dir = "data/mnist";
  ASSIGN_OR_RETURN(const Dataset test, LoadMnist(data_dir, Split::kTest));
  ASSIGN_OR_RETURN(const Evaluation e,
                   EvaluateParams(saved.model, saved.params, test, NormalizationFor(dataset)));
  std::printf(
      "pstrain: %s on %s test set (%s): accuracy %.4f (%lld of %lld), "
      "loss %.6f\n",
      Describe(saved).c_str(), dataset.c_str(), data_dir.c_str(), e.accuracy(),
      static_cast<long long>(e.correct), static_cast<long long>(e.count), e.mean_loss);
  if (saved.recorded_accuracy >= 0) {
    std::printf("pstrain: summary.json recorded %.4f\n", saved.recorded_accuracy);
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace pstrain

#include "export/commands.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "export/evaluate.h"
#include "export/onnx_export.h"
#include "export/png_image.h"
#include "export/saved_model.h"
#include "models/cpu/cpu_model.h"
#include "models/net_spec.h"

namespace pstrain {
namespace {

std::string Describe(const SavedModel& m) {
  return m.step < 0 ? m.source : absl::StrCat(m.source, " (step ", m.step, ")");
}

}  // namespace

absl::Status RunExport(const SavedModelCommand& command) {
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

absl::Status RunEvaluate(const SavedModelCommand& command) {
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

namespace {

// The images as a Dataset of the model's input size, so that GatherBatch
// normalises them exactly as training did.
absl::StatusOr<Dataset> ReadImages(const std::vector<std::string>& paths,
                                   const models::NetSpec& net, bool invert) {
  if (net.input.c != 1) {
    return absl::InvalidArgumentError(absl::StrCat(net.name, " takes ", net.input.c, " channels"));
  }
  Dataset d;
  d.rows = net.input.h;
  d.cols = net.input.w;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(GrayImage image, ReadPng(path));
    if (image.width != d.cols || image.height != d.rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", image.width, " x ", image.height, " pixels; ", net.name, " takes ", d.cols,
          " x ", d.rows, " (as MNIST: a white digit on black, centred)"));
    }
    if (invert) {
      for (uint8_t& p : image.pixels) p = static_cast<uint8_t>(255 - p);
    }
    d.pixels.insert(d.pixels.end(), image.pixels.begin(), image.pixels.end());
    d.labels.push_back(0);
    ++d.size;
  }
  return d;
}

// "digit.png: 7 (p 0.9987; then 2 0.0008, 3 0.0002)": the class, its
// probability, and the next two. Ties go to the lower class, as the
// evaluation's argmax.
std::string FormatPrediction(const std::string& path, absl::Span<const float> log_probs) {
  const int classes = static_cast<int>(log_probs.size());
  std::vector<int> order(log_probs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return log_probs[a] > log_probs[b]; });
  std::string line =
      absl::StrFormat("%s: %d (p %.4f", path, order[0], std::exp(log_probs[order[0]]));
  for (int k = 1; k < std::min(3, classes); ++k) {
    absl::StrAppendFormat(&line, "%s %d %.4f", k == 1 ? "; then" : ",", order[k],
                          std::exp(log_probs[order[k]]));
  }
  return line + ")";
}

}  // namespace

absl::Status RunPredict(const SavedModelCommand& command, const std::vector<std::string>& images,
                        bool invert) {
  if (images.empty()) return absl::InvalidArgumentError("predict needs one or more IMAGE.png");
  ASSIGN_OR_RETURN(const SavedModel saved, LoadSavedModel(command.run_dir, command.checkpoint));
  ASSIGN_OR_RETURN(const models::NetSpec net, models::GetNetSpec(saved.model));
  ASSIGN_OR_RETURN(const Dataset data, ReadImages(images, net, invert));
  constexpr int kBatch = 64;
  models::ModelOptions options;
  options.name = saved.model;
  options.max_batch = kBatch;
  ASSIGN_OR_RETURN(std::unique_ptr<models::cpu::CpuModel> model,
                   models::cpu::CpuModel::Create(net, options));
  RETURN_IF_ERROR(model->SetParams(saved.params));
  const Normalization norm = NormalizationFor(saved.dataset);
  const int classes = net.num_classes;
  const size_t image_size = static_cast<size_t>(data.rows) * data.cols;
  std::vector<float> batch_images(kBatch * image_size);
  std::vector<int32_t> batch_labels(kBatch);
  std::vector<float> log_probs;
  for (int64_t begin = 0; begin < data.size; begin += kBatch) {
    const int n = static_cast<int>(std::min<int64_t>(kBatch, data.size - begin));
    std::vector<int64_t> indices(static_cast<size_t>(n));
    std::iota(indices.begin(), indices.end(), begin);
    GatherBatch(data, indices, norm, batch_images.data(), batch_labels.data());
    models::Batch batch;
    batch.n = n;
    batch.images = batch_images.data();
    log_probs.resize(static_cast<size_t>(n) * classes);
    RETURN_IF_ERROR(model->Predict(batch, absl::MakeSpan(log_probs)));
    for (int i = 0; i < n; ++i) {
      std::printf("%s\n", FormatPrediction(images[static_cast<size_t>(begin + i)],
                                           absl::MakeConstSpan(log_probs).subspan(
                                               static_cast<size_t>(i) * classes, classes))
                              .c_str());
    }
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace pstrain

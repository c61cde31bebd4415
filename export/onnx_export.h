#pragma once

// A trained network as an ONNX model (opset 13), for any runtime:
//
//   ASSIGN_OR_RETURN(models::NetSpec net, models::GetNetSpec("mnist_cnn"));
//   ASSIGN_OR_RETURN(std::string bytes, ExportOnnx(net, params, options));
//
// The graph, for an input `image` of float [N, C, H, W] pixels in [0, 1]
// (PyTorch's ToTensor: p / 255):
//   Sub(mean), Div(std)   the training's normalisation, folded in (so a
//                         runtime feeds pixels, not pstrain's inputs)
//   Conv / MaxPool / Relu / Flatten + Gemm (transB)   layer for layer
//   LogSoftmax(axis 1)    output `log_probs`, float [N, num_classes]
// Dropout and Dropout2d are the identity at inference and are left out.
// Weights are initializers named as pstrain's tensors ("conv1.weight",
// PyTorch's layout), stored as little-endian raw data. The metadata
// (metadata_props) records the model, the normalisation and whatever the
// caller adds (the run, the checkpoint, the accuracy).

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dataset/mnist_dataset.h"
#include "models/net_spec.h"

namespace pstrain {

struct OnnxExportOptions {
  Normalization norm;                           // folded into the graph
  std::map<std::string, std::string> metadata;  // added to metadata_props
};

// The serialised ModelProto. InvalidArgument when `params` does not have
// the network's size or holds a value that is not finite.
absl::StatusOr<std::string> ExportOnnx(const models::NetSpec& net, absl::Span<const float> params,
                                       const OnnxExportOptions& options);

// The opset and IR version written (ONNX 1.8's: opset 13 needs IR 7).
inline constexpr int kOnnxOpset = 13;
inline constexpr int kOnnxIrVersion = 7;

}  // namespace pstrain

#pragma once

// Device-independent descriptions of the networks pstrain can train. A
// backend turns a NetSpec into layers; the ps never sees any of this.

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "models/layer.h"

namespace pstrain::models {

enum class LayerKind {
  kConv2d,     // out_channels, kernel (square), stride 1, no padding, bias
  kMaxPool2d,  // kernel = stride, no padding (floor)
  kRelu,
  kDropout,    // element-wise, probability p, scaled by 1/(1-p) when training
  kDropout2d,  // whole channels per example, probability p
  kLinear,     // out_features; input flattened C*H*W
};

struct LayerSpec {
  LayerKind kind = LayerKind::kRelu;
  std::string name;        // "conv1", "pool1", ...
  int out_channels = 0;    // conv2d: channels; linear: features
  int kernel = 0;          // conv2d / max_pool2d
  float p = 0.0f;          // dropout probability
};

struct NetSpec {
  std::string name;
  Shape input;             // one example, e.g. 1 x 28 x 28
  int num_classes = 10;    // the last layer's output size; log_softmax + NLL follow
  std::vector<LayerSpec> layers;
};

// The networks by name:
//  - "mnist_cnn": the seed's CNN. conv 1->10 5x5, max-pool 2, relu;
//    conv 10->20 5x5, dropout2d 0.5, max-pool 2, relu; flatten 320;
//    linear 320->50, relu, dropout 0.5; linear 50->10. 21,840 parameters.
//  - "mlp": 784->512->512->10 with relu (communication-heavy, 669,706
//    parameters).
//  - "cnn_large": conv 1->32 3x3, relu; conv 32->64 3x3, relu, max-pool 2,
//    dropout 0.25; linear 9216->128, relu, dropout 0.5; linear 128->10
//    (PyTorch's current MNIST example, 1.2M parameters).
// NotFound for any other name.
absl::StatusOr<NetSpec> GetNetSpec(absl::string_view model_name);

// Names accepted by GetNetSpec, for --help and error messages.
std::vector<std::string> ModelNames();

// Output shape of `layer` applied to `input`; InvalidArgument when the
// layer does not fit (kernel larger than the input, ...).
absl::StatusOr<Shape> LayerOutputShape(const LayerSpec& layer, Shape input);

// The parameter tensors of one layer, offsets relative to the layer:
// conv2d weight [out, in, k, k] and bias [out]; linear weight [out, in] and
// bias [out]. Every backend's layers and NetParamSpecs use these, so the
// flat layout cannot differ between them.
std::vector<ParamSpec> Conv2dParams(const std::string& name, int in_channels, int out_channels,
                                    int kernel);
std::vector<ParamSpec> LinearParams(const std::string& name, int in_features, int out_features);

// Parameter tensors of the whole network in flat-buffer order, with
// offsets; the same on every backend.
absl::StatusOr<std::vector<ParamSpec>> NetParamSpecs(const NetSpec& net);

// PyTorch's default initialisation (kaiming_uniform(a=sqrt(5)) for weights,
// which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for
// biases), drawn from SplitMix64(seed) tensor by tensor.
// REQUIRES: params.size() == total size of `specs`.
void InitParams(const std::vector<ParamSpec>& specs, uint64_t seed, float* params);

}  // namespace pstrain::models

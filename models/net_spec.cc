#include "models/net_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/random.h"
#include "common/status_macros.h"

namespace pstrain::models {
namespace {

LayerSpec Conv(std::string name, int out, int kernel) {
  return {LayerKind::kConv2d, std::move(name), out, kernel, 0.0f};
}
LayerSpec Pool(std::string name, int kernel) {
  return {LayerKind::kMaxPool2d, std::move(name), 0, kernel, 0.0f};
}
LayerSpec Relu(std::string name) { return {LayerKind::kRelu, std::move(name), 0, 0, 0.0f}; }
LayerSpec Dropout(std::string name, float p) {
  return {LayerKind::kDropout, std::move(name), 0, 0, p};
}
LayerSpec Dropout2d(std::string name, float p) {
  return {LayerKind::kDropout2d, std::move(name), 0, 0, p};
}
LayerSpec Linear(std::string name, int out) {
  return {LayerKind::kLinear, std::move(name), out, 0, 0.0f};
}

NetSpec MnistCnn() {
  return {"mnist_cnn",
          {1, 28, 28},
          10,
          {Conv("conv1", 10, 5), Pool("pool1", 2), Relu("relu1"), Conv("conv2", 20, 5),
           Dropout2d("conv2_drop", 0.5f), Pool("pool2", 2), Relu("relu2"), Linear("fc1", 50),
           Relu("relu3"), Dropout("fc1_drop", 0.5f), Linear("fc2", 10)}};
}

NetSpec Mlp() {
  return {"mlp",
          {1, 28, 28},
          10,
          {Linear("fc1", 512), Relu("relu1"), Linear("fc2", 512), Relu("relu2"),
           Linear("fc3", 10)}};
}

NetSpec CnnLarge() {
  return {"cnn_large",
          {1, 28, 28},
          10,
          {Conv("conv1", 32, 3), Relu("relu1"), Conv("conv2", 64, 3), Relu("relu2"),
           Pool("pool1", 2), Dropout("drop1", 0.25f), Linear("fc1", 128), Relu("relu3"),
           Dropout("drop2", 0.5f), Linear("fc2", 10)}};
}

}  // namespace

absl::StatusOr<NetSpec> GetNetSpec(absl::string_view model_name) {
  if (model_name == "mnist_cnn") return MnistCnn();
  if (model_name == "mlp") return Mlp();
  if (model_name == "cnn_large") return CnnLarge();
  return absl::NotFoundError(absl::StrCat("unknown model \"", model_name, "\" (known: ",
                                          absl::StrJoin(ModelNames(), ", "), ")"));
}

std::vector<std::string> ModelNames() { return {"mnist_cnn", "mlp", "cnn_large"}; }

absl::StatusOr<Shape> LayerOutputShape(const LayerSpec& layer, Shape in) {
  switch (layer.kind) {
    case LayerKind::kConv2d: {
      const Shape out{layer.out_channels, in.h - layer.kernel + 1, in.w - layer.kernel + 1};
      if (layer.out_channels < 1 || layer.kernel < 1 || out.h < 1 || out.w < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(layer.name, ": conv ", layer.kernel, "x", layer.kernel, " does not fit ",
                         in.h, "x", in.w));
      }
      return out;
    }
    case LayerKind::kMaxPool2d:
      if (layer.kernel < 1 || in.h < layer.kernel || in.w < layer.kernel) {
        return absl::InvalidArgumentError(
            absl::StrCat(layer.name, ": pool ", layer.kernel, " does not fit ", in.h, "x", in.w));
      }
      return Shape{in.c, in.h / layer.kernel, in.w / layer.kernel};
    case LayerKind::kRelu:
      return in;
    case LayerKind::kDropout:
    case LayerKind::kDropout2d:
      if (!(layer.p >= 0.0f && layer.p < 1.0f)) {
        return absl::InvalidArgumentError(absl::StrCat(layer.name, ": dropout p=", layer.p,
                                                       " outside [0, 1)"));
      }
      return in;
    case LayerKind::kLinear:
      if (layer.out_channels < 1) {
        return absl::InvalidArgumentError(absl::StrCat(layer.name, ": no output features"));
      }
      return Shape{layer.out_channels, 1, 1};
  }
  return absl::InternalError("unknown layer kind");
}

std::vector<ParamSpec> Conv2dParams(const std::string& name, int in_channels, int out_channels,
                                    int kernel) {
  const int fan_in = in_channels * kernel * kernel;
  const int64_t weights = int64_t{fan_in} * out_channels;
  return {{name + ".weight", {out_channels, in_channels, kernel, kernel}, 0, weights, fan_in},
          {name + ".bias", {out_channels}, weights, out_channels, fan_in}};
}

std::vector<ParamSpec> LinearParams(const std::string& name, int in_features, int out_features) {
  const int64_t weights = int64_t{out_features} * in_features;
  return {{name + ".weight", {out_features, in_features}, 0, weights, in_features},
          {name + ".bias", {out_features}, weights, out_features, in_features}};
}

absl::StatusOr<std::vector<ParamSpec>> NetParamSpecs(const NetSpec& net) {
  std::vector<ParamSpec> specs;
  int64_t offset = 0;
  Shape shape = net.input;
  for (const LayerSpec& layer : net.layers) {
    ASSIGN_OR_RETURN(const Shape out, LayerOutputShape(layer, shape));
    std::vector<ParamSpec> params;
    if (layer.kind == LayerKind::kConv2d) {
      params = Conv2dParams(layer.name, shape.c, layer.out_channels, layer.kernel);
    } else if (layer.kind == LayerKind::kLinear) {
      params = LinearParams(layer.name, static_cast<int>(shape.size()), layer.out_channels);
    }
    for (ParamSpec& p : params) {
      p.offset += offset;
      specs.push_back(std::move(p));
    }
    if (!params.empty()) offset = specs.back().offset + specs.back().size;
    shape = out;
  }
  if (shape.size() != net.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(net.name, ": last layer has ", shape.size(),
                                                   " outputs for ", net.num_classes, " classes"));
  }
  return specs;
}

void InitParams(const std::vector<ParamSpec>& specs, uint64_t seed, float* params) {
  SplitMix64 rng(Mix64(seed ^ 0x5EEDC0DEull));
  for (const ParamSpec& spec : specs) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(spec.fan_in));
    for (int64_t i = 0; i < spec.size; ++i) params[spec.offset + i] = rng.Uniform(-bound, bound);
  }
}

}  // namespace pstrain::models

// ExportOnnx: the graph's structure and weights, read back with ONNX's own
// schema. (Whether a runtime computes what pstrain computes is
// tests/integration/export_test.cc.)

#include "export/onnx_export.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/net_spec.h"
#include "pstrain_onnx/onnx.pb.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

struct Exported {
  models::NetSpec net;
  std::vector<models::ParamSpec> specs;
  std::vector<float> params;
  onnx::ModelProto model;
};

Exported Export(const std::string& name, const OnnxExportOptions& options = {}) {
  Exported e;
  e.net = *models::GetNetSpec(name);
  e.specs = *models::NetParamSpecs(e.net);
  int64_t total = 0;
  for (const auto& p : e.specs) total += p.size;
  e.params.resize(static_cast<size_t>(total));
  models::InitParams(e.specs, 7, e.params.data());
  auto bytes = ExportOnnx(e.net, e.params, options);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (bytes.ok()) {
    EXPECT_TRUE(e.model.ParseFromString(*bytes));
  }
  return e;
}

std::vector<std::string> OpTypes(const onnx::GraphProto& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.node()) ops.push_back(n.op_type());
  return ops;
}

std::vector<int64_t> Dims(const onnx::ValueInfoProto& v) {
  std::vector<int64_t> dims;
  for (const auto& d : v.type().tensor_type().shape().dim()) {
    dims.push_back(d.has_dim_param() ? -1 : d.dim_value());
  }
  return dims;
}

TEST(OnnxExport, MnistCnnIsTheTrainingGraphWithoutDropoutAndWithTheNormalisationFoldedIn) {
  const Exported e = Export("mnist_cnn");
  EXPECT_EQ(e.model.ir_version(), kOnnxIrVersion);
  ASSERT_EQ(e.model.opset_import_size(), 1);
  EXPECT_EQ(e.model.opset_import(0).domain(), "");
  EXPECT_EQ(e.model.opset_import(0).version(), 13);
  EXPECT_EQ(e.model.producer_name(), "pstrain");
  const onnx::GraphProto& g = e.model.graph();
  EXPECT_THAT(OpTypes(g), ElementsAre("Sub", "Div", "Conv", "MaxPool", "Relu", "Conv", "MaxPool",
                                      "Relu", "Flatten", "Gemm", "Relu", "Gemm", "LogSoftmax"));
  ASSERT_EQ(g.input_size(), 1);
  EXPECT_EQ(g.input(0).name(), "image");
  EXPECT_THAT(Dims(g.input(0)), ElementsAre(-1, 1, 28, 28));  // -1: the batch, "N"
  ASSERT_EQ(g.output_size(), 1);
  EXPECT_EQ(g.output(0).name(), "log_probs");
  EXPECT_THAT(Dims(g.output(0)), ElementsAre(-1, 10));
  EXPECT_EQ(g.node(0).input(0), "image");
  EXPECT_EQ(g.node(g.node_size() - 1).output(0), "log_probs");
  // Each node reads what the one before it wrote.
  for (int i = 1; i < g.node_size(); ++i)
    EXPECT_EQ(g.node(i).input(0), g.node(i - 1).output(0)) << i;
}

TEST(OnnxExport, EveryParameterTensorIsAnInitializerWithItsShapeAndExactBytes) {
  for (const std::string name : {"mnist_cnn", "cnn_large", "mlp"}) {
    SCOPED_TRACE(name);
    const Exported e = Export(name);
    std::map<std::string, const onnx::TensorProto*> inits;
    for (const auto& t : e.model.graph().initializer()) inits[t.name()] = &t;
    EXPECT_EQ(inits.size(),
              e.specs.size() + 2);  // + the normalisation's mean and std
    for (const models::ParamSpec& p : e.specs) {
      ASSERT_TRUE(inits.count(p.name)) << p.name;
      const onnx::TensorProto& t = *inits[p.name];
      EXPECT_EQ(t.data_type(), onnx::TensorProto::FLOAT);
      EXPECT_THAT(std::vector<int64_t>(t.dims().begin(), t.dims().end()),
                  ElementsAreArray(std::vector<int64_t>(p.dims.begin(), p.dims.end())));
      ASSERT_EQ(t.raw_data().size(), static_cast<size_t>(p.size) * 4);
      EXPECT_EQ(std::memcmp(t.raw_data().data(), e.params.data() + p.offset, t.raw_data().size()),
                0);
    }
  }
}

TEST(OnnxExport, TheLinearOnlyNetworkIsFlattenedFirst) {
  const Exported e = Export("mlp");
  EXPECT_THAT(OpTypes(e.model.graph()), ElementsAre("Sub", "Div", "Flatten", "Gemm", "Relu", "Gemm",
                                                    "Relu", "Gemm", "LogSoftmax"));
}

TEST(OnnxExport, TheNormalisationAndTheCallersMetadataAreRecorded) {
  OnnxExportOptions options;
  options.norm = {0.2860f, 0.3530f};
  options.metadata["pstrain.source"] = "runs/x/final_params.f32";
  const Exported e = Export("mnist_cnn", options);
  float mean = 0, std_dev = 0;
  for (const auto& t : e.model.graph().initializer()) {
    if (t.name() == "normalize.mean") std::memcpy(&mean, t.raw_data().data(), 4);
    if (t.name() == "normalize.std") std::memcpy(&std_dev, t.raw_data().data(), 4);
  }
  EXPECT_EQ(mean, 0.2860f);
  EXPECT_EQ(std_dev, 0.3530f);
  std::map<std::string, std::string> meta;
  for (const auto& p : e.model.metadata_props()) meta[p.key()] = p.value();
  EXPECT_EQ(meta["pstrain.model"], "mnist_cnn");
  EXPECT_EQ(meta["pstrain.source"], "runs/x/final_params.f32");
  EXPECT_THAT(meta["pstrain.normalization"], HasSubstr("0.286"));
  EXPECT_THAT(meta["pstrain.input"], HasSubstr("pixel / 255"));
}

TEST(OnnxExport, RefusesParametersOfAnotherSizeOrNotFinite) {
  const models::NetSpec net = *models::GetNetSpec("mnist_cnn");
  std::vector<float> params(21840, 0.5f);
  EXPECT_TRUE(ExportOnnx(net, params, {}).ok());
  std::vector<float> short_params(21839, 0.5f);
  auto s = ExportOnnx(net, short_params, {});
  EXPECT_TRUE(absl::IsInvalidArgument(s.status()));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("21840"));
  params[100] = std::numeric_limits<float>::quiet_NaN();
  s = ExportOnnx(net, params, {});
  EXPECT_TRUE(absl::IsInvalidArgument(s.status()));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("parameter 100"));
  params[100] = 0;
  OnnxExportOptions bad;
  bad.norm.std = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(ExportOnnx(net, params, bad).status()));
}

}  // namespace
}  // namespace pstrain

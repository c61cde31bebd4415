#include "export/onnx_export.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pstrain_onnx/onnx.pb.h"

namespace pstrain {
namespace {

using models::LayerKind;
using models::LayerSpec;
using models::ParamSpec;
using models::Shape;

void SetDims(onnx::TensorShapeProto* shape, const std::vector<int64_t>& dims, bool batch_dim) {
  if (batch_dim) shape->add_dim()->set_dim_param("N");
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

void AddValueInfo(const std::string& name, const std::vector<int64_t>& dims,
                  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* out) {
  onnx::ValueInfoProto* v = out->Add();
  v->set_name(name);
  onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  SetDims(t->mutable_shape(), dims, /*batch_dim=*/true);
}

// A float tensor from host floats, as little-endian raw data (every host
// pstrain supports is little-endian, as its checkpoints assume).
void AddInitializer(const std::string& name, const std::vector<int64_t>& dims,
                    absl::Span<const float> values, onnx::GraphProto* graph) {
  onnx::TensorProto* t = graph->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}

onnx::NodeProto* AddNode(const std::string& op, const std::string& name,
                         std::vector<std::string> inputs, const std::string& output,
                         onnx::GraphProto* graph) {
  onnx::NodeProto* n = graph->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (std::string& in : inputs) n->add_input(std::move(in));
  n->add_output(output);
  return n;
}

void AddInts(onnx::NodeProto* node, const std::string& name, const std::vector<int64_t>& values) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
}

void AddInt(onnx::NodeProto* node, const std::string& name, int64_t value) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

std::vector<int64_t> Dims(const ParamSpec& p) { return {p.dims.begin(), p.dims.end()}; }

void AddMetadata(const std::string& key, const std::string& value, onnx::ModelProto* model) {
  onnx::StringStringEntryProto* e = model->add_metadata_props();
  e->set_key(key);
  e->set_value(value);
}

// The network's layers as nodes, in order: the value flowing through is
// `x`; parameter tensors are taken from `specs` in flat-buffer order.
class LayerWriter {
 public:
  LayerWriter(const std::vector<ParamSpec>& specs, absl::Span<const float> params,
              onnx::GraphProto* g, std::string x)
      : specs_(specs), params_(params), g_(g), x_(std::move(x)) {}

  absl::Status Add(const LayerSpec& layer) {
    const std::string out = layer.name + ".out";
    switch (layer.kind) {
      case LayerKind::kConv2d: {
        if (flat_)
          return absl::InvalidArgumentError(layer.name + ": a convolution after a linear layer");
        ASSIGN_OR_RETURN(const auto wb, WeightAndBias());
        onnx::NodeProto* n = AddNode("Conv", layer.name, {x_, wb.first, wb.second}, out, g_);
        AddInts(n, "kernel_shape", {layer.kernel, layer.kernel});
        AddInts(n, "strides", {1, 1});
        AddInts(n, "pads", {0, 0, 0, 0});
        break;
      }
      case LayerKind::kMaxPool2d: {
        onnx::NodeProto* n = AddNode("MaxPool", layer.name, {x_}, out, g_);
        AddInts(n, "kernel_shape", {layer.kernel, layer.kernel});
        AddInts(n, "strides", {layer.kernel, layer.kernel});
        break;
      }
      case LayerKind::kRelu:
        AddNode("Relu", layer.name, {x_}, out, g_);
        break;
      case LayerKind::kDropout:
      case LayerKind::kDropout2d:
        return absl::OkStatus();  // the identity at inference
      case LayerKind::kLinear: {
        if (!flat_) {
          const std::string flattened = layer.name + ".flatten";
          AddInt(AddNode("Flatten", flattened, {x_}, flattened + ".out", g_), "axis", 1);
          x_ = flattened + ".out";
          flat_ = true;
        }
        ASSIGN_OR_RETURN(const auto wb, WeightAndBias());
        AddInt(AddNode("Gemm", layer.name, {x_, wb.first, wb.second}, out, g_), "transB", 1);
        break;
      }
    }
    x_ = out;
    return absl::OkStatus();
  }

  const std::string& x() const { return x_; }
  bool flat() const { return flat_; }
  bool all_params_used() const { return next_ == specs_.size(); }

 private:
  // The next two parameter tensors as initializers; their names.
  absl::StatusOr<std::pair<std::string, std::string>> WeightAndBias() {
    if (next_ + 2 > specs_.size())
      return absl::InternalError("fewer parameter tensors than layers");
    const ParamSpec& w = specs_[next_++];
    const ParamSpec& b = specs_[next_++];
    AddInitializer(w.name, Dims(w), params_.subspan(w.offset, w.size), g_);
    AddInitializer(b.name, Dims(b), params_.subspan(b.offset, b.size), g_);
    return std::make_pair(w.name, b.name);
  }

  const std::vector<ParamSpec>& specs_;
  absl::Span<const float> params_;
  onnx::GraphProto* g_;
  std::string x_;
  size_t next_ = 0;
  bool flat_ = false;  // after a Linear (or a Flatten): [N, features]
};

absl::Status CheckInputs(const models::NetSpec& net, const std::vector<ParamSpec>& specs,
                         absl::Span<const float> params, const OnnxExportOptions& options) {
  int64_t total = 0;
  for (const ParamSpec& p : specs) total += p.size;
  if (static_cast<int64_t>(params.size()) != total) {
    return absl::InvalidArgumentError(
        absl::StrCat(net.name, " has ", total, " parameters; ", params.size(), " were given"));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!std::isfinite(params[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", i, " is not finite (", params[i], ")"));
    }
  }
  if (!(options.norm.std > 0) || !std::isfinite(options.norm.mean)) {
    return absl::InvalidArgumentError("the normalisation needs a finite mean and a positive std");
  }
  return absl::OkStatus();
}

// The model's header: versions, producer, what the input and output are.
void DescribeModel(const models::NetSpec& net, const OnnxExportOptions& options,
                   onnx::ModelProto* model) {
  model->set_ir_version(kOnnxIrVersion);
  model->set_producer_name("pstrain");
  model->set_producer_version(PSTRAIN_VERSION);
  model->set_model_version(1);
  model->set_doc_string(absl::StrCat(
      net.name, " trained by pstrain. Input `image`: float [N, ", net.input.c, ", ", net.input.h,
      ", ", net.input.w, "], pixels / 255 (in [0, 1]); the normalisation (x - ", options.norm.mean,
      ") / ", options.norm.std, " is part of the graph. Output `log_probs`: float [N, ",
      net.num_classes, "], log-softmax; the class is its argmax."));
  onnx::OperatorSetIdProto* opset = model->add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  AddMetadata("pstrain.model", net.name, model);
  AddMetadata("pstrain.input",
              absl::StrCat("image: float [N, ", net.input.c, ", ", net.input.h, ", ", net.input.w,
                           "], pixel / 255"),
              model);
  AddMetadata("pstrain.normalization",
              absl::StrCat("(x - ", options.norm.mean, ") / ", options.norm.std, ", in the graph"),
              model);
  for (const auto& [key, value] : options.metadata) AddMetadata(key, value, model);
}

// Normalisation, exactly as GatherBatch does it (subtract, then divide);
// returns the normalised value's name.
std::string AddNormalization(const Normalization& norm, onnx::GraphProto* g) {
  const float mean = norm.mean;
  const float std_dev = norm.std;
  AddInitializer("normalize.mean", {}, absl::MakeConstSpan(&mean, 1), g);
  AddInitializer("normalize.std", {}, absl::MakeConstSpan(&std_dev, 1), g);
  AddNode("Sub", "normalize.sub", {"image", "normalize.mean"}, "normalize.centered", g);
  AddNode("Div", "normalize.div", {"normalize.centered", "normalize.std"}, "normalize.out", g);
  return "normalize.out";
}

}  // namespace

absl::StatusOr<std::string> ExportOnnx(const models::NetSpec& net, absl::Span<const float> params,
                                       const OnnxExportOptions& options) {
  ASSIGN_OR_RETURN(const std::vector<ParamSpec> specs, models::NetParamSpecs(net));
  RETURN_IF_ERROR(CheckInputs(net, specs, params, options));
  onnx::ModelProto model;
  DescribeModel(net, options, &model);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name(net.name);
  AddValueInfo("image", {net.input.c, net.input.h, net.input.w}, g->mutable_input());
  LayerWriter layers(specs, params, g, AddNormalization(options.norm, g));
  Shape shape = net.input;
  for (const LayerSpec& layer : net.layers) {
    ASSIGN_OR_RETURN(shape, models::LayerOutputShape(layer, shape));
    RETURN_IF_ERROR(layers.Add(layer));
  }
  if (!layers.all_params_used()) return absl::InternalError("parameter tensors left over");
  if (!layers.flat() || shape.size() != net.num_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat(net.name, ": the last layer does not give ", net.num_classes, " classes"));
  }
  AddInt(AddNode("LogSoftmax", "log_softmax", {layers.x()}, "log_probs", g), "axis", 1);
  AddValueInfo("log_probs", {net.num_classes}, g->mutable_output());

  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    return absl::InternalError("cannot serialise the ONNX model");
  }
  return bytes;
}

}  // namespace pstrain

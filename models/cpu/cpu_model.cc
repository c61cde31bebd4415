#include "models/cpu/cpu_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/cpu/conv2d.h"
#include "models/cpu/dropout.h"
#include "models/cpu/linear.h"
#include "models/cpu/max_pool2d.h"
#include "models/cpu/relu.h"
#include "models/model_checks.h"

namespace pstrain::models::cpu {
namespace {

// REQUIRES: LayerOutputShape(spec, in) is OK, so the constructors' CHECKs hold.
std::unique_ptr<Layer> MakeLayer(const LayerSpec& spec, int index, Shape in, int max_batch) {
  switch (spec.kind) {
    case LayerKind::kConv2d:
      return std::make_unique<Conv2d>(spec.name, in, spec.out_channels, spec.kernel, max_batch);
    case LayerKind::kMaxPool2d:
      return std::make_unique<MaxPool2d>(spec.name, in, spec.kernel, max_batch);
    case LayerKind::kRelu:
      return std::make_unique<Relu>(spec.name, in, max_batch);
    case LayerKind::kDropout:
      return std::make_unique<Dropout>(spec.name, in, spec.p, index, max_batch);
    case LayerKind::kDropout2d:
      return std::make_unique<Dropout2d>(spec.name, in, spec.p, index, max_batch);
    case LayerKind::kLinear:
      return std::make_unique<Linear>(spec.name, in, spec.out_channels, max_batch);
  }
  return nullptr;
}

bool SameSpec(const ParamSpec& a, const ParamSpec& b) {
  return a.name == b.name && a.dims == b.dims && a.offset == b.offset && a.size == b.size;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateCpuModel(const NetSpec& net,
                                                      const ModelOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CpuModel> model, CpuModel::Create(net, options));
  return std::unique_ptr<Model>(std::move(model));
}

absl::StatusOr<std::unique_ptr<CpuModel>> CpuModel::Create(const NetSpec& net,
                                                           const ModelOptions& options) {
  ASSIGN_OR_RETURN(std::vector<ParamSpec> specs, CheckModelOptions(net, options));
  std::unique_ptr<CpuModel> model(new CpuModel(net, std::move(specs), options));
  RETURN_IF_ERROR(model->BuildLayers());
  return model;
}

CpuModel::CpuModel(NetSpec net, std::vector<ParamSpec> specs, const ModelOptions& options)
    : net_(std::move(net)),
      specs_(std::move(specs)),
      max_batch_(options.max_batch),
      seed_(options.seed),
      loss_(net_.num_classes),
      log_probs_(int64_t{options.max_batch} * net_.num_classes) {}

// Builds the layers and their buffers, and checks that the layers' own
// parameter tensors, laid end to end, are exactly NetParamSpecs: the flat
// layout every backend and the parameter servers agree on.
absl::Status CpuModel::BuildLayers() {
  Shape shape = net_.input;
  int64_t offset = 0, largest = 0;
  std::vector<ParamSpec> laid_out;
  for (int i = 0; i < static_cast<int>(net_.layers.size()); ++i) {
    ASSIGN_OR_RETURN(const Shape out, LayerOutputShape(net_.layers[i], shape));
    layers_.push_back(MakeLayer(net_.layers[i], i, shape, max_batch_));
    CHECK(layers_.back()->output_shape() == out) << layers_.back()->name();
    for (ParamSpec p : layers_.back()->params()) {
      p.offset += offset;
      laid_out.push_back(std::move(p));
    }
    layer_offsets_.push_back(offset);
    offset += layers_.back()->num_params();
    activations_.emplace_back(out.size() * max_batch_);
    largest = std::max({largest, shape.size(), out.size()});
    shape = out;
  }
  if (!std::equal(laid_out.begin(), laid_out.end(), specs_.begin(), specs_.end(), SameSpec)) {
    return absl::InternalError(
        absl::StrCat(net_.name, ": layer parameters differ from NetParamSpecs"));
  }
  params_.assign(offset, 0.0f);
  for (std::vector<float>& grad : grad_) grad.resize(largest * max_batch_);
  return absl::OkStatus();
}

absl::Status CpuModel::SetParams(absl::Span<const float> params) {
  RETURN_IF_ERROR(CheckFloatCount(net_.name, "SetParams", static_cast<int64_t>(params.size()),
                                  static_cast<int64_t>(params_.size())));
  ahead_batch_ = Batch();
  std::copy(params.begin(), params.end(), params_.begin());
  return absl::OkStatus();
}

absl::StatusOr<float> CpuModel::ForwardBackward(const Batch& batch, absl::Span<float> grads) {
  RETURN_IF_ERROR(CheckBatch(net_.name, batch, max_batch_, /*training=*/true));
  RETURN_IF_ERROR(CheckFloatCount(net_.name, "gradient buffer", static_cast<int64_t>(grads.size()),
                                  static_cast<int64_t>(params_.size())));
  const BatchContext ctx{batch.n, /*training=*/true, seed_, batch.example_keys};
  RETURN_IF_ERROR(Forward(ctx, batch.images));
  return LossAndBackward(ctx, batch, grads.data());
}

absl::StatusOr<float> CpuModel::LossAndBackward(const BatchContext& ctx, const Batch& batch,
                                                float* grads) {
  ASSIGN_OR_RETURN(const double loss, loss_.Forward(batch.n, activations_.back().data(),
                                                    batch.labels, log_probs_.data()));
  loss_.Backward(batch.n, log_probs_.data(), batch.labels, grad_[0].data());
  RETURN_IF_ERROR(Backward(ctx, batch.images, grads));
  return static_cast<float>(loss);
}

absl::Status CpuModel::ForwardAhead(const Batch& batch, absl::Span<const float> params,
                                    const std::function<absl::Status(int64_t end)>& ready) {
  ahead_batch_ = Batch();  // a refused batch ends an earlier pass too
  RETURN_IF_ERROR(CheckBatch(net_.name, batch, max_batch_, /*training=*/true));
  RETURN_IF_ERROR(CheckFloatCount(net_.name, "ForwardAhead", static_cast<int64_t>(params.size()),
                                  static_cast<int64_t>(params_.size())));
  const BatchContext ctx{batch.n, /*training=*/true, seed_, batch.example_keys};
  RETURN_IF_ERROR(Forward(ctx, batch.images, &ready, params.data()));
  ahead_batch_ = batch;
  return absl::OkStatus();
}

absl::StatusOr<float> CpuModel::BackwardAfterAhead(absl::Span<float> grads) {
  const Batch batch = ahead_batch_;
  ahead_batch_ = Batch();
  if (batch.n == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(net_.name, ": BackwardAfterAhead without a ForwardAhead just before"));
  }
  RETURN_IF_ERROR(CheckFloatCount(net_.name, "gradient buffer", static_cast<int64_t>(grads.size()),
                                  static_cast<int64_t>(params_.size())));
  const BatchContext ctx{batch.n, /*training=*/true, seed_, batch.example_keys};
  return LossAndBackward(ctx, batch, grads.data());
}

absl::StatusOr<EvalResult> CpuModel::Evaluate(const Batch& batch) {
  RETURN_IF_ERROR(CheckBatch(net_.name, batch, max_batch_, /*training=*/false));
  const BatchContext ctx{batch.n, /*training=*/false, seed_, batch.example_keys};
  RETURN_IF_ERROR(Forward(ctx, batch.images));
  const float* logits = activations_.back().data();
  ASSIGN_OR_RETURN(const double loss,
                   loss_.Forward(batch.n, logits, batch.labels, log_probs_.data()));
  EvalResult result{loss * batch.n, 0, batch.n};
  const int classes = net_.num_classes;
  for (int i = 0; i < batch.n; ++i) {
    const float* row = logits + int64_t{i} * classes;
    // max_element returns the first maximum: ties go to the lowest class.
    result.correct += (std::max_element(row, row + classes) - row) == batch.labels[i];
  }
  return result;
}

absl::StatusOr<BatchBuffer> CpuModel::InputBuffer() {
  if (input_labels_.empty()) {
    input_images_.resize(static_cast<size_t>(net_.input.size() * max_batch_));
    input_labels_.resize(static_cast<size_t>(max_batch_));
    input_keys_.resize(static_cast<size_t>(max_batch_));
  }
  return BatchBuffer{absl::MakeSpan(input_images_), absl::MakeSpan(input_labels_),
                     absl::MakeSpan(input_keys_)};
}

absl::Status CpuModel::Predict(const Batch& batch, absl::Span<float> log_probs) {
  RETURN_IF_ERROR(CheckBatchSize(net_.name, batch.n, max_batch_));
  const int classes = net_.num_classes;
  if (batch.images == nullptr || log_probs.size() != static_cast<size_t>(batch.n) * classes) {
    return absl::InvalidArgumentError(absl::StrCat(net_.name, ": Predict needs images and ",
                                                   batch.n, " x ", classes, " log-probabilities"));
  }
  const BatchContext ctx{batch.n, /*training=*/false, seed_, nullptr};
  RETURN_IF_ERROR(Forward(ctx, batch.images));
  // The loss's log-softmax, with labels it does not need for that.
  const std::vector<int32_t> labels(static_cast<size_t>(batch.n), 0);
  RETURN_IF_ERROR(loss_.Forward(batch.n, activations_.back().data(), labels.data(), log_probs_.data())
                      .status());
  std::copy_n(log_probs_.data(), log_probs.size(), log_probs.data());
  return absl::OkStatus();
}

absl::Status CpuModel::Forward(const BatchContext& ctx, const float* images,
                               const std::function<absl::Status(int64_t end)>* ahead,
                               const float* ahead_params) {
  ahead_batch_ = Batch();  // whatever ForwardAhead left, the activations are overwritten
  const float* x = images;
  const bool timed = layer_spans_ != nullptr && ctx.training;
  for (size_t l = 0; l < layers_.size(); ++l) {
    float* y = activations_[l].data();
    if (ahead != nullptr) {
      const int64_t begin = layer_offsets_[l], end = begin + layers_[l]->num_params();
      RETURN_IF_ERROR((*ahead)(end));
      std::copy(ahead_params + begin, ahead_params + end, params_.begin() + begin);
    }
    const int64_t start = timed ? UnixMicros() : 0;
    RETURN_IF_ERROR(layers_[l]->Forward(ctx, params_.data() + layer_offsets_[l], x, y));
    if (timed) {
      layer_spans_->push_back(
          {&net_.layers[l].name, false, ahead != nullptr, start, UnixMicros() - start});
    }
    x = y;
  }
  return absl::OkStatus();
}

// Walks the layers backwards, the input gradient of one layer becoming the
// output gradient of the one before; the first layer computes no dx.
absl::Status CpuModel::Backward(const BatchContext& ctx, const float* images, float* grads) {
  int dy = 0;
  const bool timed = layer_spans_ != nullptr;
  for (size_t l = layers_.size(); l-- > 0;) {
    const float* x = l == 0 ? images : activations_[l - 1].data();
    float* dx = l == 0 ? nullptr : grad_[1 - dy].data();
    const int64_t start = timed ? UnixMicros() : 0;
    RETURN_IF_ERROR(layers_[l]->Backward(ctx, params_.data() + layer_offsets_[l], x,
                                         activations_[l].data(), grad_[dy].data(), dx,
                                         grads + layer_offsets_[l]));
    if (timed) {
      layer_spans_->push_back({&net_.layers[l].name, true, false, start, UnixMicros() - start});
    }
    if (backward_done_ != nullptr) (*backward_done_)(layer_offsets_[l]);
    dy = 1 - dy;
  }
  return absl::OkStatus();
}

}  // namespace pstrain::models::cpu

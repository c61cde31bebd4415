#include "models/cuda/cuda_model.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/cuda/conv2d.h"
#include "models/cuda/cuda_status.h"
#include "models/cuda/dropout.h"
#include "models/cuda/linear.h"
#include "models/cuda/max_pool2d.h"
#include "models/cuda/relu.h"
#include "models/model_checks.h"

namespace pstrain::models::cuda {
namespace {

// REQUIRES: LayerOutputShape(spec, in) is OK, so the layers' CHECKs hold.
absl::StatusOr<std::unique_ptr<Layer>> MakeLayer(CudaContext& context, const LayerSpec& spec,
                                                 int index, Shape in, int max_batch) {
  switch (spec.kind) {
    case LayerKind::kConv2d:
      return Conv2d::Create(context, spec.name, in, spec.out_channels, spec.kernel, max_batch);
    case LayerKind::kMaxPool2d:
      return MaxPool2d::Create(context, spec.name, in, spec.kernel, max_batch);
    case LayerKind::kRelu:
      return std::make_unique<Relu>(context, spec.name, in, max_batch);
    case LayerKind::kDropout:
      return Dropout::Create(context, spec.name, in, spec.p, index, max_batch);
    case LayerKind::kDropout2d:
      return Dropout2d::Create(context, spec.name, in, spec.p, index, max_batch);
    case LayerKind::kLinear:
      return Linear::Create(context, spec.name, in, spec.out_channels, max_batch);
  }
  return absl::InternalError(absl::StrCat(spec.name, ": unknown layer kind"));
}

bool SameSpec(const ParamSpec& a, const ParamSpec& b) {
  return a.name == b.name && a.dims == b.dims && a.offset == b.offset && a.size == b.size;
}

template <typename T>
absl::Status Allocate(absl::string_view what, int64_t size, DeviceArray<T>& device,
                      PinnedArray<T>& staging) {
  ASSIGN_OR_RETURN(device, DeviceArray<T>::Create(what, size));
  ASSIGN_OR_RETURN(staging, PinnedArray<T>::Create(absl::StrCat(what, " staging"), size));
  return absl::OkStatus();
}

// Where the device copies `count` elements from: `from` itself when they
// lie in `staging` (a batch gathered into InputBuffer, wherever in it),
// else the start of `staging`, after a host copy there.
template <typename T>
const T* Staged(const T* from, int64_t count, const PinnedArray<T>& staging) {
  const auto at = reinterpret_cast<uintptr_t>(from);
  const auto begin = reinterpret_cast<uintptr_t>(staging.data());
  const uintptr_t bytes = sizeof(T) * static_cast<uintptr_t>(count);
  const uintptr_t capacity = sizeof(T) * static_cast<uintptr_t>(staging.size());
  if (at >= begin && bytes <= capacity && at - begin <= capacity - bytes) return from;
  std::memmove(staging.data(), from, bytes);  // memmove: `from` may overlap the staging's end
  return staging.data();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(const NetSpec& net,
                                                       const ModelOptions& options, int device) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> model, CudaModel::Create(net, options, device));
  return std::unique_ptr<Model>(std::move(model));
}

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Create(const NetSpec& net,
                                                             const ModelOptions& options,
                                                             int device) {
  ASSIGN_OR_RETURN(std::vector<ParamSpec> specs, CheckModelOptions(net, options));
  ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> context, CudaContext::Create(device));
  std::unique_ptr<CudaModel> model(
      new CudaModel(net, std::move(specs), options, std::move(context)));
  if (absl::Status status = model->Init(); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(net.name, " on ", model->device_description(),
                                                    ": ", status.message()));
  }
  return model;
}

CudaModel::CudaModel(NetSpec net, std::vector<ParamSpec> specs, const ModelOptions& options,
                     std::unique_ptr<CudaContext> context)
    : net_(std::move(net)),
      specs_(std::move(specs)),
      max_batch_(options.max_batch),
      seed_(options.seed),
      loss_(net_.num_classes),
      context_(std::move(context)) {}

CudaModel::~CudaModel() {
  if (context_->Activate().ok()) {
    (void)cudaStreamSynchronize(copy_stream_.get());
    (void)cudaStreamSynchronize(context_->stream());
  }
  (void)cudaGetLastError();
}

// Streams and events, then the layers and buffers; parameters start at zero.
absl::Status CudaModel::Init() {
  RETURN_IF_ERROR(context_->Activate());
  ASSIGN_OR_RETURN(copy_stream_, CreateStream());
  for (Event* event : {&params_uploaded_, &batch_uploaded_, &loss_ready_, &compute_idle_}) {
    ASSIGN_OR_RETURN(*event, CreateEvent());
  }
  RETURN_IF_ERROR(BuildLayers());
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(params_.data(), 0, params_.bytes(), context_->stream()));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(context_->stream()));
  return absl::OkStatus();
}

// Builds the layers and their buffers, and checks that the layers' own
// parameter tensors, laid end to end, are exactly NetParamSpecs: the flat
// layout every backend and the parameter servers agree on.
absl::Status CudaModel::BuildLayers() {
  Shape shape = net_.input;
  int64_t offset = 0, largest = 0;
  std::vector<ParamSpec> laid_out;
  for (int i = 0; i < static_cast<int>(net_.layers.size()); ++i) {
    ASSIGN_OR_RETURN(const Shape out, LayerOutputShape(net_.layers[i], shape));
    ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer,
                     MakeLayer(*context_, net_.layers[i], i, shape, max_batch_));
    CHECK(layer->output_shape() == out) << layer->name();
    for (ParamSpec p : layer->params()) {
      p.offset += offset;
      laid_out.push_back(std::move(p));
    }
    layer_offsets_.push_back(offset);
    offset += layer->num_params();
    ASSIGN_OR_RETURN(activations_.emplace_back(),
                     DeviceArray<float>::Create(layer->name() + ".y", out.size() * max_batch_));
    ASSIGN_OR_RETURN(grads_ready_.emplace_back(), CreateEvent());
    layers_.push_back(std::move(layer));
    largest = std::max({largest, shape.size(), out.size()});
    shape = out;
  }
  if (!std::equal(laid_out.begin(), laid_out.end(), specs_.begin(), specs_.end(), SameSpec)) {
    return absl::InternalError(
        absl::StrCat(net_.name, ": layer parameters differ from NetParamSpecs"));
  }
  return AllocateBuffers(largest);
}

absl::Status CudaModel::AllocateBuffers(int64_t largest_activation) {
  const int64_t params = specs_.empty() ? 0 : specs_.back().offset + specs_.back().size;
  const int64_t batch = max_batch_;
  RETURN_IF_ERROR(Allocate("params", params, params_, params_staging_));
  RETURN_IF_ERROR(Allocate("grads", params, grads_, grads_staging_));
  RETURN_IF_ERROR(Allocate("loss stats", 2 * batch, stats_, stats_staging_));
  RETURN_IF_ERROR(Allocate("images", batch * net_.input.size(), images_, images_staging_));
  RETURN_IF_ERROR(Allocate("labels", batch, labels_, labels_staging_));
  RETURN_IF_ERROR(Allocate("example keys", batch, keys_, keys_staging_));
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(grad_[i], DeviceArray<float>::Create(absl::StrCat("activation grad ", i),
                                                          batch * largest_activation));
  }
  ASSIGN_OR_RETURN(log_probs_, DeviceArray<float>::Create("log_probs", batch * net_.num_classes));
  return absl::OkStatus();
}

// The copy stream first waits for the compute stream's queued work (which
// may still read the parameters after a failed step), and the staging
// buffer for the previous upload out of it.
absl::Status CudaModel::SetParams(absl::Span<const float> params) {
  RETURN_IF_ERROR(CheckFloatCount(net_.name, "SetParams", static_cast<int64_t>(params.size()),
                                  params_.size()));
  RETURN_IF_ERROR(context_->Activate());
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(params_uploaded_.get()));
  std::copy(params.begin(), params.end(), params_staging_.data());
  CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_idle_.get(), context_->stream()));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_.get(), compute_idle_.get(), 0));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params_.data(), params_staging_.data(), params_.bytes(),
                                       cudaMemcpyHostToDevice, copy_stream_.get()));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(params_uploaded_.get(), copy_stream_.get()));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(context_->stream(), params_uploaded_.get(), 0));
  return absl::OkStatus();
}

absl::StatusOr<float> CudaModel::ForwardBackward(const Batch& batch, absl::Span<float> grads) {
  RETURN_IF_ERROR(CheckBatch(net_.name, batch, max_batch_, /*training=*/true));
  RETURN_IF_ERROR(CheckFloatCount(net_.name, "gradient buffer", static_cast<int64_t>(grads.size()),
                                  grads_.size()));
  RETURN_IF_ERROR(loss_.CheckLabels(batch.n, batch.labels));
  RETURN_IF_ERROR(context_->Activate());
  RETURN_IF_ERROR(Upload(batch, /*training=*/true));
  const BatchContext ctx{batch.n, /*training=*/true, seed_, keys_.data()};
  RETURN_IF_ERROR(Forward(ctx));
  RETURN_IF_ERROR(loss_.Forward(context_->stream(), batch.n, activations_.back().data(),
                                labels_.data(), log_probs_.data(), stats_.data()));
  RETURN_IF_ERROR(DownloadAfter(loss_ready_.get(), stats_staging_.data(), stats_.data(),
                                sizeof(float) * 2 * batch.n));
  RETURN_IF_ERROR(loss_.Backward(context_->stream(), batch.n, log_probs_.data(), labels_.data(),
                                 grad_[0].data()));
  RETURN_IF_ERROR(Backward(ctx));
  RETURN_IF_ERROR(Finish());
  std::copy_n(grads_staging_.data(), grads_staging_.size(), grads.data());
  return static_cast<float>(LogSoftmaxNll::MeanLoss(batch.n, stats_staging_.data()));
}

absl::StatusOr<EvalResult> CudaModel::Evaluate(const Batch& batch) {
  RETURN_IF_ERROR(CheckBatch(net_.name, batch, max_batch_, /*training=*/false));
  RETURN_IF_ERROR(loss_.CheckLabels(batch.n, batch.labels));
  RETURN_IF_ERROR(context_->Activate());
  RETURN_IF_ERROR(Upload(batch, /*training=*/false));
  const BatchContext ctx{batch.n, /*training=*/false, seed_, nullptr};
  RETURN_IF_ERROR(Forward(ctx));
  RETURN_IF_ERROR(loss_.Forward(context_->stream(), batch.n, activations_.back().data(),
                                labels_.data(), log_probs_.data(), stats_.data()));
  RETURN_IF_ERROR(DownloadAfter(loss_ready_.get(), stats_staging_.data(), stats_.data(),
                                sizeof(float) * 2 * batch.n));
  RETURN_IF_ERROR(Finish());
  const double loss = LogSoftmaxNll::MeanLoss(batch.n, stats_staging_.data());
  return EvalResult{loss * batch.n, LogSoftmaxNll::Correct(batch.n, stats_staging_.data()),
                    batch.n};
}

absl::StatusOr<BatchBuffer> CudaModel::InputBuffer() {
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(batch_uploaded_.get()));
  return BatchBuffer{absl::MakeSpan(images_staging_.data(), images_staging_.size()),
                     absl::MakeSpan(labels_staging_.data(), labels_staging_.size()),
                     absl::MakeSpan(keys_staging_.data(), keys_staging_.size())};
}

// Waits for the previous upload to leave the staging buffers, and has the
// copies wait for the compute stream's queued work, which may still read the
// batch (both only matter after a step that failed half-way).
absl::Status CudaModel::Upload(const Batch& batch, bool training) {
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(batch_uploaded_.get()));
  const int64_t n = batch.n, pixels = n * net_.input.size();
  const float* images = Staged(batch.images, pixels, images_staging_);
  const int32_t* labels = Staged(batch.labels, n, labels_staging_);
  cudaStream_t copy = copy_stream_.get();
  CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_idle_.get(), context_->stream()));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy, compute_idle_.get(), 0));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(images_.data(), images, sizeof(float) * pixels,
                                       cudaMemcpyHostToDevice, copy));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(labels_.data(), labels, sizeof(int32_t) * n,
                                       cudaMemcpyHostToDevice, copy));
  if (training) {
    const uint64_t* keys = Staged(batch.example_keys, n, keys_staging_);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(keys_.data(), keys, sizeof(uint64_t) * n,
                                         cudaMemcpyHostToDevice, copy));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(batch_uploaded_.get(), copy));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(context_->stream(), batch_uploaded_.get(), 0));
  return absl::OkStatus();
}

absl::Status CudaModel::Forward(const BatchContext& ctx) {
  const float* x = images_.data();
  for (size_t l = 0; l < layers_.size(); ++l) {
    float* y = activations_[l].data();
    RETURN_IF_ERROR(layers_[l]->Forward(ctx, params_.data() + layer_offsets_[l], x, y));
    x = y;
  }
  return absl::OkStatus();
}

// Walks the layers backwards, the input gradient of one layer becoming the
// output gradient of the one before; the first layer computes no dx. A
// layer's parameter gradient is final once its Backward is queued, so its
// download is queued right behind it.
absl::Status CudaModel::Backward(const BatchContext& ctx) {
  int dy = 0;
  for (size_t l = layers_.size(); l-- > 0;) {
    const float* x = l == 0 ? images_.data() : activations_[l - 1].data();
    float* dx = l == 0 ? nullptr : grad_[1 - dy].data();
    const int64_t offset = layer_offsets_[l];
    RETURN_IF_ERROR(layers_[l]->Backward(ctx, params_.data() + offset, x, activations_[l].data(),
                                         grad_[dy].data(), dx, grads_.data() + offset));
    if (const int64_t count = layers_[l]->num_params(); count > 0) {
      RETURN_IF_ERROR(DownloadAfter(grads_ready_[l].get(), grads_staging_.data() + offset,
                                    grads_.data() + offset, sizeof(float) * count));
    }
    dy = 1 - dy;
  }
  return absl::OkStatus();
}

absl::Status CudaModel::DownloadAfter(cudaEvent_t event, void* dst, const void* src, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaEventRecord(event, context_->stream()));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_.get(), event, 0));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, copy_stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaModel::Finish() {
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(context_->stream()));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_.get()));
  return absl::OkStatus();
}

}  // namespace pstrain::models::cuda

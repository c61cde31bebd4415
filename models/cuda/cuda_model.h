#pragma once

// The CUDA backend of Model: the layers of models/cuda/ on one GPU, checked
// against the CPU backend by tests/models/cuda_layers_test.cc and
// cuda_model_test.cc.
//
// Memory, all allocated by Create for options.max_batch, so a step allocates
// nothing on the device or the host:
//  - device: ONE flat parameter buffer and ONE flat gradient buffer (the
//    layout of NetParamSpecs, as on the CPU and the parameter servers), one
//    activation buffer per layer, two activation-gradient buffers used in
//    turn, the log-probabilities, the batch (images, labels, keys), the
//    per-example loss statistics, and the layers' own scratch (pooling
//    argmax, dropout masks, the shared cuDNN workspace);
//  - pinned host memory: staging for the parameters, the gradients, the
//    batch and the statistics, so that every copy is an asynchronous DMA.
//
// Streams: the layers run on the context's compute stream; copies run on a
// second stream, ordered against it with events. SetParams copies the
// caller's buffer to staging, queues the upload and returns, so the upload
// overlaps with whatever the caller does before the next step. In
// ForwardBackward each layer's parameter gradient is copied back as soon as
// that layer's backward is done, while the layers below it still compute;
// the step then waits for both streams.
//
// Beyond Model's contract, as the CPU backend (models/cpu/cpu_model.h):
//  - Parameters are zero until SetParams.
//  - ForwardBackward needs batch.images, labels and example_keys; Evaluate
//    needs images and labels. Both take 0 < batch.n <= max_batch and labels
//    in [0, num_classes); anything else is InvalidArgument, found on the
//    host before any work is queued.
//  - A failure reported by the device is Internal (ResourceExhausted when it
//    is memory) and names the call; the model is then best discarded.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/cuda/cuda_context.h"
#include "models/cuda/cuda_resources.h"
#include "models/cuda/log_softmax_nll.h"
#include "models/layer.h"
#include "models/model.h"
#include "models/net_spec.h"

namespace pstrain::models::cuda {

class CudaModel final : public Model {
 public:
  // The model on GPU `device`. InvalidArgument when the net does not fit
  // together or options.max_batch < 1; FailedPrecondition when there is no
  // such device (see CudaContext::Create); ResourceExhausted when it does not
  // fit in the device's memory.
  static absl::StatusOr<std::unique_ptr<CudaModel>> Create(const NetSpec& net,
                                                           const ModelOptions& options, int device);
  // Waits for queued work, then frees everything.
  ~CudaModel() override;

  const NetSpec& net() const override { return net_; }
  const std::vector<ParamSpec>& param_specs() const override { return specs_; }
  int64_t num_params() const override { return params_.size(); }
  std::string device_description() const override { return context_->description(); }

  absl::Status SetParams(absl::Span<const float> params) override;
  absl::StatusOr<float> ForwardBackward(const Batch& batch, absl::Span<float> grads) override;
  absl::StatusOr<EvalResult> Evaluate(const Batch& batch) override;
  // The page-locked staging the batch is uploaded from.
  absl::StatusOr<BatchBuffer> InputBuffer() override;

 private:
  CudaModel(NetSpec net, std::vector<ParamSpec> specs, const ModelOptions& options,
            std::unique_ptr<CudaContext> context);

  absl::Status Init();
  absl::Status BuildLayers();
  absl::Status AllocateBuffers(int64_t largest_activation);
  // Stages the batch (unless it is in the staging buffers already,
  // InputBuffer: then it is uploaded from where it is) and queues its
  // upload; the compute stream waits for it.
  absl::Status Upload(const Batch& batch, bool training);
  // Runs every layer; the logits end up in activations_.back().
  absl::Status Forward(const BatchContext& ctx);
  // From dlogits in grad_[0]; queues each layer's gradient download.
  absl::Status Backward(const BatchContext& ctx);
  // Queues a copy of `bytes` from device `src` to host `dst` on the copy
  // stream, after the compute stream's work so far (`event` marks it).
  absl::Status DownloadAfter(cudaEvent_t event, void* dst, const void* src, size_t bytes);
  // Waits for both streams.
  absl::Status Finish();

  NetSpec net_;
  std::vector<ParamSpec> specs_;
  int max_batch_;
  uint64_t seed_;
  LogSoftmaxNll loss_;
  // Declared first, destroyed last: the layers borrow it.
  std::unique_ptr<CudaContext> context_;
  Stream copy_stream_;
  Event params_uploaded_;
  Event batch_uploaded_;
  Event loss_ready_;
  Event compute_idle_;
  std::vector<Event> grads_ready_;  // [layer]
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int64_t> layer_offsets_;           // each layer's slice of the flat buffers
  DeviceArray<float> params_;                    // [num_params]
  DeviceArray<float> grads_;                     // [num_params]
  std::vector<DeviceArray<float>> activations_;  // [layer][max_batch, output shape]
  DeviceArray<float> grad_[2];                   // dL/d(activation), ping-pong
  DeviceArray<float> log_probs_;                 // [max_batch, num_classes]
  DeviceArray<float> stats_;                     // [2 * max_batch], see LogSoftmaxNll::Forward
  DeviceArray<float> images_;                    // [max_batch, input shape]
  DeviceArray<int32_t> labels_;                  // [max_batch]
  DeviceArray<uint64_t> keys_;                   // [max_batch]
  PinnedArray<float> params_staging_;
  PinnedArray<float> grads_staging_;
  PinnedArray<float> stats_staging_;
  PinnedArray<float> images_staging_;
  PinnedArray<int32_t> labels_staging_;
  PinnedArray<uint64_t> keys_staging_;
};

// The factory models/model_factory.cc calls for "cuda" and "cuda:I"
// (DeviceCount(), for "auto", is in models/cuda/cuda_context.h).
absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(const NetSpec& net,
                                                       const ModelOptions& options, int device);

}  // namespace pstrain::models::cuda

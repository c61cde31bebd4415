#pragma once

// The CPU backend of Model: the numerical reference. Layers run one after
// another on the whole batch with Eigen on the calling thread (Eigen is
// built without OpenMP, so a model uses exactly one core).
//
// Memory: the flat parameter buffer, one activation buffer per layer and
// two gradient buffers, all sized for options.max_batch at creation; a step
// allocates nothing.
//
// Beyond Model's contract:
//  - Parameters are zero until SetParams.
//  - ForwardBackward needs batch.images, labels and example_keys; Evaluate
//    needs images and labels. Both take 0 < batch.n <= max_batch and
//    labels in [0, num_classes); anything else is InvalidArgument and
//    leaves the parameters untouched (grads are then unspecified).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/cpu/log_softmax_nll.h"
#include "models/layer.h"
#include "models/model.h"
#include "models/net_spec.h"

namespace pstrain::models::cpu {

class CpuModel final : public Model {
 public:
  // InvalidArgument when the net does not fit together (see NetParamSpecs)
  // or options.max_batch < 1.
  static absl::StatusOr<std::unique_ptr<CpuModel>> Create(const NetSpec& net,
                                                          const ModelOptions& options);

  const NetSpec& net() const override { return net_; }
  const std::vector<ParamSpec>& param_specs() const override { return specs_; }
  int64_t num_params() const override { return static_cast<int64_t>(params_.size()); }
  std::string device_description() const override { return "cpu"; }

  absl::Status SetParams(absl::Span<const float> params) override;
  absl::StatusOr<float> ForwardBackward(const Batch& batch, absl::Span<float> grads) override;
  absl::StatusOr<EvalResult> Evaluate(const Batch& batch) override;
  // The CPU reads a batch wherever it is: this is plain memory, allocated
  // on the first call.
  absl::StatusOr<BatchBuffer> InputBuffer() override;
  void set_layer_spans(std::vector<LayerSpan>* spans) override { layer_spans_ = spans; }
  bool set_backward_progress(std::function<void(int64_t begin)>* done) override {
    backward_done_ = done;
    return true;
  }
  bool supports_forward_ahead() const override { return true; }
  absl::Status ForwardAhead(const Batch& batch, absl::Span<const float> params,
                            const std::function<absl::Status(int64_t end)>& ready) override;
  absl::StatusOr<float> BackwardAfterAhead(absl::Span<float> grads) override;

  // Inference (dropout off) for `pstrain predict`: writes each example's
  // log-probabilities, log-softmax of the last layer, into log_probs
  // [n, num_classes]. Needs batch.images only. InvalidArgument for n
  // outside [1, max_batch] or log_probs of another size.
  absl::Status Predict(const Batch& batch, absl::Span<float> log_probs);

 private:
  CpuModel(NetSpec net, std::vector<ParamSpec> specs, const ModelOptions& options);

  absl::Status BuildLayers();
  // Runs every layer; the logits end up in activations_.back().
  // `ahead` not null: before each layer, waits for (*ahead)(end) and
  // copies the layer's parameters from `ahead_params` (ForwardAhead).
  absl::Status Forward(const BatchContext& ctx, const float* images,
                       const std::function<absl::Status(int64_t end)>* ahead = nullptr,
                       const float* ahead_params = nullptr);
  // The loss and the backward pass of ForwardBackward, after Forward.
  absl::StatusOr<float> LossAndBackward(const BatchContext& ctx, const Batch& batch, float* grads);
  // From dlogits in grad_[0]; writes every layer's parameter gradient.
  absl::Status Backward(const BatchContext& ctx, const float* images, float* grads);

  NetSpec net_;
  std::vector<ParamSpec> specs_;
  int max_batch_;
  uint64_t seed_;
  LogSoftmaxNll loss_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int64_t> layer_offsets_;           // each layer's slice of the flat buffers
  std::vector<float> params_;                    // [num_params]
  std::vector<std::vector<float>> activations_;  // [layer][max_batch, output shape]
  std::vector<float> log_probs_;                 // [max_batch, num_classes]
  std::vector<LayerSpan>* layer_spans_ = nullptr;  // training passes' timings, if asked
  std::function<void(int64_t begin)>* backward_done_ = nullptr;  // see Model
  // ForwardAhead's batch; n == 0 when none is pending (every Forward,
  // SetParams and a refused ForwardAhead end it).
  Batch ahead_batch_;
  std::vector<float> grad_[2];                   // dL/d(activation), ping-pong
  // InputBuffer's memory: [max_batch, input shape], [max_batch] and [max_batch].
  std::vector<float> input_images_;
  std::vector<int32_t> input_labels_;
  std::vector<uint64_t> input_keys_;
};

// The factory models/model_factory.cc calls for device "cpu".
absl::StatusOr<std::unique_ptr<Model>> CreateCpuModel(const NetSpec& net,
                                                      const ModelOptions& options);

}  // namespace pstrain::models::cpu

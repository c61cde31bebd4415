#pragma once

// What a worker trains: a network on one backend, behind one interface.
// The worker hands in host memory and gets host memory back; a backend
// copies to and from its device as it needs to.
//
//   ModelOptions options;
//   options.device = "auto";
//   ASSIGN_OR_RETURN(auto model, CreateModel(options));
//   RETURN_IF_ERROR(model->SetParams(params));
//   ASSIGN_OR_RETURN(float loss, model->ForwardBackward(batch, grads));
//
// Thread safety: none; one thread drives a model.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/layer.h"
#include "models/layer_span.h"
#include "models/net_spec.h"

namespace pstrain::models {

// One batch in host memory.
struct Batch {
  int n = 0;
  const float* images = nullptr;        // [n, input shape], normalised
  const int32_t* labels = nullptr;      // [n], in [0, num_classes)
  const uint64_t* example_keys = nullptr;  // [n], see BatchContext
};

// Host memory for one batch of up to max_batch examples, owned by a model
// (Model::InputBuffer).
struct BatchBuffer {
  absl::Span<float> images;           // [max_batch, input shape]
  absl::Span<int32_t> labels;         // [max_batch]
  absl::Span<uint64_t> example_keys;  // [max_batch]
};

struct EvalResult {
  double loss_sum = 0;   // sum over the batch of the NLL loss
  int64_t correct = 0;   // examples whose argmax is the label
  int64_t count = 0;
};

struct ModelOptions {
  std::string name = "mnist_cnn";  // see GetNetSpec
  std::string device = "cpu";      // "cpu", "cuda", "cuda:I", or "auto"
  int max_batch = 128;             // largest n a Batch may have
  uint64_t seed = 1;               // mixed into dropout keys
  // Index of this process among those sharing the machine's GPUs (a
  // worker's rank): "cuda" and "auto" pick GPU local_rank mod the number of
  // GPUs, so the workers of one machine spread over its GPUs (several may
  // share one). Ignored for "cpu" and "cuda:I". Must be >= 0.
  int local_rank = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const NetSpec& net() const = 0;
  // Parameter tensors in flat-buffer order.
  virtual const std::vector<ParamSpec>& param_specs() const = 0;
  virtual int64_t num_params() const = 0;
  // "cpu", "cuda:0 (NVIDIA H100 ...)".
  virtual std::string device_description() const = 0;

  // Sets the parameters used by the next steps. REQUIRES: params.size() ==
  // num_params().
  virtual absl::Status SetParams(absl::Span<const float> params) = 0;

  // Forward and backward pass on `batch` in training mode. Writes the
  // gradient of the mean NLL loss over the batch into `grads` (size
  // num_params()) and returns that mean loss. REQUIRES: 0 < batch.n <=
  // max_batch.
  virtual absl::StatusOr<float> ForwardBackward(const Batch& batch, absl::Span<float> grads) = 0;

  // Forward pass in inference mode (no dropout). example_keys may be null.
  virtual absl::StatusOr<EvalResult> Evaluate(const Batch& batch) = 0;

  // Where a caller may gather its next batch. ForwardBackward and Evaluate
  // read a Batch whose arrays start at these in place; any other Batch is
  // copied. The CUDA model's buffer is its page-locked staging, so the GPU
  // copies the batch straight from it and the host copy of every step is
  // saved (at batch 4096 that copy was most of what a step spent outside
  // the GPU: benchmarks/log/gpu.md). Waits until the device has read
  // the previous batch out of it (only after a step that failed half-way
  // can it still be reading), so call it before each fill. The memory is
  // the model's and lives as long as the model.
  virtual absl::StatusOr<BatchBuffer> InputBuffer() = 0;

  // Not null: every ForwardBackward appends its layers' spans to `spans`
  // (the caller clears it between steps; --timeline). The CPU model times
  // each layer (two clock reads per layer). The CUDA model adds none: its
  // kernels run asynchronously, and timing them would take CUDA events and
  // a synchronisation per layer.
  virtual void set_layer_spans(std::vector<LayerSpan>* spans) { (void)spans; }

  // Not null: ForwardBackward calls `done(begin)` after each layer's
  // backward pass, when every gradient from flat offset `begin` to the
  // end of `grads` is final and will not be written again in this pass
  // (backward runs last layer first). A worker sends each shard whose
  // gradient is complete while backward goes on (overlap). Returns
  // whether the backend calls it: the CPU model does; the CUDA model
  // copies the gradients out at the end of the pass, and does not.
  virtual bool set_backward_progress(std::function<void(int64_t begin)>* done) {
    (void)done;
    return false;
  }

  // The training pass in two halves, so that a worker can run the next
  // step's forward while that step's parameters are still arriving
  // (docs/decisions/0029-forward-ahead.md):
  //
  //   RETURN_IF_ERROR(model->ForwardAhead(batch, params, ready));
  //   ASSIGN_OR_RETURN(float loss, model->BackwardAfterAhead(grads));
  //
  // is ForwardBackward(batch, grads) after SetParams(params), bit for bit,
  // except that each layer's parameters are read from `params` only after
  // `ready(end)` returned OK, `end` being the flat offset past that layer's
  // parameters (the calls come in forward order, `end` never decreasing).
  // An error of `ready` ends the pass with that error; the model's
  // parameters are then partly new, so call SetParams before any other
  // pass. Between the halves, the model may not be used and `batch`'s
  // arrays must stay as they are. supports_forward_ahead() says whether the
  // backend has them (the CPU model does); ForwardAhead of one that does
  // not returns Unimplemented.
  virtual bool supports_forward_ahead() const { return false; }
  virtual absl::Status ForwardAhead(const Batch& batch, absl::Span<const float> params,
                                    const std::function<absl::Status(int64_t end)>& ready) {
    (void)batch, (void)params, (void)ready;
    return absl::UnimplementedError(device_description() + ": no forward ahead");
  }
  // REQUIRES: the last call to the model was a ForwardAhead that returned OK.
  virtual absl::StatusOr<float> BackwardAfterAhead(absl::Span<float> grads) {
    (void)grads;
    return absl::UnimplementedError(device_description() + ": no forward ahead");
  }
};

// Builds the model on the requested device. "auto" is "cuda" when the CUDA
// backend is built and the driver reports a GPU, else "cpu" (with a warning
// in the log, once, when an NVIDIA driver is loaded yet no GPU is usable,
// e.g. a driver too old for the CUDA runtime: it names both versions);
// "cuda" is "cuda:I" with I = local_rank mod the number of GPUs. NotFound
// for an unknown model name, InvalidArgument for a bad device string or a
// negative local_rank, FailedPrecondition when CUDA is asked for and
// unavailable ("no CUDA device ...", with the driver's and the runtime's
// CUDA versions; also for a "cuda:I" beyond the machine's GPUs or a build
// without the CUDA backend), ResourceExhausted when the model does not fit
// in the GPU's memory.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelOptions& options);

// Number of GPUs usable by this build: 0 without the CUDA backend, without a
// driver or without a device. Cheap, prints nothing, creates no context.
int CudaDeviceCount();

}  // namespace pstrain::models

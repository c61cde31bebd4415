#pragma once

// What the CUDA layers share beyond models::LayerBase (models/layer_base.h,
// which holds every backend's name, shapes, largest batch and the batch
// check each Forward/Backward starts with): the CudaContext (stream, cuDNN
// and cuBLAS handles, shared workspace) the layer borrows.
//
// Pointers passed to Forward/Backward are device pointers, including
// BatchContext::example_keys. Both calls only queue work on
// context().stream() and return: a Status from them reports what could be
// checked when queuing (bad batch, launch or library-call errors); faults
// during execution surface at the caller's next synchronisation.
//
// Every CUDA layer sizes its device scratch for `max_batch` examples when it
// is created and never allocates inside Forward/Backward. A layer is not
// thread-safe; one thread drives it.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "models/cuda/cuda_context.h"
#include "models/layer_base.h"

namespace pstrain::models::cuda {

// cuBLAS's and cuDNN's scaling factors (alpha and beta), passed by address.
inline constexpr float kOne = 1.0f;
inline constexpr float kZero = 0.0f;

// The base of the CUDA layers: device pointers, and the device's context.
class CudaLayer : public LayerBase {
 protected:
  // REQUIRES: as LayerBase's; `context` outlives the layer.
  CudaLayer(CudaContext& context, std::string name, Shape input, Shape output, int max_batch)
      : LayerBase(std::move(name), input, output, max_batch), context_(context) {}

  CudaContext& context() const { return context_; }
  cudaStream_t stream() const { return context_.stream(); }

 private:
  CudaContext& context_;
};

}  // namespace pstrain::models::cuda

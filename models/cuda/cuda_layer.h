#pragma once

// Plumbing shared by the CUDA layers, as models/cpu/cpu_layer.h is for the
// CPU ones: the name, the shapes, the largest batch, the check every
// Forward/Backward starts with, and the CudaContext (stream, cuDNN and
// cuBLAS handles, shared workspace) the layer borrows.
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
#include <vector>

#include "absl/status/status.h"
#include "models/cuda/cuda_context.h"
#include "models/layer.h"

namespace pstrain::models::cuda {

class CudaLayer : public Layer {
 public:
  const std::string& name() const override { return name_; }
  Shape input_shape() const override { return input_; }
  Shape output_shape() const override { return output_; }
  std::vector<ParamSpec> params() const override { return {}; }
  int max_batch() const { return max_batch_; }

 protected:
  // REQUIRES: max_batch >= 1; input and output have positive sizes;
  // `context` outlives the layer.
  CudaLayer(CudaContext& context, std::string name, Shape input, Shape output, int max_batch);

  // InvalidArgument (naming the layer) unless 0 < ctx.n <= max_batch().
  absl::Status CheckBatch(const BatchContext& ctx) const;

  CudaContext& context() const { return context_; }
  cudaStream_t stream() const { return context_.stream(); }

 private:
  CudaContext& context_;
  std::string name_;
  Shape input_;
  Shape output_;
  int max_batch_;
};

}  // namespace pstrain::models::cuda

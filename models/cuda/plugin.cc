// The CUDA backend as a plugin, libpstrain_cuda.so, next to the binaries.
//
// Loading cuBLAS costs ~150 MB of resident memory before it does anything
// (libcublas and libcublasLt, measured by loading them alone), which a
// worker on a machine without a GPU should not pay: the worker links no CUDA
// library, and models/model_factory.cc dlopens this plugin only when a GPU
// may be there (--device=cuda, or auto with the NVIDIA driver loaded).
// The plugin is built by the same compiler from the same headers as the
// binary that loads it (the same build), so C++ types cross the boundary:
// the entry points are extern "C" only so that dlsym finds them by name.

#include <memory>

#include "absl/status/status.h"
#include "models/cuda/cuda_context.h"
#include "models/cuda/cuda_model.h"
#include "models/plugin_abi.h"

extern "C" {

int PSTRAIN_CUDA_DEVICE_COUNT_SYMBOL(absl::Status* reason) {
  const absl::StatusOr<int> count = pstrain::models::cuda::CountDevices();
  if (count.ok()) return *count;
  *reason = count.status();
  return 0;
}

pstrain::models::Model* PSTRAIN_CUDA_CREATE_MODEL_SYMBOL(const pstrain::models::NetSpec* net,
                                                         const pstrain::models::ModelOptions* options,
                                                         int device, absl::Status* error) {
  auto model = pstrain::models::cuda::CreateCudaModel(*net, *options, device);
  if (!model.ok()) {
    *error = model.status();
    return nullptr;
  }
  return model->release();
}

}  // extern "C"

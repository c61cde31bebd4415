#pragma once

// The entry points of the CUDA plugin (models/cuda/plugin.cc) that
// models/model_factory.cc looks up with dlsym. Bump the names when their
// signatures change: a stale plugin is then refused by name, not called.
//
//   int pstrain_cuda_device_count_v2(absl::Status* reason);
//     (the usable GPUs; when 0, *reason says why, naming the driver's and
//     the runtime's CUDA versions)
//   Model* pstrain_cuda_create_model_v1(const NetSpec*, const ModelOptions*,
//                                       int device, absl::Status* error);
//     (null and *error set on failure; the caller owns the model)

#define PSTRAIN_CUDA_PLUGIN_FILE "libpstrain_cuda.so"
#define PSTRAIN_CUDA_DEVICE_COUNT_SYMBOL pstrain_cuda_device_count_v2
#define PSTRAIN_CUDA_CREATE_MODEL_SYMBOL pstrain_cuda_create_model_v1
#define PSTRAIN_STRINGIFY_INNER(x) #x
#define PSTRAIN_STRINGIFY(x) PSTRAIN_STRINGIFY_INNER(x)

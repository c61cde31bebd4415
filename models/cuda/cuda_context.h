#pragma once

// What the layers of one model share on one GPU, and the questions asked of
// the driver before a model is built (how many devices, which one).
//
// A CudaContext holds: the device index; the stream every layer queues its
// work on; the cuDNN and cuBLAS handles bound to that stream; ONE cuDNN
// workspace, grown at construction to the largest any layer asked for (the
// layers run one after another on the stream, so they can share it); the
// cuBLAS workspace; and a vector of ones (bias gradients as GEMVs).
//
// Numerics: cuBLAS runs in CUBLAS_PEDANTIC_MATH, i.e. plain fp32 (no TF32
// tensor cores, no BF16x9 emulation, whatever NVIDIA_TF32_OVERRIDE or
// CUBLAS_EMULATE_SINGLE_PRECISION say); convolutions set CUDNN_FMA_MATH on
// their descriptors (models/cuda/conv2d.h). So the CPU backend is a valid
// reference for the GPU's results.
//
// Not thread-safe: one thread drives a context and the layers that borrow
// it. The context must outlive those layers. ReserveOnes and AdoptWorkspace
// reallocate and are for construction time only, never between a layer's
// Forward and Backward.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/cuda/cuda_resources.h"

namespace pstrain::models::cuda {

// The CUDA versions of the loaded NVIDIA driver (cudaDriverGetVersion: the
// newest CUDA it supports; 0 when no driver is loaded) and of this build's
// runtime (cudaRuntimeGetVersion), each as 1000 * major + 10 * minor.
struct CudaVersions {
  int driver = 0;
  int runtime = 0;
};

// Asks the runtime; prints nothing and creates no context.
CudaVersions GetCudaVersions();

// "CUDA driver 12.8, runtime 13.0". When the driver is too old for the
// runtime (a lower CUDA major version, or `error` is
// cudaErrorInsufficientDriver) it goes on ": the NVIDIA driver is too old
// for this build's CUDA runtime; install a driver for CUDA 13.0 or newer";
// without a driver: "no NVIDIA driver loaded (CUDA runtime 13.0)".
std::string DescribeCudaVersions(CudaVersions versions, cudaError_t error = cudaSuccess);

// Number of CUDA devices the driver reports; 0 when there is no driver, no
// device, or the driver is too old for this runtime. Prints nothing and
// creates no context (cudaGetDeviceCount only initialises the driver).
int DeviceCount();

// As DeviceCount, but a failure is a FailedPrecondition that says why and
// names both CUDA versions: "no CUDA device (cudaGetDeviceCount: CUDA driver
// version is insufficient for CUDA runtime version
// (cudaErrorInsufficientDriver); CUDA driver 12.4, runtime 13.0: the NVIDIA
// driver is too old ...)". OK with a count >= 1 only.
absl::StatusOr<int> CountDevices();

class CudaContext {
 public:
  // A context on device `device` (cuda:<device>), logged at INFO with both
  // CUDA versions. FailedPrecondition when there is no such device (with the
  // reason, see CountDevices); ResourceExhausted when the device is out of
  // memory.
  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(int device);

  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;
  // Waits for the stream's work, then releases everything on the device.
  ~CudaContext();

  int device() const { return device_; }
  // "cuda:0 (NVIDIA H100 80GB HBM3)".
  const std::string& description() const { return description_; }
  cudaStream_t stream() const { return stream_.get(); }
  cudnnHandle_t cudnn() const { return cudnn_.get(); }
  cublasHandle_t cublas() const { return cublas_.get(); }

  // Makes this context's device current on the calling thread. Every entry
  // point that queues work calls it first (a thread may drive models on
  // several devices).
  absl::Status Activate() const;

  // Makes `workspace` the shared cuDNN workspace if it is larger than the
  // current one, which is then freed; else frees `workspace`. Conv2d
  // allocates a candidate algorithm's workspace on its own while the shared
  // one stays valid, and hands it over only once the candidate is chosen.
  // REQUIRES: `workspace` is on this context's device.
  void AdoptWorkspace(DeviceArray<char> workspace);
  void* workspace() const { return workspace_.data(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }

  // Grows the vector of ones to at least `size` floats.
  absl::Status ReserveOnes(int64_t size);
  // [ones_size()] floats, all 1.0f.
  const float* ones() const { return ones_.data(); }
  int64_t ones_size() const { return ones_.size(); }

 private:
  CudaContext(int device, std::string description);

  absl::Status Init();

  // Declared so that the handles go first and the stream they are bound to
  // last.
  int device_;
  std::string description_;
  Stream stream_;
  DeviceArray<char> cublas_workspace_;
  DeviceArray<char> workspace_;
  DeviceArray<float> ones_;
  CudnnHandle cudnn_;
  CublasHandle cublas_;
};

}  // namespace pstrain::models::cuda

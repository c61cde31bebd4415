#pragma once

// absl::Status from the results of the CUDA runtime, cuDNN and cuBLAS. Every
// call into those libraries goes through one of the macros below, so that a
// failure becomes a Status naming the call:
//
//   CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
//   -> INTERNAL: "cudaStreamSynchronize(stream): an illegal memory access was
//      encountered (cudaErrorIllegalAddress)"
//
// Codes: running out of memory (cudaErrorMemoryAllocation, cuDNN's host or
// device allocation failures, CUBLAS_STATUS_ALLOC_FAILED) is
// ResourceExhausted; no device, no driver or a driver too old is
// FailedPrecondition; anything else is Internal.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace pstrain::models::cuda {

// OK for cudaSuccess, else "<what>: <description> (<error name>)". Also
// resets the runtime's per-thread last error, so that a later
// cudaGetLastError() after a kernel launch does not report this error again
// (sticky errors, which end the context, stay).
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// OK for CUDNN_STATUS_SUCCESS, else "<what>: <cuDNN's message>".
absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view what);

// OK for CUBLAS_STATUS_SUCCESS, else "<what>: <cuBLAS's message>".
absl::Status CublasStatus(cublasStatus_t status, absl::string_view what);

// Status of the kernel launch just made on this thread (cudaGetLastError):
// catches bad launch configurations; faults during execution surface at the
// next synchronisation.
absl::Status LaunchStatus(absl::string_view kernel);

}  // namespace pstrain::models::cuda

#define CUDA_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::pstrain::models::cuda::CudaStatus((expr), #expr))
#define CUDNN_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::pstrain::models::cuda::CudnnStatus((expr), #expr))
#define CUBLAS_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::pstrain::models::cuda::CublasStatus((expr), #expr))

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

// The status of a CUDA error read from the runtime's last-error slot:
// `error` from cudaGetLastError(), `after_reset` the error the context
// still reports right after it (cudaPeekAtLastError, else
// cudaDeviceSynchronize: the slot itself may be reset even for a sticky
// error). A sticky error (an earlier kernel's illegal address, a lost
// device...) survives the reset: the context is unusable until the
// process restarts, and the message says so; any other error (a bad launch
// configuration, an invalid argument) is the call's own and the context
// goes on. OK when `error` is cudaSuccess. Codes as CudaStatus's.
absl::Status LastErrorStatus(cudaError_t error, cudaError_t after_reset, absl::string_view what);

// Before a kernel launch: clears a non-sticky error that an earlier call
// left in the runtime's last-error slot unread (a runtime call inside cuDNN
// or cuBLAS that failed and was handled there, say), so that LaunchStatus
// does not blame the kernel for it; it is logged, not returned. A sticky
// error is returned ("before launch of <kernel>: ...; sticky ..."): the
// kernel cannot run.
absl::Status ClearErrorBeforeLaunch(absl::string_view kernel);

// Status of the kernel launch just made on this thread (cudaGetLastError):
// catches bad launch configurations ("launch of <kernel>: ..."), and sticky
// errors, which may be an earlier kernel's; faults during execution surface
// at the next synchronisation. Only the launch's own error when
// ClearErrorBeforeLaunch ran right before it.
absl::Status LaunchStatus(absl::string_view kernel);

// ClearErrorBeforeLaunch, then `launch()` (which makes exactly one kernel
// launch), then LaunchStatus: how every kernel of models/cuda is launched.
//   return LaunchKernel("ReluForwardKernel", [&] { ReluForwardKernel<<<...>>>(...); });
template <typename Launch>
absl::Status LaunchKernel(absl::string_view kernel, Launch&& launch) {
  RETURN_IF_ERROR(ClearErrorBeforeLaunch(kernel));
  launch();
  return LaunchStatus(kernel);
}

}  // namespace pstrain::models::cuda

#define CUDA_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::pstrain::models::cuda::CudaStatus((expr), #expr))
#define CUDNN_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::pstrain::models::cuda::CudnnStatus((expr), #expr))
#define CUBLAS_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::pstrain::models::cuda::CublasStatus((expr), #expr))

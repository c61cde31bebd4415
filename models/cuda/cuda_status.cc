#include "models/cuda/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

// The status codes below, and cudnnGetLastErrorString, are cuDNN 9's.
static_assert(CUDNN_MAJOR >= 9, "models/cuda needs cuDNN 9 or later");

namespace pstrain::models::cuda {
namespace {

absl::StatusCode CudaCode(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode CudnnCode(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART:
    case CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH:
    case CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH:
    case CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::Status(CudaCode(error), absl::StrCat(what, ": ", cudaGetErrorString(error), " (",
                                                    cudaGetErrorName(error), ")"));
}

// cudnnGetLastErrorString adds what the short status string leaves out
// (which parameter was bad, which engine refused), when cuDNN recorded it.
absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view what) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string message = absl::StrCat(what, ": ", cudnnGetErrorString(status));
  if (detail[0] != '\0') absl::StrAppend(&message, " (", detail, ")");
  return absl::Status(CudnnCode(status), message);
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusCode code = status == CUBLAS_STATUS_ALLOC_FAILED
                                    ? absl::StatusCode::kResourceExhausted
                                    : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": ", cublasGetStatusName(status), " (",
                                         cublasGetStatusString(status), ")"));
}

absl::Status LastErrorStatus(cudaError_t error, cudaError_t after_reset, absl::string_view what) {
  absl::Status status = CudaStatus(error, what);
  if (status.ok() || after_reset == cudaSuccess) return status;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(),
                                   "; sticky: the CUDA context is unusable until the process "
                                   "restarts (the error may come from earlier work)"));
}

// After cudaGetLastError returned `error`: the error the context still
// holds, if it is lost. The last-error slot does not say (on driver 580
// with runtime 13.0, cudaGetLastError resets it even after an illegal
// address), but every later call that reaches the device reports a sticky
// error again; this runs only once an error was seen.
cudaError_t ErrorAfterReset() {
  const cudaError_t peeked = cudaPeekAtLastError();
  if (peeked != cudaSuccess) return peeked;
  const cudaError_t synced = cudaDeviceSynchronize();
  if (synced != cudaSuccess) (void)cudaGetLastError();
  return synced;
}

// The last-error slot is per thread, and cuDNN and cuBLAS make runtime
// calls of their own whose failures they handle without reading it, so
// without this reset the first kernel launched after one of them would
// report that error as its own.
absl::Status ClearErrorBeforeLaunch(absl::string_view kernel) {
  const cudaError_t stale = cudaGetLastError();
  if (stale == cudaSuccess) return absl::OkStatus();
  const cudaError_t after_reset = ErrorAfterReset();
  if (after_reset != cudaSuccess) {
    return LastErrorStatus(stale, after_reset, absl::StrCat("before launch of ", kernel));
  }
  LOG_FIRST_N(WARNING, 1) << "before launch of " << kernel << ": cleared "
                          << cudaGetErrorName(stale)
                          << ", left unread by an earlier CUDA call (not this kernel's)";
  return absl::OkStatus();
}

absl::Status LaunchStatus(absl::string_view kernel) {
  const cudaError_t error = cudaGetLastError();
  const cudaError_t after_reset = error == cudaSuccess ? cudaSuccess : ErrorAfterReset();
  return LastErrorStatus(error, after_reset, absl::StrCat("launch of ", kernel));
}

}  // namespace pstrain::models::cuda

#include "models/cuda/cuda_resources.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pstrain::models::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// " (N MiB of M MiB free on the device)" for an out-of-memory message, or ""
// when even that query fails.
std::string FreeMemoryNote() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return absl::StrCat("; ", free / kMiB, " MiB of ", total / kMiB, " MiB free on the device");
}

}  // namespace

absl::StatusOr<void*> AllocateMemory(MemoryKind kind, absl::string_view what, size_t bytes) {
  void* memory = nullptr;
  const bool device = kind == MemoryKind::kDevice;
  const cudaError_t error = device ? cudaMalloc(&memory, bytes) : cudaMallocHost(&memory, bytes);
  if (error == cudaSuccess) return memory;
  const std::string call =
      absl::StrCat(device ? "cudaMalloc(" : "cudaMallocHost(", what, ", ", bytes, " bytes)");
  absl::Status status = CudaStatus(error, call);
  if (device && error == cudaErrorMemoryAllocation) {
    status = absl::ResourceExhaustedError(absl::StrCat(status.message(), FreeMemoryNote()));
  }
  return status;
}

void FreeMemory(MemoryKind kind, void* ptr) {
  const cudaError_t error = kind == MemoryKind::kDevice ? cudaFree(ptr) : cudaFreeHost(ptr);
  if (error != cudaSuccess) (void)cudaGetLastError();
}

void StreamDeleter::operator()(cudaStream_t stream) const { (void)cudaStreamDestroy(stream); }
void EventDeleter::operator()(cudaEvent_t event) const { (void)cudaEventDestroy(event); }
void CudnnHandleDeleter::operator()(cudnnHandle_t handle) const { (void)cudnnDestroy(handle); }
void CublasHandleDeleter::operator()(cublasHandle_t handle) const { (void)cublasDestroy(handle); }
void TensorDescriptorDeleter::operator()(cudnnTensorDescriptor_t descriptor) const {
  (void)cudnnDestroyTensorDescriptor(descriptor);
}
void FilterDescriptorDeleter::operator()(cudnnFilterDescriptor_t descriptor) const {
  (void)cudnnDestroyFilterDescriptor(descriptor);
}
void ConvolutionDescriptorDeleter::operator()(cudnnConvolutionDescriptor_t descriptor) const {
  (void)cudnnDestroyConvolutionDescriptor(descriptor);
}

absl::StatusOr<Stream> CreateStream() {
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream(stream);
}

absl::StatusOr<Event> CreateEvent(bool timing) {
  cudaEvent_t event = nullptr;
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(event);
}

absl::StatusOr<CudnnHandle> CreateCudnnHandle(cudaStream_t stream) {
  cudnnHandle_t raw = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreate(&raw));
  CudnnHandle handle(raw);
  CUDNN_RETURN_IF_ERROR(cudnnSetStream(handle.get(), stream));
  return handle;
}

absl::StatusOr<CublasHandle> CreateCublasHandle(cudaStream_t stream) {
  cublasHandle_t raw = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&raw));
  CublasHandle handle(raw);
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle.get(), stream));
  return handle;
}

absl::StatusOr<TensorDescriptor> CreateTensorDescriptor() {
  cudnnTensorDescriptor_t raw = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&raw));
  return TensorDescriptor(raw);
}

absl::StatusOr<FilterDescriptor> CreateFilterDescriptor() {
  cudnnFilterDescriptor_t raw = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&raw));
  return FilterDescriptor(raw);
}

absl::StatusOr<ConvolutionDescriptor> CreateConvolutionDescriptor() {
  cudnnConvolutionDescriptor_t raw = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&raw));
  return ConvolutionDescriptor(raw);
}

absl::Status SetTensor4d(cudnnTensorDescriptor_t descriptor, int n, int c, int h, int w) {
  CUDNN_RETURN_IF_ERROR(
      cudnnSetTensor4dDescriptor(descriptor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  return absl::OkStatus();
}

}  // namespace pstrain::models::cuda

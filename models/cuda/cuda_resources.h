#pragma once

// Owners of CUDA, cuDNN and cuBLAS resources. Each is made by a factory that
// returns a Status naming what failed, and released by its destructor
// (release errors are ignored: there is no caller left to tell, and the
// worst case is a leak in a process that is going down).
//
//   DeviceArray<T>: `size` elements of device memory (cudaMalloc).
//   PinnedArray<T>: `size` elements of page-locked host memory
//                   (cudaMallocHost), the staging area of asynchronous copies.
//   Stream, Event, CudnnHandle, CublasHandle, TensorDescriptor,
//   FilterDescriptor, ConvolutionDescriptor: unique_ptrs whose deleters
//   call the matching cuda*Destroy / cudnnDestroy* / cublasDestroy.
//
// None of these is thread-safe; a model and its layers own them and one
// thread drives a model.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "models/cuda/cuda_status.h"

namespace pstrain::models::cuda {

enum class MemoryKind { kDevice, kPinnedHost };

// `bytes` > 0 of memory of `kind` on the current device. ResourceExhausted
// when it runs out, e.g. "cudaMalloc(conv1.y, 2560000 bytes): out of memory
// (cudaErrorMemoryAllocation); 12 MiB of 81559 MiB free on the device".
absl::StatusOr<void*> AllocateMemory(MemoryKind kind, absl::string_view what, size_t bytes);
void FreeMemory(MemoryKind kind, void* ptr);

// `size` elements of T in memory of kind `kKind`; move-only. T must be
// trivially copyable: the memory is neither constructed nor destroyed.
template <typename T, MemoryKind kKind>
class CudaArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  // size >= 0; an array of size 0 owns nothing and data() is null.
  static absl::StatusOr<CudaArray> Create(absl::string_view what, int64_t size) {
    CudaArray array;
    if (size <= 0) return array;
    ASSIGN_OR_RETURN(void* memory, AllocateMemory(kKind, what, sizeof(T) * size));
    array.data_ = static_cast<T*>(memory);
    array.size_ = size;
    return array;
  }

  CudaArray() = default;
  CudaArray(CudaArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  CudaArray& operator=(CudaArray&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~CudaArray() { Reset(); }

  T* data() const { return data_; }
  int64_t size() const { return size_; }
  size_t bytes() const { return sizeof(T) * static_cast<size_t>(size_); }

 private:
  void Reset() {
    if (data_ != nullptr) FreeMemory(kKind, data_);
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  int64_t size_ = 0;
};

template <typename T>
using DeviceArray = CudaArray<T, MemoryKind::kDevice>;
template <typename T>
using PinnedArray = CudaArray<T, MemoryKind::kPinnedHost>;

struct StreamDeleter {
  void operator()(cudaStream_t stream) const;
};
struct EventDeleter {
  void operator()(cudaEvent_t event) const;
};
struct CudnnHandleDeleter {
  void operator()(cudnnHandle_t handle) const;
};
struct CublasHandleDeleter {
  void operator()(cublasHandle_t handle) const;
};
struct TensorDescriptorDeleter {
  void operator()(cudnnTensorDescriptor_t descriptor) const;
};
struct FilterDescriptorDeleter {
  void operator()(cudnnFilterDescriptor_t descriptor) const;
};
struct ConvolutionDescriptorDeleter {
  void operator()(cudnnConvolutionDescriptor_t descriptor) const;
};

using Stream = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;
using CudnnHandle = std::unique_ptr<std::remove_pointer_t<cudnnHandle_t>, CudnnHandleDeleter>;
using CublasHandle = std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasHandleDeleter>;
using TensorDescriptor =
    std::unique_ptr<std::remove_pointer_t<cudnnTensorDescriptor_t>, TensorDescriptorDeleter>;
using FilterDescriptor =
    std::unique_ptr<std::remove_pointer_t<cudnnFilterDescriptor_t>, FilterDescriptorDeleter>;
using ConvolutionDescriptor = std::unique_ptr<std::remove_pointer_t<cudnnConvolutionDescriptor_t>,
                                              ConvolutionDescriptorDeleter>;

// A stream that does not synchronise with the legacy default stream.
absl::StatusOr<Stream> CreateStream();
// An event for ordering work across streams; `timing` enables
// cudaEventElapsedTime on it (and costs a little more to record).
absl::StatusOr<Event> CreateEvent(bool timing = false);
// A cuDNN handle whose work is queued on `stream`.
absl::StatusOr<CudnnHandle> CreateCudnnHandle(cudaStream_t stream);
// A cuBLAS handle whose work is queued on `stream`.
absl::StatusOr<CublasHandle> CreateCublasHandle(cudaStream_t stream);
absl::StatusOr<TensorDescriptor> CreateTensorDescriptor();
absl::StatusOr<FilterDescriptor> CreateFilterDescriptor();
absl::StatusOr<ConvolutionDescriptor> CreateConvolutionDescriptor();

// Sets an NCHW float32 tensor descriptor to [n, c, h, w].
absl::Status SetTensor4d(cudnnTensorDescriptor_t descriptor, int n, int c, int h, int w);

}  // namespace pstrain::models::cuda

#pragma once

// Helpers shared by the CUDA tests (cuda_layers_test.cc, cuda_model_test.cc):
// skipping where there is no GPU, moving vectors to and from the device, and
// the relative error the GPU results are held to against the CPU's.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "models/cuda/cuda_context.h"
#include "models/cuda/cuda_resources.h"

namespace pstrain::models::testing {

// Why the CUDA tests cannot run here, or "" when a GPU is present.
inline std::string NoGpuReason() {
  const absl::StatusOr<int> count = cuda::CountDevices();
  return count.ok() ? "" : std::string(count.status().message());
}

// GTEST_SKIP()s the calling test (or SetUp) when there is no GPU.
#define PSTRAIN_SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                           \
    if (const std::string reason = ::pstrain::models::testing::NoGpuReason(); !reason.empty()) { \
      GTEST_SKIP() << "needs a GPU: " << reason;                                                 \
    }                                                                                            \
  } while (0)

#define PSTRAIN_EXPECT_OK(expr)                                     \
  do {                                                              \
    const ::absl::Status pstrain_test_status_ = (expr);             \
    EXPECT_TRUE(pstrain_test_status_.ok()) << pstrain_test_status_; \
  } while (0)

// A device copy of `host` (null data for an empty vector). Waits for the
// copy, so the result may be used on any stream.
template <typename T>
cuda::DeviceArray<T> ToDevice(const std::vector<T>& host) {
  absl::StatusOr<cuda::DeviceArray<T>> array =
      cuda::DeviceArray<T>::Create("test input", static_cast<int64_t>(host.size()));
  EXPECT_TRUE(array.ok()) << array.status();
  if (!array.ok() || host.empty()) return cuda::DeviceArray<T>();
  EXPECT_EQ(cudaMemcpy(array->data(), host.data(), array->bytes(), cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return std::move(array).value();
}

// Zeroed device memory for `size` elements.
template <typename T>
cuda::DeviceArray<T> DeviceZeros(int64_t size) {
  return ToDevice(std::vector<T>(size, T{}));
}

// The first `size` elements of `array`, after all work queued on the device
// (on every stream) is done.
template <typename T>
std::vector<T> ToHost(const cuda::DeviceArray<T>& array, int64_t size) {
  std::vector<T> host(size);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (size == 0) return host;
  EXPECT_LE(size, array.size());
  EXPECT_EQ(cudaMemcpy(host.data(), array.data(), sizeof(T) * size, cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

// ||gpu - cpu|| / ||cpu|| in the 2-norm, summed in double (||gpu|| when
// cpu is all zeros, so that zero against zero is 0).
inline double RelativeError(const float* gpu, const float* cpu, int64_t size) {
  double diff = 0, norm = 0, gpu_norm = 0;
  for (int64_t i = 0; i < size; ++i) {
    diff += (double{gpu[i]} - cpu[i]) * (double{gpu[i]} - cpu[i]);
    norm += double{cpu[i]} * cpu[i];
    gpu_norm += double{gpu[i]} * gpu[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(gpu_norm);
}

inline double RelativeError(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  EXPECT_EQ(gpu.size(), cpu.size());
  return RelativeError(gpu.data(), cpu.data(),
                       static_cast<int64_t>(std::min(gpu.size(), cpu.size())));
}

// Expects RelativeError(gpu, cpu) <= tolerance, and prints the error reached
// so a run on a GPU documents it ("[ relerr ] conv1.dw 3.1e-07 <= 2.3e-05").
inline void ExpectRelativeError(const std::string& what, const std::vector<float>& gpu,
                                const std::vector<float>& cpu, double tolerance) {
  const double error = RelativeError(gpu, cpu);
  std::printf("[ relerr   ] %-28s %.3g (tolerance %.3g)\n", what.c_str(), error, tolerance);
  EXPECT_LE(error, tolerance) << what;
}

}  // namespace pstrain::models::testing

// How CUDA, cuDNN and cuBLAS results become absl::Status, and what the CUDA
// backend reports on a machine without a GPU. Host-side only: these run
// everywhere, GPU or not (the status functions format library error codes,
// which needs no device).

#include "models/cuda/cuda_status.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "models/cuda/cuda_context.h"
#include "models/cuda/cuda_resources.h"

namespace pstrain::models::cuda {
namespace {

absl::Status FailingCudaCall() {
  CUDA_RETURN_IF_ERROR(cudaErrorMemoryAllocation);
  return absl::OkStatus();
}

TEST(CudaStatus, NamesTheCallAndMapsOutOfMemoryToResourceExhausted) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "cudaFree(p)").ok());
  const absl::Status oom = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc(params, 87360 bytes)");
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StartsWith(oom.message(), "cudaMalloc(params, 87360 bytes): ")) << oom;
  EXPECT_TRUE(absl::StrContains(oom.message(), "cudaErrorMemoryAllocation")) << oom;
  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaStatus(cudaErrorInsufficientDriver, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaStatus(cudaErrorIllegalAddress, "x").code(), absl::StatusCode::kInternal);
}

TEST(CudaStatus, MacrosReturnTheStatusWithTheExpressionAsContext) {
  const absl::Status status = FailingCudaCall();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StartsWith(status.message(), "cudaErrorMemoryAllocation: ")) << status;
}

TEST(CudnnStatus, MapsAllocationFailuresToResourceExhausted) {
  EXPECT_TRUE(CudnnStatus(CUDNN_STATUS_SUCCESS, "cudnnCreate(&h)").ok());
  const absl::Status device = CudnnStatus(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,
                                          "cudnnConvolutionForward(...)");
  EXPECT_EQ(device.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StartsWith(device.message(), "cudnnConvolutionForward(...): ")) << device;
  EXPECT_EQ(CudnnStatus(CUDNN_STATUS_BAD_PARAM, "x").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(CudnnStatus(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH, "x").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CublasStatus, MapsAllocationFailuresToResourceExhausted) {
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "cublasCreate(&h)").ok());
  const absl::Status alloc = CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate(&h)");
  EXPECT_EQ(alloc.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(alloc.message(), "CUBLAS_STATUS_ALLOC_FAILED")) << alloc;
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_EXECUTION_FAILED, "x").code(), absl::StatusCode::kInternal);
}

TEST(CudaArray, OfSizeZeroOwnsNothing) {
  absl::StatusOr<DeviceArray<float>> empty = DeviceArray<float>::Create("empty", 0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->data(), nullptr);
  EXPECT_EQ(empty->bytes(), 0u);
}

// A sticky error survives cudaGetLastError's reset and says so; any other
// is the call's own.
TEST(CudaLastErrorStatus, TellsAStickyErrorFromTheCallsOwn) {
  EXPECT_TRUE(LastErrorStatus(cudaSuccess, cudaSuccess, "launch of K").ok());
  const absl::Status own =
      LastErrorStatus(cudaErrorInvalidConfiguration, cudaSuccess, "launch of ReluForwardKernel");
  EXPECT_EQ(own.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StartsWith(own.message(), "launch of ReluForwardKernel: ")) << own;
  EXPECT_TRUE(absl::StrContains(own.message(), "cudaErrorInvalidConfiguration")) << own;
  EXPECT_FALSE(absl::StrContains(own.message(), "sticky")) << own;
  const absl::Status sticky = LastErrorStatus(cudaErrorIllegalAddress, cudaErrorIllegalAddress,
                                              "before launch of ReluForwardKernel");
  EXPECT_EQ(sticky.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StartsWith(sticky.message(), "before launch of ReluForwardKernel: ")) << sticky;
  EXPECT_TRUE(absl::StrContains(sticky.message(), "cudaErrorIllegalAddress")) << sticky;
  EXPECT_TRUE(absl::StrContains(sticky.message(), "sticky")) << sticky;
}

// Without a driver every runtime call fails with an error that no reset
// clears: LaunchKernel reports it as sticky before the launch, and does not
// launch.
TEST(CudaLaunchKernel, WithoutAGpuRefusesBeforeLaunchingAndSaysWhy) {
  if (DeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  bool launched = false;
  const absl::Status status = LaunchKernel("TestKernel", [&] { launched = true; });
  EXPECT_FALSE(launched);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StartsWith(status.message(), "before launch of TestKernel: ")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "sticky")) << status;
}

// With a GPU, an error an earlier call left unread (here an invalid
// cudaSetDevice) is cleared before the launch and not blamed on it; the
// launch's own error is reported with the kernel's name. The launch is a
// runtime call standing in for one; cuda_layers_test launches real kernels
// after a stale error.
TEST(CudaLaunchKernel, ClearsAnEarlierCallsErrorAndReportsOnlyItsOwn) {
  if (DeviceCount() == 0) GTEST_SKIP() << "needs a GPU";
  const int invalid = DeviceCount() + 7;
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_NE(cudaSetDevice(invalid), cudaSuccess);  // leaves cudaErrorInvalidDevice unread
  bool launched = false;
  const absl::Status clean = LaunchKernel("TestKernel", [&] { launched = true; });
  EXPECT_TRUE(launched);
  EXPECT_TRUE(clean.ok()) << clean;
  const absl::Status own = LaunchKernel("TestKernel", [&] { (void)cudaSetDevice(invalid); });
  EXPECT_TRUE(absl::StartsWith(own.message(), "launch of TestKernel: ")) << own;
  EXPECT_TRUE(absl::StrContains(own.message(), "cudaErrorInvalidDevice")) << own;
  EXPECT_FALSE(absl::StrContains(own.message(), "sticky")) << own;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(current), cudaSuccess);
}

// The versions are 1000 * major + 10 * minor; the runtime's minor-version
// compatibility means only a lower major version (or the runtime's own
// verdict) makes a driver too old.
TEST(DescribeCudaVersions, NamesBothVersionsAndATooOldDriver) {
  EXPECT_EQ(DescribeCudaVersions({12080, 13000}),
            "CUDA driver 12.8, runtime 13.0: the NVIDIA driver is too old for this build's CUDA "
            "runtime; install a driver for CUDA 13.0 or newer");
  EXPECT_EQ(DescribeCudaVersions({13010, 13000}), "CUDA driver 13.1, runtime 13.0");
  EXPECT_EQ(DescribeCudaVersions({13000, 13020}), "CUDA driver 13.0, runtime 13.2");
  EXPECT_TRUE(absl::StrContains(DescribeCudaVersions({13000, 13020}, cudaErrorInsufficientDriver),
                                "driver is too old"));
  EXPECT_EQ(DescribeCudaVersions({0, 13000}), "no NVIDIA driver loaded (CUDA runtime 13.0)");
}

TEST(GetCudaVersions, KnowsThisBuildsRuntimeEvenWithoutADriver) {
  const CudaVersions versions = GetCudaVersions();
  EXPECT_EQ(versions.runtime / 1000, CUDART_VERSION / 1000);
  EXPECT_GE(versions.driver, 0);
}

// Without a GPU: DeviceCount is 0 and says nothing; CountDevices and a
// context say why, as FailedPrecondition "no CUDA device (...)", naming the
// CUDA versions.
TEST(CudaDevices, WithoutAGpuThereIsNoDeviceAndACleanError) {
  if (DeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  const absl::StatusOr<int> count = CountDevices();
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(count.status().message(), "no CUDA device")) << count.status();
  const int runtime = GetCudaVersions().runtime;
  const std::string runtime_version =
      absl::StrCat("runtime ", runtime / 1000, ".", (runtime % 1000) / 10);
  EXPECT_TRUE(absl::StrContains(count.status().message(), runtime_version)) << count.status();
  const absl::StatusOr<std::unique_ptr<CudaContext>> context = CudaContext::Create(0);
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(context.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DeviceCount(), 0);  // asking twice is as quiet as once
}

}  // namespace
}  // namespace pstrain::models::cuda

// Device selection where no GPU can be used: on a machine without one, and in
// a build without the CUDA backend (this test is built in both). "auto"
// trains on the CPU; "cuda" and "cuda:I" are a clean FailedPrecondition that
// says "no CUDA device" and why, never a crash. With a GPU,
// cuda_model_test.cc covers selection instead.

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/file_util.h"
#include "gtest/gtest.h"
#include "models/model.h"

namespace pstrain::models {
namespace {

ModelOptions Options(const std::string& device, int local_rank = 0) {
  ModelOptions options;
  options.name = "mnist_cnn";
  options.device = device;
  options.max_batch = 4;
  options.local_rank = local_rank;
  return options;
}

class WithoutGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU: see cuda_model_test";
  }
};

TEST_F(WithoutGpu, AutoTrainsOnTheCpu) {
  for (int rank : {0, 1, 5}) {
    absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(Options("auto", rank));
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->device_description(), "cpu");
  }
}

// Without an NVIDIA driver, "auto" does not even load the CUDA plugin:
// cuBLAS alone costs ~150 MB resident (models/cuda/plugin.cc).
TEST_F(WithoutGpu, AutoDoesNotLoadCudaWithoutADriver) {
  if (access("/dev/nvidiactl", F_OK) == 0) GTEST_SKIP() << "an NVIDIA driver is loaded here";
  auto model = CreateModel(Options("auto"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto maps = ReadFileToString("/proc/self/maps");
  ASSERT_TRUE(maps.ok());
  EXPECT_FALSE(absl::StrContains(*maps, "libcublas")) << "cuBLAS was loaded for a CPU model";
  EXPECT_FALSE(absl::StrContains(*maps, "libpstrain_cuda")) << "the CUDA plugin was loaded";
}

TEST_F(WithoutGpu, CudaIsAFailedPreconditionThatSaysNoCudaDevice) {
  for (const std::string& device : std::vector<std::string>{"cuda", "cuda:0", "cuda:3"}) {
    for (int rank : {0, 2}) {
      absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(Options(device, rank));
      ASSERT_FALSE(model.ok()) << device;
      EXPECT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition) << device;
      EXPECT_TRUE(absl::StrContains(model.status().message(), "no CUDA device")) << model.status();
      // With the CUDA backend the reason names the CUDA runtime's version
      // (and the driver's, when one is loaded).
      EXPECT_TRUE(absl::StrContains(model.status().message(), "runtime ") ||
                  absl::StrContains(model.status().message(), "this build has no CUDA backend"))
          << model.status();
      EXPECT_TRUE(absl::StrContains(model.status().message(), "--device=" + device))
          << model.status();
    }
  }
}

// Checked before the device is, so the same everywhere.
TEST(DeviceSelection, RejectsMalformedDevicesAndNegativeRanks) {
  for (const std::string& device : std::vector<std::string>{"gpu", "cuda:", "cuda:-1", "cuda:x"}) {
    EXPECT_EQ(CreateModel(Options(device)).status().code(), absl::StatusCode::kInvalidArgument)
        << device;
  }
  EXPECT_EQ(CreateModel(Options("cpu", -1)).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain::models

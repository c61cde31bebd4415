#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/cpu/cpu_model.h"
#include "models/model.h"
#if PSTRAIN_HAVE_CUDA
#include "models/cuda/cuda_model.h"
#endif

namespace pstrain::models {
namespace {

// Parses "cuda:I" into I, and "cuda" into local_rank mod the number of GPUs
// (0 when there is none: the backend then says so); -1 for anything else.
int ParseCudaIndex(const std::string& device, int local_rank) {
  if (device == "cuda") {
    const int count = CudaDeviceCount();
    return count > 0 ? local_rank % count : 0;
  }
  int index = -1;
  if (absl::StartsWith(device, "cuda:") && absl::SimpleAtoi(device.substr(5), &index) && index >= 0) {
    return index;
  }
  return -1;
}

}  // namespace

int CudaDeviceCount() {
#if PSTRAIN_HAVE_CUDA
  return cuda::DeviceCount();
#else
  return 0;
#endif
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelOptions& options) {
  ASSIGN_OR_RETURN(NetSpec net, GetNetSpec(options.name));
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_batch must be >= 1, got ", options.max_batch));
  }
  if (options.local_rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_rank must be >= 0, got ", options.local_rank));
  }
  std::string device = options.device;
  if (device == "auto") device = CudaDeviceCount() > 0 ? "cuda" : "cpu";
  if (device == "cpu") return cpu::CreateCpuModel(net, options);
  const int index = ParseCudaIndex(device, options.local_rank);
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: \"", options.device, "\" (expected auto, cpu, cuda or cuda:I)"));
  }
#if PSTRAIN_HAVE_CUDA
  absl::StatusOr<std::unique_ptr<Model>> model = cuda::CreateCudaModel(net, options, index);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("--device=", options.device, ": ", model.status().message()));
  }
  return model;
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "--device=", options.device, ": no CUDA device (this build has no CUDA backend)"));
#endif
}

}  // namespace pstrain::models

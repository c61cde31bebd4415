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

// Parses "cuda" / "cuda:I" into a device index; -1 for anything else.
int ParseCudaIndex(const std::string& device) {
  if (device == "cuda") return 0;
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
  std::string device = options.device;
  if (device == "auto") device = CudaDeviceCount() > 0 ? "cuda:0" : "cpu";
  if (device == "cpu") return cpu::CreateCpuModel(net, options);
  const int index = ParseCudaIndex(device);
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: \"", options.device, "\" (expected auto, cpu, cuda or cuda:I)"));
  }
#if PSTRAIN_HAVE_CUDA
  return cuda::CreateCudaModel(net, options, index);
#else
  return absl::FailedPreconditionError(
      absl::StrCat("--device=", options.device, ": this build has no CUDA backend"));
#endif
}

}  // namespace pstrain::models

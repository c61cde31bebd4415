#include "models/cuda/cuda_context.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain::models::cuda {
namespace {

// cuBLAS's recommended workspace for Hopper (4 MiB would do for Ampere); set
// explicitly so cuBLAS allocates nothing of its own during a step.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// "13.0" for 13000.
std::string VersionString(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

}  // namespace

CudaVersions GetCudaVersions() {
  CudaVersions versions;
  if (cudaDriverGetVersion(&versions.driver) != cudaSuccess) versions.driver = 0;
  if (cudaRuntimeGetVersion(&versions.runtime) != cudaSuccess) versions.runtime = 0;
  (void)cudaGetLastError();
  return versions;
}

// CUDA's minor-version compatibility lets a driver of the runtime's major
// version run it, so a lower minor version alone is not "too old"; the
// runtime's own verdict (cudaErrorInsufficientDriver) is.
std::string DescribeCudaVersions(CudaVersions versions, cudaError_t error) {
  const std::string runtime = VersionString(versions.runtime);
  if (versions.driver == 0) {
    return absl::StrCat("no NVIDIA driver loaded (CUDA runtime ", runtime, ")");
  }
  std::string text =
      absl::StrCat("CUDA driver ", VersionString(versions.driver), ", runtime ", runtime);
  if (versions.driver / 1000 < versions.runtime / 1000 || error == cudaErrorInsufficientDriver) {
    absl::StrAppend(&text, ": the NVIDIA driver is too old for this build's CUDA runtime; install ",
                    "a driver for CUDA ", runtime, " or newer");
  }
  return text;
}

int DeviceCount() {
  absl::StatusOr<int> count = CountDevices();
  return count.ok() ? *count : 0;
}

absl::StatusOr<int> CountDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaSuccess && count >= 1) return count;
  const std::string versions = DescribeCudaVersions(GetCudaVersions(), error);
  if (error != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device (", CudaStatus(error, "cudaGetDeviceCount").message(), "; ",
                     versions, ")"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no CUDA device (the driver reports none; ", versions, ")"));
}

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(int device) {
  ASSIGN_OR_RETURN(const int count, CountDevices());
  if (device < 0 || device >= count) {
    const std::string known = count == 1 ? "cuda:0" : absl::StrCat("cuda:0 to cuda:", count - 1);
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device cuda:", device, " (the driver reports ", known, ")"));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaDeviceProp properties;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device));
  std::unique_ptr<CudaContext> context(
      new CudaContext(device, absl::StrCat("cuda:", device, " (", properties.name, ")")));
  RETURN_IF_ERROR(context->Init());
  LOG(INFO) << "CUDA backend on " << context->description() << ": "
            << DescribeCudaVersions(GetCudaVersions());
  return context;
}

CudaContext::CudaContext(int device, std::string description)
    : device_(device), description_(std::move(description)) {}

CudaContext::~CudaContext() {
  if (cudaSetDevice(device_) != cudaSuccess ||
      cudaStreamSynchronize(stream_.get()) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

absl::Status CudaContext::Init() {
  ASSIGN_OR_RETURN(stream_, CreateStream());
  ASSIGN_OR_RETURN(cudnn_, CreateCudnnHandle(stream_.get()));
  ASSIGN_OR_RETURN(cublas_, CreateCublasHandle(stream_.get()));
  CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(cublas_.get(), CUBLAS_PEDANTIC_MATH));
  ASSIGN_OR_RETURN(cublas_workspace_,
                   DeviceArray<char>::Create("cublas workspace", kCublasWorkspaceBytes));
  // After cublasSetStream, which resets the workspace to cuBLAS's own pool.
  CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(cublas_.get(), cublas_workspace_.data(), cublas_workspace_.bytes()));
  return absl::OkStatus();
}

absl::Status CudaContext::Activate() const {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return absl::OkStatus();
}

void CudaContext::AdoptWorkspace(DeviceArray<char> workspace) {
  if (workspace.bytes() > workspace_.bytes()) workspace_ = std::move(workspace);
}

// Filled by a synchronous copy from the host: construction time, once per
// size, so no kernel is needed.
absl::Status CudaContext::ReserveOnes(int64_t size) {
  if (size <= ones_.size()) return absl::OkStatus();
  RETURN_IF_ERROR(Activate());
  ones_ = DeviceArray<float>();
  ASSIGN_OR_RETURN(ones_, DeviceArray<float>::Create("ones", size));
  const std::vector<float> host(size, 1.0f);
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(ones_.data(), host.data(), ones_.bytes(), cudaMemcpyHostToDevice, stream()));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
  return absl::OkStatus();
}

}  // namespace pstrain::models::cuda

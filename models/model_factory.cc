#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/cpu/cpu_model.h"
#include "models/model.h"
#include "models/plugin_abi.h"

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

namespace {

// The CUDA plugin's entry points (models/plugin_abi.h), loaded once.
struct CudaPlugin {
  int (*device_count)(absl::Status*) = nullptr;
  Model* (*create_model)(const NetSpec*, const ModelOptions*, int, absl::Status*) = nullptr;
  std::string error;  // why it could not be loaded
};

// The directory of this process's executable: the plugin lies beside it.
std::string ExecutableDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  std::string p(path, static_cast<size_t>(n));
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

const CudaPlugin& LoadCudaPlugin() {
  static CudaPlugin plugin;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!PSTRAIN_HAVE_CUDA) {
      plugin.error = "this build has no CUDA backend";
      return;
    }
    const std::string path = ExecutableDir() + "/" + PSTRAIN_CUDA_PLUGIN_FILE;
    // Never closed: its code backs every model it made.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      plugin.error = absl::StrCat("cannot load the CUDA backend ", path, ": ",
                                  why != nullptr ? why : "unknown error");
      return;
    }
    plugin.device_count = reinterpret_cast<int (*)(absl::Status*)>(
        dlsym(handle, PSTRAIN_STRINGIFY(PSTRAIN_CUDA_DEVICE_COUNT_SYMBOL)));
    plugin.create_model = reinterpret_cast<Model* (*)(const NetSpec*, const ModelOptions*, int,
                                                      absl::Status*)>(
        dlsym(handle, PSTRAIN_STRINGIFY(PSTRAIN_CUDA_CREATE_MODEL_SYMBOL)));
    if (plugin.device_count == nullptr || plugin.create_model == nullptr) {
      plugin.error = absl::StrCat(path, " is not this build's CUDA backend (its entry points are "
                                  "missing: rebuild it)");
      plugin.device_count = nullptr;
      plugin.create_model = nullptr;
    }
  });
  return plugin;
}

// Whether an NVIDIA driver is loaded: without one no GPU can be used, and
// the plugin (cuBLAS: ~150 MB resident) is not worth loading to learn it.
bool NvidiaDriverPresent() {
  return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0;
}

// The usable GPUs, or why there are none (from the plugin: with the
// driver's and the runtime's CUDA versions).
absl::StatusOr<int> CountCudaDevices() {
  if (!PSTRAIN_HAVE_CUDA) return absl::FailedPreconditionError("this build has no CUDA backend");
  if (!NvidiaDriverPresent()) return absl::FailedPreconditionError("no NVIDIA driver is loaded");
  const CudaPlugin& plugin = LoadCudaPlugin();
  if (plugin.device_count == nullptr) return absl::FailedPreconditionError(plugin.error);
  absl::Status reason;
  const int count = plugin.device_count(&reason);
  if (count > 0) return count;
  return reason.ok() ? absl::FailedPreconditionError("no CUDA device") : reason;
}

// "cuda" when a GPU can be used, else "cpu". With a driver loaded but no
// usable GPU (a driver too old for this build's CUDA runtime, a missing
// plugin), a machine meant to train on its GPU would quietly train on the
// CPU: a warning says why. Without a driver the CPU is the expected choice.
std::string AutoDevice() {
  const absl::StatusOr<int> count = CountCudaDevices();
  if (count.ok()) return "cuda";
  if (PSTRAIN_HAVE_CUDA && NvidiaDriverPresent()) {
    LOG_FIRST_N(WARNING, 1) << "--device=auto: " << count.status().message()
                            << "; training on the CPU";
  }
  return "cpu";
}

}  // namespace

int CudaDeviceCount() { return CountCudaDevices().value_or(0); }

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
  if (device == "auto") device = AutoDevice();
  if (device == "cpu") return cpu::CreateCpuModel(net, options);
  const int index = ParseCudaIndex(device, options.local_rank);
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: \"", options.device, "\" (expected auto, cpu, cuda or cuda:I)"));
  }
  if (!PSTRAIN_HAVE_CUDA) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=", options.device, ": no CUDA device (this build has no CUDA backend)"));
  }
  const CudaPlugin& plugin = LoadCudaPlugin();
  if (plugin.create_model == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=", options.device, ": ", plugin.error));
  }
  absl::Status error;
  std::unique_ptr<Model> model(plugin.create_model(&net, &options, index, &error));
  if (model == nullptr) {
    return absl::Status(error.ok() ? absl::StatusCode::kInternal : error.code(),
                        absl::StrCat("--device=", options.device, ": ", error.message()));
  }
  return model;
}

}  // namespace pstrain::models

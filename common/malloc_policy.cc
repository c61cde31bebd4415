#include "common/malloc_policy.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "glog/logging.h"

namespace pstrain {

bool UserSetsMalloc(const char* tunables, bool malloc_variable) {
  return malloc_variable ||
         (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr);
}

bool EnvironmentSetsMalloc() {
  bool malloc_variable = false;
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                           "MALLOC_MMAP_MAX_"}) {
    malloc_variable = malloc_variable || std::getenv(name) != nullptr;
  }
  return UserSetsMalloc(std::getenv("GLIBC_TUNABLES"), malloc_variable);
}

bool KeepFreedMemoryForReuse() {
  static const bool applied = [] {
    if (EnvironmentSetsMalloc()) return false;
    // Each is fixed once set (glibc's dynamic threshold stops): both, so
    // that a block kept by one is not given back by the other. The first
    // refused changes nothing; the second is never refused.
    const bool ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockBytes)) == 1 &&
                    mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeptFreeBytes)) == 1;
    if (!ok) {
      LOG(INFO) << "malloc left as it is: it refused a " << (kHeapBlockBytes >> 20)
                << " MiB mmap threshold (glibc before 2.35, or a sanitizer's allocator); a "
                   "step's large blocks are mapped afresh each time";
    }
    return ok;
  }();
  return applied;
}

}  // namespace pstrain

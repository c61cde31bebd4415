#include "common/malloc_policy.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace pstrain {

bool TunablesSetMalloc(const char* tunables) {
  return tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr;
}

bool KeepFreedMemoryForReuse() {
  static const bool applied = [] {
    if (TunablesSetMalloc(std::getenv("GLIBC_TUNABLES"))) return false;
    // Each is fixed once set (glibc's dynamic threshold stops): both, so
    // that a block kept by one is not given back by the other.
    return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockBytes)) == 1 &&
           mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeptFreeBytes)) == 1;
  }();
  return applied;
}

}  // namespace pstrain

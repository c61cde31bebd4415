#include "common/malloc_policy.h"

#include <sys/prctl.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(UserSetsMalloc, OnlyMallocsTunablesAndVariablesCount) {
  EXPECT_FALSE(UserSetsMalloc(nullptr, false));
  EXPECT_FALSE(UserSetsMalloc("", false));
  EXPECT_FALSE(UserSetsMalloc("glibc.pthread.rseq=0", false));
  EXPECT_TRUE(UserSetsMalloc("glibc.malloc.mmap_threshold=131072", false));
  EXPECT_TRUE(UserSetsMalloc("glibc.pthread.rseq=0:glibc.malloc.arena_max=2", false));
  EXPECT_TRUE(UserSetsMalloc(nullptr, true));
}

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The minor page faults of allocating `bytes`, writing every page, and
// freeing them, the second time round (the first maps the memory either way).
long FaultsOfASecondBlock(size_t bytes) {
  long faults = 0;
  for (int i = 0; i < 2; ++i) {
    const long before = MinorFaults();
    char* volatile block = static_cast<char*>(std::malloc(bytes));
    if (block == nullptr) return -1;
    std::memset(block, i + 1, bytes);
    if (block[bytes - 1] != i + 1) return -1;
    std::free(block);
    faults = MinorFaults() - before;
  }
  return faults;
}

TEST(KeepFreedMemoryForReuse, AFreedLargeBlocksPagesServeTheNextOne) {
  if (EnvironmentSetsMalloc()) {
    GTEST_SKIP() << "the environment sets malloc's tunables: the policy leaves them";
  }
  // 4 KiB pages, one fault each, whatever the host's transparent huge
  // pages (on "always" a block would fault in 2 MiB at a time).
  ASSERT_EQ(prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0), 0);
  // 48 MiB: over glibc's own largest mmap threshold, so that without the
  // policy each such block is mapped afresh, its pages faulted in again.
  constexpr size_t kBytes = size_t{48} << 20;
  constexpr long kPages = static_cast<long>(kBytes / 4096);
  const long without = FaultsOfASecondBlock(kBytes);
  ASSERT_GE(without, 0);
  if (!KeepFreedMemoryForReuse()) {
    GTEST_SKIP() << "malloc refused the policy (glibc before 2.35, or ASan's allocator)";
  }
  if (without < kPages / 2) {
    GTEST_SKIP() << "a second block faulted " << without << " pages of " << kPages
                 << " before the policy (already applied: a repeat): nothing to compare with";
  }
  const long with = FaultsOfASecondBlock(kBytes);
  ASSERT_GE(with, 0);
  std::cout << "page faults of a second 48 MiB block: " << without << " without the policy, "
            << with << " with it (" << kPages << " pages)\n";
  EXPECT_LT(with, kPages / 10) << without << " faults before the policy";
  EXPECT_TRUE(KeepFreedMemoryForReuse());  // once, and the same answer
}

}  // namespace
}  // namespace pstrain

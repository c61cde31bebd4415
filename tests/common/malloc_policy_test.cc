#include "common/malloc_policy.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(TunablesSetMalloc, OnlyGlibcsMallocTunablesCount) {
  EXPECT_FALSE(TunablesSetMalloc(nullptr));
  EXPECT_FALSE(TunablesSetMalloc(""));
  EXPECT_FALSE(TunablesSetMalloc("glibc.pthread.rseq=0"));
  EXPECT_TRUE(TunablesSetMalloc("glibc.malloc.mmap_threshold=131072"));
  EXPECT_TRUE(TunablesSetMalloc("glibc.pthread.rseq=0:glibc.malloc.arena_max=2"));
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
  if (TunablesSetMalloc(std::getenv("GLIBC_TUNABLES"))) {
    GTEST_SKIP() << "GLIBC_TUNABLES sets malloc: the policy leaves it";
  }
  // 48 MiB: over glibc's own largest mmap threshold, so that without the
  // policy each such block is mapped afresh, its pages faulted in again.
  constexpr size_t kBytes = size_t{48} << 20;
  constexpr long kPages = static_cast<long>(kBytes / 4096);
  const long without = FaultsOfASecondBlock(kBytes);
  ASSERT_GE(without, 0);
  if (!KeepFreedMemoryForReuse()) GTEST_SKIP() << "this allocator ignores mallopt (a sanitizer's)";
  EXPECT_GT(without, kPages / 2) << "glibc's defaults kept the block: nothing to compare with";
  const long with = FaultsOfASecondBlock(kBytes);
  ASSERT_GE(with, 0);
  std::cout << "page faults of a second 48 MiB block: " << without << " without the policy, "
            << with << " with it (" << kPages << " pages)\n";
  EXPECT_LT(with, kPages / 10) << without << " faults before the policy";
  EXPECT_TRUE(KeepFreedMemoryForReuse());  // once, and the same answer
}

}  // namespace
}  // namespace pstrain

// The Cancellation a test or an owner fires by hand.

#include "common/cancellation.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(Cancellation, NeverCancelledNeverFires) {
  EXPECT_FALSE(NeverCancelled()->cancelled());
  EXPECT_EQ(NeverCancelled()->reason(), "");
}

TEST(CancellationFlag, FiresOnceAndKeepsTheFirstReason) {
  CancellationFlag flag;
  EXPECT_FALSE(flag.cancelled());
  EXPECT_EQ(flag.reason(), "");
  flag.Cancel("first");
  flag.Cancel("second");
  EXPECT_TRUE(flag.cancelled());
  EXPECT_EQ(flag.reason(), "first");
}

// Fired on some threads while others poll it: every poller sees it fire
// and reads one of the reasons given (TSan checks the accesses).
TEST(CancellationFlag, FiresAcrossThreads) {
  CancellationFlag flag;
  std::vector<std::thread> threads;
  std::vector<std::string> seen(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&flag, &seen, i] {
      while (!flag.cancelled()) std::this_thread::yield();
      seen[i] = flag.reason();
    });
  }
  for (int i = 0; i < 2; ++i) threads.emplace_back([&flag, i] { flag.Cancel(i == 0 ? "a" : "b"); });
  for (std::thread& t : threads) t.join();
  for (const std::string& r : seen) EXPECT_EQ(r, flag.reason());
  EXPECT_TRUE(flag.reason() == "a" || flag.reason() == "b") << flag.reason();
}

}  // namespace
}  // namespace pstrain

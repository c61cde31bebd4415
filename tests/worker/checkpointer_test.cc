// The chief's checkpoint schedule without a cluster: when a save is due,
// by steps and by the clock. (The manifests it writes and refuses:
// tests/checkpoint/manifest_test.cc.)

#include "worker/checkpointer.h"

#include "common/clock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(Checkpointer, SavesEveryNStepsAndOnceAtTheEnd) {
  CheckpointerOptions o;
  o.every_steps = 10;
  Checkpointer c(o, nullptr);
  EXPECT_FALSE(c.Due(5, false));
  EXPECT_TRUE(c.Due(10, false));
  EXPECT_TRUE(c.Due(20, false));
  EXPECT_TRUE(c.Due(23, /*done=*/true));
  Checkpointer off(CheckpointerOptions{}, nullptr);
  EXPECT_FALSE(off.Due(10, false));
  EXPECT_FALSE(off.Due(10, true));
}

TEST(Checkpointer, SavesEveryTSecondsOfTheClock) {
  FakeClock clock;
  CheckpointerOptions o;
  o.every_s = 30;
  o.clock = &clock;
  Checkpointer c(o, nullptr);
  EXPECT_FALSE(c.Due(7, false));
  clock.AdvanceSeconds(29.9);
  EXPECT_FALSE(c.Due(8, false));
  clock.AdvanceSeconds(0.1);
  EXPECT_TRUE(c.Due(9, false));
}

}  // namespace
}  // namespace pstrain

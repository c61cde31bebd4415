// WorkerTable: registration and liveness of each rank, on a fake clock.

#include "ps_server/worker_table.h"

#include "common/clock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(WorkerTable, SaysWhenARankRegistersFromANewClient) {
  FakeClock clock;
  WorkerTable table(3, &clock);
  EXPECT_EQ(table.num_registered(), 0);
  EXPECT_FALSE(table.MarkRegistered(1, 0xA));
  EXPECT_FALSE(table.MarkRegistered(1, 0xA));  // the same client again
  EXPECT_TRUE(table.MarkRegistered(1, 0xB));   // a restarted worker
  EXPECT_TRUE(table.registered(1));
  EXPECT_EQ(table.num_registered(), 1);
}

TEST(WorkerTable, CountsSilenceFromTheLastTimeARankWasHeardFrom) {
  FakeClock clock;
  WorkerTable table(2, &clock);
  clock.AdvanceSeconds(4);
  table.NoteAlive(0);
  clock.AdvanceSeconds(3);
  EXPECT_DOUBLE_EQ(table.SilentSeconds(0), 3.0);
  EXPECT_DOUBLE_EQ(table.SilentSeconds(1), 7.0);
  EXPECT_TRUE(table.heard_from(0));
  EXPECT_FALSE(table.heard_from(1));
  table.NoteAllAlive();
  EXPECT_DOUBLE_EQ(table.SilentSeconds(1), 0.0);
  EXPECT_TRUE(table.heard_from(1));
}

TEST(WorkerTable, CountsTheLivingAndKeepsAbsentSlotsApart) {
  FakeClock clock;
  WorkerTable table(4, &clock);
  EXPECT_EQ(table.num_alive(), 4);
  table.set_dead(2, true);
  table.set_absent(3, true);
  table.set_dead(3, true);
  EXPECT_EQ(table.num_alive(), 2);
  EXPECT_TRUE(table.absent(3));
  EXPECT_FALSE(table.absent(2));
  table.NoteRoute(1, "route-1");
  EXPECT_EQ(table.route(1), "route-1");
  EXPECT_EQ(table.route(0), "");
}

}  // namespace
}  // namespace pstrain

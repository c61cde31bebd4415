// The checkpoint directory's layout: checkpoints listed in numeric order,
// and only the newest K kept, by the chief and the ps tasks sharing one
// directory, each removing its own files.

#include "checkpoint/checkpoint_dir.h"

#include <filesystem>
#include <string>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A checkpoint as the chief and two ps tasks leave it.
void MakeCheckpoint(const std::string& dir, int64_t step) {
  ASSERT_TRUE(MakeDirs(CheckpointPath(dir, step)).ok());
  for (const std::string& f : {ManifestFileName(step), ShardFileName(step, 0, 2),
                               ShardFileName(step, 1, 2)}) {
    ASSERT_TRUE(WriteFileAtomic(dir + "/" + f, "x").ok());
  }
}

TEST(CheckpointDir, NamesFilesByStep) {
  EXPECT_EQ(CheckpointName(20), "ckpt-20");
  EXPECT_EQ(CheckpointPath("runs/a/checkpoints", 20), "runs/a/checkpoints/ckpt-20");
  EXPECT_EQ(ShardFileName(20, 1, 2), "ckpt-20/shard-1-of-2.ckpt");
  EXPECT_EQ(ManifestFileName(20), "ckpt-20/manifest.json");
}

TEST(CheckpointDir, ListsCheckpointsInNumericOrderAndIgnoresEverythingElse) {
  const std::string dir = testing::MakeTempDir("ckptdir");
  for (int64_t step : {100, 9, 10}) MakeCheckpoint(dir, step);
  for (const char* other : {"/ckpt-", "/ckpt-1a", "/ckpt--3", "/notes"}) {
    ASSERT_TRUE(MakeDirs(dir + other).ok());
  }
  ASSERT_TRUE(WriteFileAtomic(dir + "/ckpt-7", "a file, not a checkpoint").ok());
  auto steps = ListCheckpointSteps(dir);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_THAT(*steps, ElementsAre(9, 10, 100));
  auto none = ListCheckpointSteps(dir + "/missing");
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(*none, IsEmpty());
}

TEST(CheckpointDir, KeepsTheNewestKWhenChiefAndPsTasksShareTheDirectory) {
  const std::string dir = testing::MakeTempDir("ckptdir");
  for (int64_t step : {10, 20, 30, 40, 50}) MakeCheckpoint(dir, step);
  // A writer killed mid-write left its temporary behind.
  ASSERT_TRUE(WriteFileAtomic(dir + "/" + ShardFileName(10, 1, 2) + ".tmp.4242", "x").ok());
  // Each ps prunes its own shard files, then the chief its manifests: the
  // last one to leave a directory removes it.
  for (const char* own : {"shard-0-of-2.ckpt", "shard-1-of-2.ckpt", "manifest.json"}) {
    auto pruned = PruneCheckpoints(dir, 3, own);
    ASSERT_TRUE(pruned.ok()) << pruned.status();
    EXPECT_THAT(*pruned, ElementsAre(10, 20)) << own;
  }
  EXPECT_THAT(*ListCheckpointSteps(dir), ElementsAre(30, 40, 50));
  EXPECT_FALSE(FileExists(CheckpointPath(dir, 10)));
  EXPECT_TRUE(FileExists(dir + "/" + ManifestFileName(30)));
  EXPECT_TRUE(FileExists(dir + "/" + ShardFileName(30, 1, 2)));
}

// A save that failed on one ps leaves a directory without a manifest: it
// is kept (it is newer), but counts for nothing, so the newest complete
// ones stay whole.
TEST(CheckpointDir, OnlyCompleteCheckpointsCount) {
  const std::string dir = testing::MakeTempDir("ckptdir");
  for (int64_t step : {10, 20}) MakeCheckpoint(dir, step);
  for (int64_t step : {30, 40, 50}) {
    ASSERT_TRUE(MakeDirs(CheckpointPath(dir, step)).ok());
    ASSERT_TRUE(WriteFileAtomic(dir + "/" + ShardFileName(step, 1, 2), "ps 1's only").ok());
  }
  EXPECT_EQ(*KeepFromStep(dir, 2), 10);
  EXPECT_EQ(*KeepFromStep(dir, 1), 20);
  EXPECT_EQ(*KeepFromStep(dir, 3), 0);  // fewer are complete: keep everything
  auto pruned = PruneCheckpoints(dir, 2, "shard-1-of-2.ckpt");
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(*pruned, IsEmpty());
  pruned = RemoveOwnFilesBefore(dir, 20, "shard-1-of-2.ckpt");
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(*pruned, ElementsAre(10));
  EXPECT_TRUE(FileExists(dir + "/" + ManifestFileName(10)));  // the chief's, not ps 1's
  EXPECT_FALSE(FileExists(dir + "/" + ShardFileName(10, 1, 2)));
  EXPECT_FALSE(KeepFromStep(dir, 0).ok());
  EXPECT_FALSE(KeepFromStep(dir, kMaxKeepCheckpoints + 1).ok());
}

TEST(CheckpointDir, KeepingMoreThanThereAreRemovesNothing) {
  const std::string dir = testing::MakeTempDir("ckptdir");
  MakeCheckpoint(dir, 10);
  auto pruned = PruneCheckpoints(dir, 3, "manifest.json");
  ASSERT_TRUE(pruned.ok());
  EXPECT_THAT(*pruned, IsEmpty());
  EXPECT_TRUE(FileExists(dir + "/" + ManifestFileName(10)));
}

}  // namespace
}  // namespace pstrain

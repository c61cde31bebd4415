// The file helpers against a real file system: atomic replacement, errors
// that name the path, a full disk (a 64 KiB tmpfs in a private mount
// namespace when the test may make one; /dev/full for the CSV writer, which
// writes in place), and the run directory's stale outputs.

#include "common/file_util.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/csv.h"
#include "common/run_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(WriteFileAtomic, WritesThenReplacesWholeAndLeavesNoTemporaryFile) {
  const std::string dir = testing::MakeTempDir("atomic");
  const std::string path = dir + "/summary.json";
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  EXPECT_EQ(*ReadFileToString(path), "first");
  const std::string big(3 << 20, 'x');  // several write() calls' worth
  ASSERT_TRUE(WriteFileAtomic(path, big).ok());
  EXPECT_EQ(*ReadFileToString(path), big);
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  EXPECT_EQ(*ReadFileToString(path), "");
  EXPECT_THAT(Names(dir), ElementsAre("summary.json"));
}

TEST(WriteFileAtomic, IntoAMissingDirectoryFailsNamingThePath) {
  const std::string dir = testing::MakeTempDir("atomic");
  const std::string path = dir + "/no/such/dir/summary.json";
  const absl::Status s = WriteFileAtomic(path, "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_THAT(std::string(s.message()), HasSubstr("No such file or directory"));
  EXPECT_TRUE(Names(dir).empty());
}

// Runs `body` in a child process with a private mount namespace and a
// `size`-byte tmpfs mounted on `dir`. The child's exit code: body's result,
// or 77 when the namespace or the mount cannot be made (not root, or no
// CAP_SYS_ADMIN in this container).
int RunOnTinyTmpfs(const std::string& dir, const char* size, int (*body)(const std::string&)) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", dir.c_str(), "tmpfs", 0, absl::StrCat("size=", size).c_str()) != 0) {
      _exit(77);
    }
    _exit(body(dir));
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// In the child: a file that fits, then one that cannot; the second must
// fail clearly and leave the first file as it was and nothing else behind.
// Exit 0 when it does; otherwise the step that went wrong, on stderr.
int WriteUntilTheDiskIsFull(const std::string& dir) {
  const std::string path = dir + "/final_params.f32";
  if (!WriteFileAtomic(path, "old").ok()) return 10;
  const absl::Status s = WriteFileAtomic(path, std::string(1 << 20, 'x'));
  std::fprintf(stderr, "full disk: %s\n", s.ToString().c_str());
  if (s.code() != absl::StatusCode::kResourceExhausted) return 11;
  if (std::string(s.message()).find(path) == std::string::npos) return 12;
  if (std::string(s.message()).find("No space left on device") == std::string::npos) return 13;
  if (ReadFileToString(path).value_or("") != "old") return 14;
  if (Names(dir).size() != 1) return 15;  // the temporary file is gone
  return 0;
}

TEST(WriteFileAtomic, AFullDiskFailsClearlyAndLeavesTheOldFile) {
  const std::string dir = testing::MakeTempDir("fulldisk");
  const int code = RunOnTinyTmpfs(dir, "64k", WriteUntilTheDiskIsFull);
  if (code == 77) {
    GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace here (needs root with "
                    "CAP_SYS_ADMIN); the /dev/full test covers the error path of the CSV writer";
  }
  EXPECT_EQ(code, 0) << "step that failed: see WriteUntilTheDiskIsFull";
}

TEST(CsvWriter, AFullDeviceFailsNamingTheFile) {
  auto w = CsvWriter::Open("/dev/full", {"step", "loss"});
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("/dev/full"));
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("No space left on device"));
}

// A resumed run appends to its CSVs; one a version with other columns
// wrote is moved aside whole, never mixed with rows of another layout.
TEST(CsvWriter, AppendsUnderTheSameHeaderAndMovesAnotherAside) {
  const std::string dir = testing::MakeTempDir("csv");
  const std::string path = dir + "/steps.csv";
  {
    auto w = CsvWriter::Open(path, {"step", "loss"});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Row({"0", "2.3"}).ok());
  }
  {
    auto w = CsvWriter::Open(path, {"step", "loss"}, /*append=*/true);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Row({"1", "2.1"}).ok());
  }
  EXPECT_EQ(ReadFileToString(path).value_or(""), "step,loss\n0,2.3\n1,2.1\n");
  for (const char* moved : {".old", ".old.2"}) {
    auto w = CsvWriter::Open(path, {"step", "loss", "ahead_ms"}, /*append=*/true);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Row({"2", "1.9", "0.5"}).ok());
    ASSERT_TRUE((*w)->Flush().ok());
    EXPECT_EQ(ReadFileToString(path).value_or(""), "step,loss,ahead_ms\n2,1.9,0.5\n");
    EXPECT_TRUE(ReadFileToString(path + moved).ok()) << moved;
    // The next one differs again.
    ASSERT_TRUE(WriteFileAtomic(path, "step,loss\n0,2.3\n").ok());
  }
  EXPECT_EQ(ReadFileToString(path + ".old").value_or(""), "step,loss\n0,2.3\n1,2.1\n");
  EXPECT_EQ(ReadFileToString(path + ".old.2").value_or(""), "step,loss\n0,2.3\n");
}

TEST(ReadFileToString, AMissingFileIsNotFoundNamingIt) {
  const std::string path = testing::MakeTempDir("read") + "/absent";
  const auto text = ReadFileToString(path);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(text.status().message()), HasSubstr(path));
}

TEST(RemoveStaleRunOutputs, RemovesAnEarlierRunsOutputsButNotLiveWorkersOrOtherFiles) {
  const std::string dir = testing::MakeTempDir("rundir");
  for (const char* f :
       {"summary.json", "final_params.f32", "epochs.csv", "evals.csv", "steps_worker0.csv",
        "steps_worker1.csv", "steps_worker7.csv", "cluster_spec.json", "notes.txt",
        "steps_workerX.csv", "steps_worker1.csv.old", "epochs.csv.old.2", "notes.csv.older"}) {
    ASSERT_TRUE(WriteFileAtomic(dir + "/" + f, "stale").ok());
  }
  ASSERT_TRUE(MakeDirs(dir + "/logs").ok());
  ASSERT_TRUE(MakeDirs(dir + "/buffers").ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/buffers/worker0.pt", "stale").ok());
  auto removed = RemoveStaleRunOutputs(dir, /*live_ranks=*/{1});
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, ElementsAre("buffers", "epochs.csv", "epochs.csv.old.2", "evals.csv",
                                    "final_params.f32", "steps_worker0.csv",
                                    "steps_worker1.csv.old", "steps_worker7.csv", "summary.json"));
  EXPECT_THAT(Names(dir), ElementsAre("cluster_spec.json", "logs", "notes.csv.older", "notes.txt",
                                      "steps_worker1.csv", "steps_workerX.csv"));
  EXPECT_THAT(DescribeRemoved(dir, *removed),
              HasSubstr("removed the outputs of an earlier run from " + dir +
                        ": buffers, epochs.csv, epochs.csv.old.2, evals.csv"));
  removed = RemoveStaleRunOutputs(dir, {});
  ASSERT_TRUE(removed.ok());
  EXPECT_THAT(*removed, ElementsAre("steps_worker1.csv"));
  EXPECT_TRUE(RemoveStaleRunOutputs(dir + "/absent", {})->empty());
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

TEST(SplitPathTest, GivesTheDirectoryAndTheLastComponent) {
  EXPECT_EQ(SplitPath("a/b/c.png").dir, "a/b");
  EXPECT_EQ(SplitPath("a/b/c.png").name, "c.png");
  EXPECT_EQ(SplitPath("c.png").dir, ".");
  EXPECT_EQ(SplitPath("c.png").name, "c.png");
  EXPECT_EQ(SplitPath("/c").dir, "/");
  EXPECT_EQ(SplitPath("/c").name, "c");
  EXPECT_EQ(SplitPath("runs/ckpt-20/").name, "");
}

}  // namespace
}  // namespace pstrain

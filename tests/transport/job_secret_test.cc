// SecretFileIsShared on real files: which permissions of the job secret
// draw the "readable by other users" warning. Changing a file's group to
// one this process is not in needs root; that case is skipped otherwise.

#include "transport/job_secret.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

class SecretFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::MakeTempDir("secret") + "/job.secret";
    ASSERT_TRUE(JobSecret::Generate().WriteNewFile(path_).ok());
  }
  void Mode(mode_t mode) { ASSERT_EQ(chmod(path_.c_str(), mode), 0); }
  void Group(gid_t gid) { ASSERT_EQ(chown(path_.c_str(), static_cast<uid_t>(-1), gid), 0); }

  // A group this process is not in (nor its effective one).
  static gid_t ForeignGroup() {
    std::vector<gid_t> mine(static_cast<size_t>(getgroups(0, nullptr)) + 1);
    const int n = getgroups(static_cast<int>(mine.size()), mine.data());
    mine.resize(n > 0 ? static_cast<size_t>(n) : 0);
    mine.push_back(getegid());
    for (gid_t g = 54321;; ++g) {
      if (std::find(mine.begin(), mine.end(), g) == mine.end()) return g;
    }
  }

  std::string path_;
};

TEST_F(SecretFileTest, PrivateIsNotShared) {
  for (mode_t mode : {0400, 0600}) {
    Mode(mode);
    EXPECT_FALSE(SecretFileIsShared(path_)) << std::oct << mode;
  }
}

TEST_F(SecretFileTest, ReadByItsOwnGroupIsNotShared) {
  // What Kubernetes makes of defaultMode 0400 in a pod with an fsGroup.
  Group(getegid());
  for (mode_t mode : {0440, 0640}) {
    Mode(mode);
    EXPECT_FALSE(SecretFileIsShared(path_)) << std::oct << mode;
  }
  // Any more than reading by that group is.
  for (mode_t mode : {0460, 0450, 0444, 0404}) {
    Mode(mode);
    EXPECT_TRUE(SecretFileIsShared(path_)) << std::oct << mode;
  }
}

TEST_F(SecretFileTest, ReadByAnotherGroupOrEveryoneIsShared) {
  Mode(0444);
  EXPECT_TRUE(SecretFileIsShared(path_));
  if (geteuid() != 0) GTEST_SKIP() << "giving the file another group needs root";
  Group(ForeignGroup());
  Mode(0440);
  EXPECT_TRUE(SecretFileIsShared(path_));
  Mode(0400);
  EXPECT_FALSE(SecretFileIsShared(path_));
}

}  // namespace
}  // namespace pstrain

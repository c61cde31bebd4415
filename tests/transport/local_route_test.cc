// What a worker checks before it connects to a ps's Unix socket
// (transport/local_route.h), on real directories and a real listening
// socket: the private directory (this user's, 700, not a link), the path
// (directly inside it, a socket of this user, the very file the ps
// bound), the ps's clean-up of dead processes' sockets, and which spec
// addresses are on one host. Who listens there is checked at the
// connection (tests/transport/local_links_test.cc).

#include "transport/local_route.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "transport/local_links.h"

namespace pstrain {
namespace {

class LocalRouteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: a Unix socket's path has at most 107 bytes.
    static int n = 0;
    base_ = "/tmp/lr" + std::to_string(::getpid()) + "_" + std::to_string(n++);
    ASSERT_EQ(::mkdir(base_.c_str(), 0755), 0);
    dir_ = LocalDir(secret_, base_);
  }
  void TearDown() override { std::filesystem::remove_all(base_); }

  JobSecret secret_ = JobSecret::Generate();
  std::string base_;
  std::string dir_;
};

TEST_F(LocalRouteTest, TheDirectoryIsTheUsersAndTheJobsAndMadePrivate) {
  EXPECT_EQ(dir_, base_ + "/pstrain-" + std::to_string(::geteuid()) + "/" + secret_.LocalTag());
  EXPECT_EQ(secret_.LocalTag().size(), 16u);
  EXPECT_NE(JobSecret::Generate().LocalTag(), secret_.LocalTag());
  ASSERT_TRUE(PrepareLocalDir(dir_).ok());
  struct stat st;
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(CheckLocalDir(dir_).ok());
  EXPECT_TRUE(PrepareLocalDir(dir_).ok());  // again: already there
}

TEST_F(LocalRouteTest, ADirectoryOpenToOthersOrALinkIsRefused) {
  ASSERT_TRUE(PrepareLocalDir(dir_).ok());
  ASSERT_EQ(::chmod(dir_.c_str(), 0750), 0);
  absl::Status s = CheckLocalDir(dir_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("open to its group or others"), absl::string_view::npos) << s;
  EXPECT_FALSE(PrepareLocalDir(dir_).ok());  // not made private behind the user's back
  // The user's directory replaced by a link to one the job does not own.
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  const std::string parent = dir_.substr(0, dir_.rfind('/'));
  const std::string elsewhere = base_ + "/elsewhere";
  ASSERT_EQ(::rename(parent.c_str(), elsewhere.c_str()), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), parent.c_str()), 0);
  s = CheckLocalDir(dir_);
  EXPECT_NE(s.message().find("not a directory"), absl::string_view::npos) << s;
}

TEST_F(LocalRouteTest, AnotherUsersDirectoryIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  ASSERT_TRUE(PrepareLocalDir(dir_).ok());
  ASSERT_EQ(::chown(dir_.c_str(), 65534, 65534), 0);
  absl::Status s = CheckLocalDir(dir_);
  EXPECT_NE(s.message().find("owned by uid 65534"), absl::string_view::npos) << s;
}

TEST_F(LocalRouteTest, OnlyTheSocketThePsBoundDirectlyInsideIsTaken) {
  ASSERT_TRUE(PrepareLocalDir(dir_).ok());
  const std::string endpoint = LocalEndpoint(dir_, "ps:3", 2400);
  const std::string path = LocalPath(endpoint);
  EXPECT_EQ(endpoint, "unix://" + dir_ + "/ps-3-2400-" + std::to_string(::getpid()) + ".sock");
  // Nothing there yet (another host's, or another container's).
  EXPECT_NE(CheckLocalEndpoint(endpoint, dir_, {}).message().find("not here"), std::string::npos);
  // A plain file in its place.
  { std::ofstream(path) << "x"; }
  EXPECT_NE(CheckLocalEndpoint(endpoint, dir_, {}).message().find("not a socket"),
            std::string::npos);
  ASSERT_EQ(std::remove(path.c_str()), 0);
  // A real listening socket, and the file the ps says it bound.
  auto router = LocalLinks::Listen(path, {}, 1 << 20);
  ASSERT_TRUE(router.ok()) << router.status();
  absl::StatusOr<LocalFileId> bound = LocalFileIdOf(endpoint);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_TRUE(CheckLocalEndpoint(endpoint, dir_, *bound).ok())
      << CheckLocalEndpoint(endpoint, dir_, *bound);
  // Paths the ps may not send the worker to: TCP, outside the directory,
  // below it, the directory itself.
  for (const std::string& bad :
       {std::string("tcp://127.0.0.1:2400"), "ipc://" + path, "unix://" + base_ + "/ps-3-2400.sock",
        "unix://" + dir_ + "/sub/ps-3-2400.sock", "unix://" + dir_ + "/",
        "unix://" + dir_ + "x/ps-3-2400.sock"}) {
    EXPECT_EQ(CheckLocalEndpoint(bad, dir_, *bound).code(), absl::StatusCode::kFailedPrecondition)
        << bad;
  }
  // Another socket put in its place (the ps's moved aside, which goes on
  // listening): not the file the ps bound.
  ASSERT_EQ(::rename(path.c_str(), (path + ".aside").c_str()), 0);
  auto impostor = LocalLinks::Listen(path, {}, 1 << 20);
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  EXPECT_NE(CheckLocalEndpoint(endpoint, dir_, *bound).message().find("not the file the ps bound"),
            std::string::npos);
  impostor->reset();
  ASSERT_EQ(::rename((path + ".aside").c_str(), path.c_str()), 0);
  RemoveLocalEndpoint(endpoint);
  router->reset();
  EXPECT_FALSE(CheckLocalEndpoint(endpoint, dir_, *bound).ok());
  struct stat st;
  EXPECT_NE(::stat(dir_.c_str(), &st), 0);  // the job's directory went with its last socket
}

TEST_F(LocalRouteTest, SocketsOfProcessesThatAreGoneAreRemoved) {
  ASSERT_TRUE(PrepareLocalDir(dir_).ok());
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // its pid names no process now
  const std::string gone = dir_ + "/ps-1-2401-" + std::to_string(child) + ".sock";
  const std::string live = dir_ + "/ps-0-2400-" + std::to_string(::getpid()) + ".sock";
  const std::string other = dir_ + "/notes.txt";
  for (const std::string& f : {gone, live, other}) std::ofstream(f) << "x";
  EXPECT_EQ(RemoveStaleSockets(dir_), 1);
  EXPECT_FALSE(std::filesystem::exists(gone));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(other));
}

// Other jobs' directories beside this one: one a killed ps left (its
// socket's process gone, unchanged for long) goes; a fresh empty one (a ps
// about to bind) and one with a live socket stay.
TEST_F(LocalRouteTest, DirectoriesOfJobsWhosePsAreGoneAreRemoved) {
  ASSERT_TRUE(PrepareLocalDir(dir_).ok());
  const std::string parent = std::filesystem::path(dir_).parent_path().string();
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string killed = parent + "/killedjob", fresh = parent + "/freshjob",
                    live = parent + "/livejob";
  for (const std::string& d : {killed, fresh, live}) ASSERT_TRUE(PrepareLocalDir(d).ok());
  std::ofstream(killed + "/ps-0-2400-" + std::to_string(child) + ".sock") << "x";
  std::ofstream(live + "/ps-0-2400-" + std::to_string(::getpid()) + ".sock") << "x";
  const auto long_ago = std::filesystem::file_time_type::clock::now() - std::chrono::minutes(5);
  for (const std::string& d : {killed, live}) std::filesystem::last_write_time(d, long_ago);
  EXPECT_EQ(RemoveStaleJobDirs(dir_), 1);
  EXPECT_FALSE(std::filesystem::exists(killed));
  EXPECT_TRUE(std::filesystem::exists(fresh));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(dir_));
}

TEST_F(LocalRouteTest, LoopbackOrTheSameHostNameIsThisHost) {
  EXPECT_TRUE(SameHost({"localhost", 1}, {"localhost", 2}));
  EXPECT_TRUE(SameHost({"10.0.0.1", 1}, {"127.0.0.1", 2}));
  EXPECT_TRUE(SameHost({"Node-1", 1}, {"node-1", 2}));
  EXPECT_FALSE(SameHost({"10.0.0.1", 1}, {"10.0.0.2", 2}));
  EXPECT_FALSE(SameHost({"localhost", 1}, {"node-1", 2}));
}

}  // namespace
}  // namespace pstrain

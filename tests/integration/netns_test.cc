// `pstrain launch --isolate=netns`: every task in a network namespace of its
// own on a private bridge, reaching the others by name over real
// interfaces. A sync run there ends with exactly the parameters of the same
// run over loopback; a stranger on the same bridge without the job secret
// is refused by every ps; Ctrl-C, and a SIGKILLed launcher, leave no
// namespace behind. Root only (network namespaces): skipped otherwise.

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/child_process.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/run_outputs.h"
#include "transport/job_secret.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using testing::RunningProcess;

std::vector<std::string> LaunchArgs(const std::string& run_dir, std::vector<std::string> more) {
  std::vector<std::string> args = {
      "launch", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_2ps_2w.json"),
      "--run_dir=" + run_dir, "--data_dir=" + testing::SourcePath("data/mnist"), "--echo=all",
      "--log_every_steps=0"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::string Namespaces() {
  auto r = RunCommand({"/usr/sbin/ip", {"netns", "list"}, {}, {}}, 30);
  return r.ok() ? r->output : "";
}

// "pstn-<pid>-": the namespaces of the launcher with that pid.
std::string PrefixOf(pid_t pid) { return absl::StrCat("pstn-", pid, "-"); }

// The task's address from the launcher's "pstrain: network:" line.
std::string AddressOf(const std::string& output, const std::string& task) {
  std::smatch m;
  const std::regex re(task + " [a-z0-9.-]+ (10\\.77\\.0\\.[0-9]+)");
  return std::regex_search(output, m, re) ? m[1].str() : "";
}

class Netns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (access("/usr/sbin/ip", X_OK) != 0) GTEST_SKIP() << "no /usr/sbin/ip (iproute2)";
    dir_ = testing::MakeTempDir("netns");
  }
  std::string dir_;
};

TEST_F(Netns, ASyncRunAcrossNamespacesEndsWithTheParametersOfTheLoopbackRun) {
  const std::vector<std::string> same = {"--mode=sync", "--seed=7", "--max_steps=60"};
  std::vector<std::string> isolated = same;
  isolated.push_back("--isolate=netns");
  auto net = RunningProcess::Start(testing::BinaryPath("pstrain"), LaunchArgs(dir_ + "/netns", isolated));
  auto code = net->Wait(300);
  ASSERT_TRUE(code.ok()) << net->output();
  ASSERT_EQ(*code, 0) << net->output();
  EXPECT_THAT(net->output(), HasSubstr("ps:1 ps-1.pstrain.svc 10.77.0."));
  EXPECT_THAT(net->output(), HasSubstr("worker:0 worker-0.pstrain.svc 10.77.0."));
  EXPECT_THAT(Namespaces(), ::testing::Not(HasSubstr(PrefixOf(net->pid()))));

  std::vector<std::string> loopback = same;
  loopback.push_back("--free_ports");
  auto local = RunningProcess::Start(testing::BinaryPath("pstrain"), LaunchArgs(dir_ + "/local", loopback));
  code = local->Wait(300);
  ASSERT_TRUE(code.ok() && *code == 0) << local->output();
  auto a = ReadFileToString(dir_ + "/netns/final_params.f32");
  auto b = ReadFileToString(dir_ + "/local/final_params.f32");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b) << "the network changed what sync computed";
}

// A namespace of the test's own, on the launcher's bridge: a host of the
// network that is not in the job.
class Stranger {
 public:
  Stranger(const std::string& bridge, const std::string& address) {
    name_ = absl::StrCat("pstx-", getpid());
    const std::string veth = absl::StrCat("px", getpid() % 100000);
    ok_ = Ip({"netns", "add", name_}) && Ip({"link", "add", veth + "a", "type", "veth", "peer", "name", veth + "b"}) &&
          Ip({"link", "set", veth + "a", "netns", name_}) && Ip({"link", "set", veth + "b", "netns", bridge}) &&
          Ip({"netns", "exec", bridge, "/usr/sbin/ip", "link", "set", veth + "b", "master", "br0"}) &&
          Ip({"netns", "exec", bridge, "/usr/sbin/ip", "link", "set", veth + "b", "up"}) &&
          Ip({"netns", "exec", name_, "/usr/sbin/ip", "addr", "add", address + "/24", "dev", veth + "a"}) &&
          Ip({"netns", "exec", name_, "/usr/sbin/ip", "link", "set", veth + "a", "up"});
  }
  ~Stranger() { Ip({"netns", "del", name_}); }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }

 private:
  static bool Ip(const std::vector<std::string>& args) {
    auto r = RunCommand({"/usr/sbin/ip", args, {}, {}}, 30);
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << absl::StrJoin(args, " ") << ": "
                                            << (r.ok() ? r->output : std::string(r.status().message()));
    return r.ok() && r->exit_code == 0;
  }
  std::string name_;
  bool ok_ = false;
};

TEST_F(Netns, AStrangerOnTheSameBridgeWithoutTheSecretIsRefusedByEveryPs) {
  auto job = RunningProcess::Start(
      testing::BinaryPath("pstrain"),
      LaunchArgs(dir_ + "/run", {"--isolate=netns", "--mode=async", "--max_steps=1500"}));
  ASSERT_TRUE(job->WaitForOutput("started worker:1", 120)) << job->output();
  std::smatch m;
  const std::string out = job->output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex("bridge of (pstn-[0-9]+-[0-9]+-br)"))) << out;
  const std::string ps0 = AddressOf(out, "ps:0"), ps1 = AddressOf(out, "ps:1");
  const std::string w0 = AddressOf(out, "worker:0"), w1 = AddressOf(out, "worker:1");
  ASSERT_FALSE(ps0.empty() || ps1.empty() || w0.empty() || w1.empty()) << out;

  Stranger stranger(m[1].str(), "10.77.0.200");
  ASSERT_TRUE(stranger.ok());
  // It knows the job's layout, addresses included, but not its secret: it
  // poses as worker:1 with a secret of its own.
  const std::string spec = dir_ + "/stranger_spec.json";
  ASSERT_TRUE(WriteFileAtomic(spec, absl::StrCat(R"({"cluster": {"worker": [")", w0, ":2222\", \"",
                                                 w1, R"(:2222"], "ps": [")", ps0, ":2222\", \"", ps1,
                                                 ":2222\"]}}"))
                  .ok());
  const std::string secret = dir_ + "/stranger.secret";
  ASSERT_TRUE(JobSecret::Generate().WriteNewFile(secret).ok());
  auto intruder = RunningProcess::Start(
      "/usr/sbin/ip",
      {"netns", "exec", stranger.name(), testing::BinaryPath("worker"), "--cluster_spec=" + spec,
       "--task_type=worker", "--task_index=1", "--secret_file=" + secret, "--connect_timeout_s=5",
       "--data_dir=" + testing::SourcePath("data/mnist")});
  auto intruder_code = intruder->Wait(120);
  ASSERT_TRUE(intruder_code.ok()) << intruder->output();
  EXPECT_NE(*intruder_code, 0) << intruder->output();

  auto code = job->Wait(600);
  ASSERT_TRUE(code.ok()) << job->output();
  ASSERT_EQ(*code, 0) << job->output();
  const proto::RunSummary summary = testing::ReadRunSummary(dir_ + "/run");
  EXPECT_GE(summary.handshakes_refused(), 2);
  // Each ps names the stranger's address.
  for (const char* log : {"/run/logs/ps-0.log", "/run/logs/ps-1.log"}) {
    auto text = ReadFileToString(dir_ + log);
    ASSERT_TRUE(text.ok()) << log;
    EXPECT_THAT(*text, HasSubstr("refused a connection from 10.77.0.200")) << log;
  }
  EXPECT_THAT(Namespaces(), ::testing::Not(HasSubstr(PrefixOf(job->pid()))));
}

TEST_F(Netns, NeitherCtrlCNorAKilledLauncherLeavesANamespaceBehind) {
  auto job = RunningProcess::Start(
      testing::BinaryPath("pstrain"),
      LaunchArgs(dir_ + "/a", {"--isolate=netns", "--mode=async", "--epochs=5"}));
  ASSERT_TRUE(job->WaitForOutput("started worker:1", 120)) << job->output();
  EXPECT_THAT(Namespaces(), HasSubstr(PrefixOf(job->pid())));
  job->Signal(SIGINT);
  auto code = job->Wait(120);
  ASSERT_TRUE(code.ok()) << job->output();
  EXPECT_NE(*code, 0);
  EXPECT_THAT(Namespaces(), ::testing::Not(HasSubstr(PrefixOf(job->pid()))));
  for (const auto& e : std::filesystem::directory_iterator("/etc/netns")) {
    EXPECT_FALSE(absl::StartsWith(e.path().filename().string(), PrefixOf(job->pid())));
  }

  // SIGKILL: the launcher cannot clean up (its tasks die with it); the next
  // harness removes what it left.
  auto killed = RunningProcess::Start(
      testing::BinaryPath("pstrain"),
      LaunchArgs(dir_ + "/b", {"--isolate=netns", "--mode=async", "--epochs=5"}));
  ASSERT_TRUE(killed->WaitForOutput("started worker:1", 120)) << killed->output();
  const pid_t killed_pid = killed->pid();
  kill(killed_pid, SIGKILL);
  ASSERT_TRUE(killed->Wait(60).ok());
  EXPECT_THAT(Namespaces(), HasSubstr(PrefixOf(killed_pid)));
  auto next = RunningProcess::Start(
      testing::BinaryPath("pstrain"),
      LaunchArgs(dir_ + "/c", {"--isolate=netns", "--mode=async", "--max_steps=20"}));
  code = next->Wait(300);
  ASSERT_TRUE(code.ok() && *code == 0) << next->output();
  EXPECT_THAT(Namespaces(), ::testing::Not(HasSubstr(PrefixOf(killed_pid))));
}

}  // namespace
}  // namespace pstrain

// Bad input to real processes: each case must end with a clear message and
// a non-zero exit within seconds, never a crash (a signal) or a hang.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using testing::BinaryPath;
using testing::RunningProcess;

// Every failure below must come well inside this.
constexpr double kQuickS = 30;

std::string MnistDir() { return testing::SourcePath("data/mnist"); }

int RunToExit(RunningProcess& p, double timeout_s = kQuickS) {
  auto code = p.Wait(timeout_s);
  EXPECT_TRUE(code.ok()) << code.status() << "\n" << p.output();
  return code.ok() ? *code : -1000;
}

TEST(BadInput, MalformedTfConfigExitsTwoNamingTheField) {
  struct Case {
    const char* tf_config;
    const char* expect;
  } cases[] = {
      {"{not json", "not valid JSON"},
      {R"({"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 0}})", "cluster.ps"},
      {R"({"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]}, "task": {"type": "ps", "index": 3}})",
       "ps:3"},
      {R"({"cluster": {"worker": ["localhost:1"], "ps": ["localhost:99999"]}, "task": {"type": "ps", "index": 0}})",
       "invalid port"},
  };
  for (const Case& c : cases) {
    for (const char* binary : {"ps_server", "worker"}) {
      auto p = RunningProcess::Start(BinaryPath(binary), {}, c.tf_config);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(RunToExit(*p), 2) << binary << " " << c.tf_config << "\n" << p->output();
      EXPECT_THAT(p->output(), HasSubstr(c.expect)) << binary;
      EXPECT_THAT(p->output(), HasSubstr("TF_CONFIG"));
    }
  }
}

TEST(BadInput, NoConfigurationAtAllExitsTwo) {
  auto p = RunningProcess::Start(BinaryPath("worker"), {});
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(RunToExit(*p), 2);
  EXPECT_THAT(p->output(), HasSubstr("set TF_CONFIG or pass --cluster_spec"));
}

TEST(BadInput, NoSecretExitsTwoSayingHowToMakeOne) {
  const std::string dir = testing::MakeTempDir("nosecret");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 1);
  for (const char* binary : {"ps_server", "worker"}) {
    const bool ps = std::string(binary) == "ps_server";
    auto p = RunningProcess::Start(BinaryPath(binary),
                                   ps ? std::vector<std::string>{}
                                      : std::vector<std::string>{"--data_dir=" + MnistDir()},
                                   testing::TfConfigFor(spec, ps ? "ps" : "worker", 0));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(RunToExit(*p), 2) << binary;
    EXPECT_THAT(p->output(), HasSubstr("pstrain keygen --out=FILE")) << binary;
    EXPECT_THAT(p->output(), HasSubstr("--insecure")) << binary;
  }
}

TEST(BadInput, AMalformedOrMissingSecretFileExitsTwoNamingIt) {
  const std::string dir = testing::MakeTempDir("badsecret");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 1);
  ASSERT_TRUE(WriteFileAtomic(dir + "/bad.secret", "not hex at all\n").ok());
  for (const std::string& file : {dir + "/bad.secret", dir + "/missing.secret"}) {
    auto p = RunningProcess::Start(BinaryPath("ps_server"), {"--secret_file=" + file},
                                   testing::TfConfigFor(spec, "ps", 0));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(RunToExit(*p), 2) << file;
    EXPECT_THAT(p->output(), HasSubstr(file));
  }
  auto both = RunningProcess::Start(BinaryPath("ps_server"), {testing::SecretFlag(), "--insecure"},
                                    testing::TfConfigFor(spec, "ps", 0));
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(RunToExit(*both), 2);
  EXPECT_THAT(both->output(), HasSubstr("not both"));
}

TEST(BadInput, WrongTaskTypeForTheBinaryExitsTwo) {
  const std::string dir = testing::MakeTempDir("badtype");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 1);
  auto p = RunningProcess::Start(BinaryPath("ps_server"), {}, testing::TfConfigFor(spec, "worker", 0));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(RunToExit(*p), 2);
  EXPECT_THAT(p->output(), HasSubstr("start it with the worker binary"));
}

TEST(BadInput, AnOptimizerFlagOutOfRangeExitsTwoNamingIt) {
  const std::string dir = testing::MakeTempDir("badoptimizer");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 1);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--optimizer=rmsprop"}, "--optimizer"},
      {{"--optimizer=adam", "--beta1=1"}, "--beta1"},
      {{"--optimizer=adam", "--nesterov"}, "--nesterov"},
      {{"--optimizer=sgd", "--adagrad_lr_decay=0.1"}, "--adagrad_lr_decay"},
  };
  for (const auto& [flags, named] : cases) {
    std::vector<std::string> args = {"--data_dir=" + MnistDir(), testing::SecretFlag()};
    args.insert(args.end(), flags.begin(), flags.end());
    auto p = RunningProcess::Start(BinaryPath("worker"), args, testing::TfConfigFor(spec, "worker", 0));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(RunToExit(*p), 2) << flags.back() << "\n" << p->output();
    EXPECT_THAT(p->output(), HasSubstr(named));
  }
}

TEST(BadInput, MissingMnistExitsTwoNamingTheFile) {
  const std::string dir = testing::MakeTempDir("nomnist");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 1);
  auto p = RunningProcess::Start(BinaryPath("worker"), {"--data_dir=" + dir, testing::SecretFlag()},
                                 testing::TfConfigFor(spec, "worker", 0));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(RunToExit(*p), 2);
  EXPECT_THAT(p->output(), HasSubstr(dir + "/train-images-idx3-ubyte"));
}

TEST(BadInput, CorruptMnistExitsTwoNamingTheFile) {
  const std::string dir = testing::MakeTempDir("corrupt");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 1);
  for (const char* name : {"train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    auto bytes = ReadFileToString(MnistDir() + "/" + name);
    ASSERT_TRUE(bytes.ok()) << "run tools/fetch_mnist.sh first: " << bytes.status();
    ASSERT_TRUE(WriteFileAtomic(dir + "/" + name, *bytes).ok());
  }
  auto images = ReadFileToString(MnistDir() + "/train-images-idx3-ubyte");
  ASSERT_TRUE(images.ok());
  // Truncated: the header promises 60000 images, the file holds about half.
  ASSERT_TRUE(WriteFileAtomic(dir + "/train-images-idx3-ubyte", images->substr(0, 20'000'000)).ok());
  auto p = RunningProcess::Start(BinaryPath("worker"), {"--data_dir=" + dir, testing::SecretFlag()},
                                 testing::TfConfigFor(spec, "worker", 0));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(RunToExit(*p), 2);
  EXPECT_THAT(p->output(), HasSubstr(dir + "/train-images-idx3-ubyte"));
}

TEST(BadInput, UnreachablePsFailsNamingTheAddressAfterRetrying) {
  const std::string dir = testing::MakeTempDir("noserver");
  const std::string spec = testing::WriteLocalSpec(dir, 1, 1);  // nothing listens on ps:0
  auto p = RunningProcess::Start(BinaryPath("worker"),
                                 {"--data_dir=" + MnistDir(), "--connect_timeout_s=3",
                                  testing::SecretFlag()},
                                 testing::TfConfigFor(spec, "worker", 0));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(RunToExit(*p), 1) << p->output();
  EXPECT_THAT(p->output(), HasSubstr("cannot reach ps:0 (localhost:"));
  EXPECT_THAT(p->output(), HasSubstr("after 3 s of retries"));
}

TEST(BadInput, PortAlreadyInUseFailsNamingIt) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const std::string tf_config = absl::StrCat(
      R"({"cluster": {"worker": ["localhost:1"], "ps": ["localhost:)", port,
      R"("]}, "task": {"type": "ps", "index": 0}})");
  auto p = RunningProcess::Start(BinaryPath("ps_server"), {testing::SecretFlag()}, tf_config);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(RunToExit(*p), 1);
  EXPECT_THAT(p->output(), HasSubstr(absl::StrCat("ps:0 (localhost:", port, ")")));
  EXPECT_THAT(p->output(), HasSubstr("Address already in use"));
  close(fd);
}

// A ps and a chief that trains, and a second worker started differently.
class MismatchedWorker : public ::testing::Test {
 protected:
  void StartPsAndChief() {
    dir_ = testing::MakeTempDir("mismatch");
    spec_ = testing::WriteLocalSpec(dir_, 1, 2);
    ps_ = RunningProcess::Start(BinaryPath("ps_server"), {testing::SecretFlag()},
                                testing::TfConfigFor(spec_, "ps", 0));
    chief_ = RunningProcess::Start(BinaryPath("worker"),
                                   {"--data_dir=" + MnistDir(), "--max_steps=5", "--log_every_steps=0",
                                    testing::SecretFlag()},
                                   testing::TfConfigFor(spec_, "worker", 0));
    ASSERT_NE(ps_, nullptr);
    ASSERT_NE(chief_, nullptr);
  }

  std::unique_ptr<RunningProcess> StartWorker(std::vector<std::string> flags) {
    flags.push_back("--data_dir=" + MnistDir());
    flags.push_back(testing::SecretFlag());
    return RunningProcess::Start(BinaryPath("worker"), flags, testing::TfConfigFor(spec_, "worker", 1));
  }

  std::string dir_, spec_;
  std::unique_ptr<RunningProcess> ps_, chief_;
};

TEST_F(MismatchedWorker, AnotherPlanFingerprintIsRefused) {
  StartPsAndChief();
  auto worker = StartWorker({"--model=mlp"});
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(RunToExit(*worker), 1);
  EXPECT_THAT(worker->output(), HasSubstr("plan fingerprint"));
  EXPECT_THAT(worker->output(), HasSubstr("another model, ps count or shard strategy"));
}

TEST_F(MismatchedWorker, OtherTrainingFlagsAreRefused) {
  StartPsAndChief();
  auto worker = StartWorker({"--mode=async"});
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(RunToExit(*worker), 1);
  EXPECT_THAT(worker->output(), HasSubstr("--mode=async but the chief started the job with sync"));
}

TEST_F(MismatchedWorker, AnotherOptimizerIsRefused) {
  StartPsAndChief();
  auto worker = StartWorker({"--optimizer=adam"});
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(RunToExit(*worker), 1);
  EXPECT_THAT(worker->output(), HasSubstr("--optimizer=adam but the chief started the job with sgd"));
}

}  // namespace
}  // namespace pstrain

// A TFJob, emulated without a cluster: `pstrain k8s` writes the manifest,
// tools/k8s/validate_tfjob.py derives each replica's TF_CONFIG, service name,
// command and args exactly as Kubeflow's training operator and Kubernetes
// would, and each replica runs that command in a network namespace of its
// own (launcher/supervisor/netns_harness) where the operator's service names resolve.
// The pods' mounts are the test's directories (the volume at /data, the
// Secret at /etc/pstrain/job.secret). One replica is killed mid-run and
// started again as `restartPolicy: OnFailure` does; the job finishes.
// Two runners: this build's binaries in the namespaces (always), and the
// container image (deploy/Dockerfile, built by tools/build_image.sh) run by
// podman in those namespaces, with the manifest's mounts, user and
// read-only root filesystem (skipped when the image has not been built:
// building it takes minutes). Root only: skipped otherwise.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/free_ports.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/supervisor/netns_harness.h"
#include "proto/run_summary.pb.h"
#include "tests/test_util/process_runner.h"
#include "tests/test_util/run_outputs.h"

namespace pstrain {
namespace {

using testing::RunningProcess;

struct Replica {
  std::string name;     // "worker-1"
  std::string service;  // "emu-worker-1.team.svc"
  std::string tf_config;
  std::vector<std::string> command;  // the container's command and args, mapped to this machine
  std::string restart_policy;
  std::vector<std::string> raw_command;  // as the manifest says (what a container runs)
};

// The image tools/build_image.sh builds, and podman's config there.
std::string Image() {
  const char* image = std::getenv("PSTRAIN_TEST_IMAGE");
  return image != nullptr ? image : "localhost/pstrain:dev";
}
std::string ImageCache() {
  const char* cache = std::getenv("PSTRAIN_IMAGE_CACHE");
  return cache != nullptr ? cache : "/var/cache/pstrain";
}

// The manifest's replicas, as the operator would start them (each with
// the TF_CONFIG it sets, byte for byte), with the pod's paths mapped to the
// test's (`dir`: the volume at /data). `validator_flags`: how the operator
// is emulated (--operator_before_2023).
std::vector<Replica> DeriveReplicas(const std::string& dir, const std::string& manifest,
                                    const std::vector<std::string>& validator_flags = {}) {
  const std::string lines_path = dir + "/replicas.jsonl";
  std::vector<std::string> args = {testing::SourcePath("tools/k8s/validate_tfjob.py"), manifest,
                                   "--tf_configs=" + lines_path};
  args.insert(args.end(), validator_flags.begin(), validator_flags.end());
  auto v = RunningProcess::Start("/usr/bin/python3", args);
  auto code = v->Wait(120);
  EXPECT_TRUE(code.ok() && *code == 0) << v->output();
  auto lines = ReadFileToString(lines_path);
  EXPECT_TRUE(lines.ok());
  std::vector<Replica> replicas;
  if (!lines.ok()) return replicas;
  const std::vector<std::pair<std::string, std::string>> mounts = {
      {"/etc/pstrain/job.secret", testing::TestSecretFile()}, {"/data/", dir + "/data/"}};
  for (absl::string_view line : absl::StrSplit(*lines, '\n', absl::SkipEmpty())) {
    auto json = ParseJson(line, "replicas");
    EXPECT_TRUE(json.ok()) << json.status();
    if (!json.ok()) continue;
    const auto& f = json->struct_value().fields();
    Replica r{f.at("replica").string_value(), f.at("service").string_value(),
              f.at("tf_config").string_value(), {}, f.at("restartPolicy").string_value(), {}};
    for (const char* key : {"command", "args"}) {
      for (const auto& a : f.at(key).list_value().values()) {
        std::string arg = a.string_value();
        r.raw_command.push_back(arg);
        for (const auto& [from, to] : mounts) arg = absl::StrReplaceAll(arg, {{from, to}});
        r.command.push_back(arg);
      }
    }
    // The image's PATH holds pstrain; here, this build's.
    if (!r.command.empty() && r.command[0] == "pstrain") r.command[0] = testing::BinaryPath("pstrain");
    replicas.push_back(std::move(r));
  }
  return replicas;
}

class TfJobEmulation : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    dir_ = testing::MakeTempDir("tfjob");
    container_ = std::get<1>(GetParam());
    if (!container_) return;
    podman_ = testing::FindProgram("podman");
    if (podman_.empty()) GTEST_SKIP() << "no podman (tools/build_image.sh installs it)";
    setenv("CONTAINERS_CONF", (ImageCache() + "/containers.conf").c_str(), 1);
    auto exists = RunningProcess::Start(podman_, {"image", "exists", Image()});
    auto code = exists->Wait(60);
    if (!code.ok() || *code != 0) {
      GTEST_SKIP() << "no image " << Image() << " (build it with tools/build_image.sh)";
    }
  }

  std::vector<Replica> Replicas(const std::string& manifest) { return DeriveReplicas(dir_, manifest); }

  std::string dir_;
  bool container_ = false;
  std::string podman_;
};

TEST_P(TfJobEmulation, TheJobFinishesWhenAReplicaIsKilledAndRestartedByItsPolicy) {
  const std::string killed = std::get<0>(GetParam());
  // The volume: MNIST where the manifest says. The containers mount the
  // directories (owned by the image's user); the processes follow the
  // symlink.
  ASSERT_TRUE(MakeDirs(dir_ + "/data/runs").ok());
  std::filesystem::create_directory_symlink(testing::SourcePath("data/mnist"), dir_ + "/data/mnist");
  ASSERT_TRUE(MakeDirs(dir_ + "/secret").ok());
  std::filesystem::copy_file(testing::TestSecretFile(), dir_ + "/secret/job.secret");
  if (container_) {
    ASSERT_EQ(chown((dir_ + "/data/runs").c_str(), 10001, 10001), 0);
    ASSERT_EQ(chown((dir_ + "/secret/job.secret").c_str(), 10001, 10001), 0);
    ASSERT_EQ(chmod((dir_ + "/secret/job.secret").c_str(), 0400), 0);
  }
  const std::string manifest = dir_ + "/job.yaml";
  auto gen = RunningProcess::Start(
      testing::BinaryPath("pstrain"),
      {"k8s", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_2ps_2w.json"),
       "--image=localhost/pstrain:test", "--name=emu", "--namespace=team", "--mode=async",
       "--max_steps=400", "--checkpoint_every_steps=50", "--peer_timeout_s=3", "--log_every_steps=50",
       "--out=" + manifest});
  auto code = gen->Wait(60);
  ASSERT_TRUE(code.ok() && *code == 0) << gen->output();
  const std::vector<Replica> replicas = Replicas(manifest);
  ASSERT_EQ(replicas.size(), 4u);

  auto net = NetnsHarness::Create({});
  ASSERT_TRUE(net.ok()) << net.status();
  std::map<std::string, NetnsHost> hosts;
  for (const Replica& r : replicas) {
    auto host = (*net)->AddHost(r.service);
    ASSERT_TRUE(host.ok()) << host.status();
    hosts[r.name] = *host;
  }
  ASSERT_TRUE((*net)->WriteHosts().ok());

  // The operator creates every pod; each runs its container's command.
  int lives = 0;
  std::map<std::string, std::string> container_of;  // by replica: its current container
  auto start = [&](const Replica& r) {
    if (!container_) {
      std::vector<std::string> args = {"netns", "exec", hosts[r.name].netns};
      args.insert(args.end(), r.command.begin(), r.command.end());
      return RunningProcess::Start((*net)->ip(), args, r.tf_config);
    }
    // The pod: its network namespace, the Secret and the volume mounted
    // where the manifest says, the image's user, a read-only root.
    const std::string name = absl::StrCat("pstrain-emu-", getpid(), "-", r.name, "-", lives++);
    container_of[r.name] = name;
    std::vector<std::string> args = {
        "run", "--rm", "--name=" + name, "--network=ns:/run/netns/" + hosts[r.name].netns,
        "--user=10001:10001", "--read-only", "--env=TF_CONFIG=" + r.tf_config,
        "--volume=" + dir_ + "/secret:/etc/pstrain:ro",
        "--volume=" + testing::SourcePath("data/mnist") + ":/data/mnist:ro",
        "--volume=" + dir_ + "/data/runs:/data/runs"};
    for (const auto& [replica, host] : hosts) {
      args.push_back(absl::StrCat("--add-host=", host.name, ":", host.address));
    }
    args.push_back(Image());
    // The manifest's command is the image's entrypoint; its args follow.
    EXPECT_EQ(std::vector<std::string>(r.raw_command.begin(), r.raw_command.begin() + 3),
              (std::vector<std::string>{"pstrain", "task", "--"}));
    args.insert(args.end(), r.raw_command.begin() + 3, r.raw_command.end());
    return RunningProcess::Start(podman_, args);
  };
  std::map<std::string, std::unique_ptr<RunningProcess>> pods;
  for (const Replica& r : replicas) pods[r.name] = start(r);

  // Mid-run, the node kills one pod's container.
  const std::string checkpoint = dir_ + "/data/runs/emu/checkpoints";
  ASSERT_TRUE(pods["worker-0"]->WaitForOutput("step 100/", 240)) << pods["worker-0"]->output();
  if (container_) {
    auto kill = RunningProcess::Start(podman_, {"kill", "--signal=KILL", container_of[killed]});
    ASSERT_TRUE(kill->Wait(60).ok()) << kill->output();
  } else {
    pods[killed]->Signal(SIGKILL);
  }
  auto died = pods[killed]->Wait(60);
  ASSERT_TRUE(died.ok());
  EXPECT_EQ(*died, container_ ? 128 + SIGKILL : -SIGKILL) << pods[killed]->output();
  // restartPolicy OnFailure: the kubelet starts the container again, with
  // the same TF_CONFIG, in the same pod (namespace).
  const Replica* replica = nullptr;
  for (const Replica& r : replicas) {
    if (r.name == killed) replica = &r;
  }
  ASSERT_NE(replica, nullptr);
  ASSERT_EQ(replica->restart_policy, "OnFailure");
  const std::string first_life = pods[killed]->output();
  pods[killed] = start(*replica);

  // The job finishes: every replica exits 0 (the chief last).
  for (const std::string name : {"worker-0", "worker-1", "ps-0", "ps-1"}) {
    auto c = pods[name]->Wait(600);
    ASSERT_TRUE(c.ok()) << name << ": " << pods[name]->output();
    EXPECT_EQ(*c, 0) << name << ":\n" << pods[name]->output();
  }
  const proto::RunSummary summary = testing::ReadRunSummary(dir_ + "/data/runs/emu");
  std::printf("%s: %s killed and restarted; final test accuracy %.4f\n",
              container_ ? "containers" : "processes", killed.c_str(), summary.final_test_accuracy());
  EXPECT_GT(summary.final_test_accuracy(), 0.85) << summary.DebugString();
  // The restarted ps was given its shard back from the last checkpoint by
  // the chief; the restarted worker registered again.
  EXPECT_THAT(pods[killed]->output(),
              ::testing::HasSubstr(absl::StartsWith(killed, "ps") ? "restored by the chief from ckpt-"
                                                                   : "registering"))
      << "first life:\n" << first_life << "\nsecond life:\n" << pods[killed]->output();
}

INSTANTIATE_TEST_SUITE_P(
    Replicas, TfJobEmulation,
    ::testing::Combine(::testing::Values("worker-1", "ps-1"), ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<std::string, bool>>& p) {
      return absl::StrCat(absl::StrReplaceAll(std::get<0>(p.param), {{"-", ""}}),
                          std::get<1>(p.param) ? "_in_containers" : "_as_processes");
    });


// enableDynamicWorker: every replica gets the operator's sparse TF_CONFIG,
// exactly as its code writes it (a ps sees only itself, a worker every ps
// and only itself). The manifest has PS and Worker replicas only: worker 0
// is the chief. The job starts with Worker replicas 0 and 1; a third is
// added mid-run (scaled up to 3: the operator creates worker-2's pod) and
// removed again (scaled down to 2: the operator deletes the highest index,
// SIGTERM); worker-3 of the spec is never started, and a ps is killed and
// restarted by its policy. The ps tasks accept the workers as they come and
// go, and the job ends after exactly its number of updates, whoever made
// them. The ssp run emulates an operator of before May 2023 (the cluster
// under "sparseCluster").
class DynamicWorkerJob : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    dir_ = testing::MakeTempDir("dynamic");
  }
  std::string dir_;
};

TEST_P(DynamicWorkerJob, WorkersJoinAndLeaveWhileTheJobRuns) {
  ASSERT_TRUE(MakeDirs(dir_ + "/data/runs").ok());
  std::filesystem::create_directory_symlink(testing::SourcePath("data/mnist"), dir_ + "/data/mnist");
  const std::string manifest = dir_ + "/job.yaml";
  const bool ssp = absl::StrContains(GetParam(), "ssp");
  std::vector<std::string> flags = {
      "k8s", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_2ps_4w.json"),
      "--dynamic_workers", "--image=localhost/pstrain:test", "--name=dyn", "--namespace=team",
      "--epochs=2", "--max_steps=900", "--lr=0.02", "--checkpoint_every_steps=100", "--peer_timeout_s=3",
      "--log_every_steps=25", "--out=" + manifest};
  for (absl::string_view f : absl::StrSplit(GetParam(), ' ')) flags.emplace_back(f);
  auto gen = RunningProcess::Start(testing::BinaryPath("pstrain"), flags);
  auto code = gen->Wait(60);
  ASSERT_TRUE(code.ok() && *code == 0) << gen->output();
  auto yaml = ReadFileToString(manifest);
  ASSERT_TRUE(yaml.ok());
  EXPECT_THAT(*yaml, ::testing::HasSubstr("enableDynamicWorker: true"));
  EXPECT_THAT(*yaml, ::testing::Not(::testing::HasSubstr("Chief:")));
  // The spec's four workers are four Worker replicas; the manifest
  // validates against the CRD.
  std::map<std::string, Replica> replicas;
  const std::vector<std::string> operator_flags =
      ssp ? std::vector<std::string>{"--operator_before_2023"} : std::vector<std::string>{};
  for (Replica& r : DeriveReplicas(dir_, manifest, operator_flags)) replicas[r.name] = std::move(r);
  ASSERT_EQ(replicas.size(), 6u);
  for (const char* name : {"ps-0", "ps-1", "worker-0", "worker-1", "worker-2", "worker-3"}) {
    ASSERT_EQ(replicas.count(name), 1u) << name;
  }
  // The operator's sparse form, byte for byte (its convertClusterSpecToSparseClusterSpec,
  // as tools/k8s/validate_tfjob.py reproduces it).
  const std::string key = ssp ? "sparseCluster" : "cluster";
  EXPECT_EQ(replicas["ps-1"].tf_config,
            absl::StrCat("{\"", key, "\":{\"worker\":{},\"ps\":[\"dyn-ps-1.team.svc:2222\"]},"
                         "\"task\":{\"type\":\"ps\",\"index\":1}}"));
  EXPECT_EQ(replicas["worker-1"].tf_config,
            absl::StrCat("{\"", key, "\":{\"worker\":{\"1\":\"dyn-worker-1.team.svc:2222\"},\"ps\":["
                         "\"dyn-ps-0.team.svc:2222\",\"dyn-ps-1.team.svc:2222\"]},"
                         "\"task\":{\"type\":\"worker\",\"index\":1}}"));

  auto net = NetnsHarness::Create({});
  ASSERT_TRUE(net.ok()) << net.status();
  std::map<std::string, NetnsHost> hosts;
  for (const auto& [name, r] : replicas) {
    auto host = (*net)->AddHost(r.service);
    ASSERT_TRUE(host.ok()) << host.status();
    hosts[name] = *host;
  }
  ASSERT_TRUE((*net)->WriteHosts().ok());
  auto start = [&](const std::string& name) {
    const Replica& r = replicas[name];
    std::vector<std::string> args = {"netns", "exec", hosts[name].netns};
    args.insert(args.end(), r.command.begin(), r.command.end());
    return RunningProcess::Start((*net)->ip(), args, r.tf_config);
  };
  std::map<std::string, std::unique_ptr<RunningProcess>> pods;
  for (const char* name : {"ps-0", "ps-1", "worker-0", "worker-1"}) pods[name] = start(name);

  // Scaled up: worker-2 joins a running job.
  ASSERT_TRUE(pods["worker-0"]->WaitForOutput("step 100", 240))
      << pods["worker-0"]->output() << "\nps-0:\n" << pods["ps-0"]->output();
  EXPECT_THAT(pods["worker-0"]->output(), ::testing::HasSubstr("worker:0 (rank 0, dynamic workers, chief"));
  pods["worker-2"] = start("worker-2");
  // Three progress lines of its own (its steps start at the slowest
  // worker's clock in ssp, at 0 in async).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  auto lines = [&] {
    const std::string& out = pods["worker-2"]->output();
    int n = 0;
    for (size_t at = out.find("(this worker)"); at != std::string::npos;
         at = out.find("(this worker)", at + 1)) {
      ++n;
    }
    return n;
  };
  while (lines() < 3 && std::chrono::steady_clock::now() < deadline) {
    if (pods["worker-2"]->WaitForOutput("training done", 0.2)) break;
  }
  ASSERT_GE(lines(), 3) << pods["worker-2"]->output();
  if (ssp) {
    EXPECT_THAT(pods["worker-2"]->output(), ::testing::HasSubstr("continuing from step"));
  }
  // Scaled down to 2: the operator deletes the highest index's pod.
  pods["worker-2"]->Signal(SIGTERM);
  auto gone = pods["worker-2"]->Wait(60);
  ASSERT_TRUE(gone.ok()) << pods["worker-2"]->output();
  // And a ps dies and is restarted by its policy: the chief restores its
  // shard from the last checkpoint (the restarted ps learns the job from
  // that RESTORE), and the workers rejoin.
  pods["ps-1"]->Signal(SIGKILL);
  ASSERT_TRUE(pods["ps-1"]->Wait(60).ok());
  pods["ps-1"] = start("ps-1");

  for (const std::string name : {"worker-0", "worker-1", "ps-0", "ps-1"}) {
    auto c = pods[name]->Wait(600);
    ASSERT_TRUE(c.ok()) << name << ": " << pods[name]->output();
    EXPECT_EQ(*c, 0) << name << ":\n" << pods[name]->output();
  }
  const proto::RunSummary summary = testing::ReadRunSummary(dir_ + "/data/runs/dyn");
  std::printf("dynamic workers (%s): ranks %s took part, %d updates, final test accuracy %.4f\n",
              GetParam().c_str(), absl::StrJoin(summary.worker_ranks(), ",").c_str(),
              summary.updates_applied(), summary.final_test_accuracy());
  EXPECT_TRUE(summary.dynamic_workers());
  // worker-0 (rank 0, the chief), worker-1 (rank 1) and worker-2 (rank 2);
  // worker-3's slot was never taken, and nobody waited for it.
  EXPECT_THAT(summary.worker_ranks(), ::testing::ElementsAre(0, 1, 2));
  EXPECT_EQ(summary.num_workers(), 3);
  // Exactly the job's updates on the shard that was not restarted, however
  // many workers pushed at the end.
  EXPECT_GT(summary.final_test_accuracy(), 0.85) << summary.DebugString();
  EXPECT_THAT(pods["ps-0"]->output(), ::testing::HasSubstr("ps:0 done: version 900, 900 updates"));
  EXPECT_THAT(pods["ps-1"]->output(), ::testing::HasSubstr("restored by the chief from ckpt-"));
  ASSERT_GE(summary.recoveries_size(), 1) << summary.DebugString();
  std::printf("  ps-1 killed and restarted: %s; %d updates lost\n",
              summary.recoveries(0).what().c_str(), summary.updates_lost());
  // ps-0 saw worker-2 join (rank 2) and leave.
  EXPECT_THAT(pods["ps-0"]->output(), ::testing::HasSubstr("rank 2 joined")) << pods["ps-0"]->output();
  EXPECT_THAT(pods["ps-0"]->output(), ::testing::HasSubstr("worker:2 sent nothing for"))
      << pods["ps-0"]->output();
  // A normal end is no warning: once training is done the ps tasks closing
  // (the chief shut them down) is what an ending job looks like.
  for (const char* worker : {"worker-0", "worker-1"}) {
    const std::string& out = pods[worker]->output();
    const size_t done = out.rfind("training done");
    ASSERT_NE(done, std::string::npos) << worker << ":\n" << out;
    EXPECT_THAT(out.substr(done), ::testing::Not(::testing::HasSubstr("closed its connection")))
        << worker << ":\n" << out;
    EXPECT_THAT(out.substr(done), ::testing::Not(::testing::HasSubstr("\nW "))) << worker << ":\n" << out;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, DynamicWorkerJob, ::testing::Values("--mode=async", "--mode=ssp --staleness=2"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return absl::StartsWith(p.param, "--mode=ssp") ? "ssp" : "async";
                         });

// Sync needs every worker known in advance: a sparse TF_CONFIG is refused
// at once, saying why, by the worker and by `pstrain k8s`.
TEST(DynamicWorkers, SyncIsRefusedSayingWhy) {
  const std::string tf_config =
      R"({"cluster":{"worker":{"0":"127.0.0.1:2"},"ps":["127.0.0.1:1"]},"task":{"type":"worker","index":0}})";
  auto worker = RunningProcess::Start(testing::BinaryPath("worker"),
                                      {"--mode=sync", "--insecure", "--data_dir=" + testing::SourcePath("data/mnist")},
                                      tf_config);
  auto code = worker->Wait(60);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2) << worker->output();
  EXPECT_THAT(worker->output(), ::testing::HasSubstr("use --mode=async or --mode=ssp"));
  auto k8s = RunningProcess::Start(
      testing::BinaryPath("pstrain"),
      {"k8s", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_2ps_2w.json"),
       "--dynamic_workers", "--mode=sync", "--image=x", "--name=dyn"});
  code = k8s->Wait(60);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2) << k8s->output();
  EXPECT_THAT(k8s->output(), ::testing::HasSubstr("--dynamic_workers with --mode=sync"));
}

// A dynamic-worker job with a Chief replica (an older manifest, or one
// written by hand): the operator gives the chief an empty cluster, and
// the chief's container (`pstrain task`, and the worker binary it would
// become) exits at once with 2, saying why and what to do. Both operator
// generations.
TEST(DynamicWorkers, AChiefReplicaExitsAtOnceSayingWhy) {
  const std::string dir = testing::MakeTempDir("dynchief");
  const std::string manifest = dir + "/job.yaml";
  auto gen = RunningProcess::Start(
      testing::BinaryPath("pstrain"),
      {"k8s", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_2ps_2w.json"),
       "--dynamic_workers", "--mode=async", "--image=localhost/pstrain:test", "--name=dyn",
       "--namespace=team", "--out=" + manifest});
  auto code = gen->Wait(60);
  ASSERT_TRUE(code.ok() && *code == 0) << gen->output();
  auto yaml = ReadFileToString(manifest);
  ASSERT_TRUE(yaml.ok());
  const std::string workers = "    Worker:\n      replicas: 2\n";
  const size_t at = yaml->find(workers);
  ASSERT_NE(at, std::string::npos) << *yaml;
  std::string chief = yaml->substr(at);
  chief.replace(0, workers.size(), "    Chief:\n      replicas: 1\n");
  ASSERT_TRUE(WriteFileAtomic(manifest, *yaml + chief).ok());
  ASSERT_TRUE(MakeDirs(dir + "/data").ok());
  for (bool before_2023 : {false, true}) {
    std::map<std::string, Replica> replicas;
    for (Replica& r : DeriveReplicas(dir, manifest,
                                     before_2023 ? std::vector<std::string>{"--operator_before_2023"}
                                                 : std::vector<std::string>{})) {
      replicas[r.name] = std::move(r);
    }
    ASSERT_EQ(replicas.count("chief-0"), 1u);
    const Replica& r = replicas["chief-0"];
    EXPECT_EQ(r.tf_config, absl::StrCat("{\"", before_2023 ? "sparseCluster" : "cluster",
                                        "\":{\"worker\":{},\"ps\":[]},\"task\":{\"type\":\"chief\",\"index\":0}}"));
    // The container's command, and the worker binary itself with its args.
    std::vector<std::string> worker_args(r.command.begin() + 3, r.command.end());
    for (const auto& [binary, args] :
         std::vector<std::pair<std::string, std::vector<std::string>>>{
             {r.command[0], std::vector<std::string>(r.command.begin() + 1, r.command.end())},
             {testing::BinaryPath("worker"), worker_args}}) {
      const auto started = std::chrono::steady_clock::now();
      auto chief_process = RunningProcess::Start(binary, args, r.tf_config);
      auto exit = chief_process->Wait(60);
      ASSERT_TRUE(exit.ok()) << chief_process->output();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::printf("%s (%s): exit %d after %.2f s\n", binary.c_str(),
                  before_2023 ? "sparseCluster" : "cluster", *exit, seconds);
      EXPECT_EQ(*exit, 2) << chief_process->output();
      EXPECT_THAT(chief_process->output(), ::testing::HasSubstr("gives chief:0 an empty cluster: Kubeflow's "
                                                                "training operator does this"))
          << chief_process->output();
      EXPECT_THAT(chief_process->output(),
                  ::testing::HasSubstr("Drop the Chief replica: in a dynamic-worker job worker 0 is the chief"))
          << chief_process->output();
    }
  }
}

// A dynamic-worker job whose worker 0 never comes (its pod unschedulable,
// or failing): worker 1 and the ps wait for it at most
// --register_timeout_s (the ps from its own start), then exit saying the
// chief, worker:0, did not initialise the parameters; neither waits for
// good.
TEST(DynamicWorkers, WithoutWorkerZeroTheOthersStopWaitingSayingWhy) {
  auto ports = FreeLoopbackPorts(2, {});
  ASSERT_TRUE(ports.ok()) << ports.status();
  const std::string ps = absl::StrCat("127.0.0.1:", (*ports)[0]);
  const std::string ps_config =
      absl::StrCat(R"({"cluster":{"worker":{},"ps":[")", ps, R"("]},"task":{"type":"ps","index":0}})");
  const std::string worker_config =
      absl::StrCat(R"({"cluster":{"worker":{"1":"127.0.0.1:)", (*ports)[1], R"("},"ps":[")", ps,
                   R"("]},"task":{"type":"worker","index":1}})");
  auto ps_process = RunningProcess::Start(testing::BinaryPath("ps_server"),
                                          {"--insecure", "--register_timeout_s=6"}, ps_config);
  auto worker = RunningProcess::Start(
      testing::BinaryPath("worker"),
      {"--insecure", "--mode=async", "--register_timeout_s=3",
       "--data_dir=" + testing::SourcePath("data/mnist")},
      worker_config);
  auto code = worker->Wait(120);
  ASSERT_TRUE(code.ok()) << worker->output();
  EXPECT_EQ(*code, 1) << worker->output();
  EXPECT_THAT(worker->output(), ::testing::HasSubstr("waiting for the chief (worker:0)"));
  EXPECT_THAT(worker->output(), ::testing::HasSubstr(
                                    "worker: error: the chief (worker:0) did not initialise the "
                                    "parameters within 3 s (--register_timeout_s)"))
      << worker->output();
  EXPECT_THAT(worker->output(), ::testing::HasSubstr("keep at least one Worker replica"));
  code = ps_process->Wait(120);
  ASSERT_TRUE(code.ok()) << ps_process->output();
  EXPECT_EQ(*code, 1) << ps_process->output();
  EXPECT_THAT(ps_process->output(),
              ::testing::HasSubstr("ps_server: error: the chief (worker:0) did not initialise the "
                                   "parameters within 6 s of this ps's start (--register_timeout_s)"))
      << ps_process->output();
}

}  // namespace
}  // namespace pstrain

// `pstrain k8s` and `pstrain task`, checked by what consumes them: every
// manifest is validated against the TFJob CRD's openAPIV3Schema (and the
// training operator's own rules) by tools/k8s/validate_tfjob.py, which also
// derives each replica's TF_CONFIG as the operator does; every such
// TF_CONFIG must parse into the same job (one job id), and `pstrain task`
// with it must start the right binary with the manifest's own flags.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster_spec.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using testing::RunningProcess;

struct Ran {
  int code = -1;
  std::string output;
};

Ran RunProgram(const std::string& binary, const std::vector<std::string>& args,
        const std::string& tf_config = "") {
  auto p = RunningProcess::Start(binary, args, tf_config);
  auto code = p->Wait(120);
  return {code.ok() ? *code : -1, p->output()};
}

std::string Python() { return "/usr/bin/python3"; }

Ran Validate(const std::string& manifest, const std::string& tf_configs = "",
             std::vector<std::string> flags = {}) {
  std::vector<std::string> args = {testing::SourcePath("tools/k8s/validate_tfjob.py"), manifest};
  if (!tf_configs.empty()) args.push_back("--tf_configs=" + tf_configs);
  args.insert(args.end(), flags.begin(), flags.end());
  return RunProgram(Python(), args);
}

// The validator's lines: replica -> TF_CONFIG as the operator sets it.
std::map<std::string, std::string> TfConfigs(const std::string& jsonl) {
  std::map<std::string, std::string> out;
  auto lines = ReadFileToString(jsonl);
  EXPECT_TRUE(lines.ok()) << lines.status();
  if (!lines.ok()) return out;
  for (absl::string_view line : absl::StrSplit(*lines, '\n', absl::SkipEmpty())) {
    auto json = ParseJson(line, jsonl);
    EXPECT_TRUE(json.ok()) << json.status();
    if (!json.ok()) continue;
    const auto& f = json->struct_value().fields();
    out[f.at("replica").string_value()] = f.at("tf_config").string_value();
  }
  return out;
}

class K8s : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("k8s");
    ASSERT_FALSE(testing::FindProgram("python3").empty());
  }
  // `pstrain k8s` for `spec` with `flags`; the manifest's path.
  std::string Generate(const std::string& spec, std::vector<std::string> flags,
                       const std::string& file) {
    const std::string out = dir_ + "/" + file;
    flags.insert(flags.begin(), {"k8s", "--cluster_spec=" + spec, "--out=" + out});
    const Ran r = RunProgram(testing::BinaryPath("pstrain"), flags);
    EXPECT_EQ(r.code, 0) << r.output;
    return out;
  }
  std::string dir_;
};

TEST_F(K8s, AManifestValidatesAndEveryReplicasTfConfigIsOneJobThatTaskRoutes) {
  // A chief, two workers, two ps; GPUs; the secret embedded.
  const std::string spec = dir_ + "/spec.json";
  ASSERT_TRUE(WriteFileAtomic(spec, R"({"cluster": {"chief": ["localhost:1"],
      "worker": ["localhost:2", "localhost:3"], "ps": ["localhost:4", "localhost:5"]}})").ok());
  const std::string manifest =
      Generate(spec, {"--image=localhost/pstrain:test", "--name=mnist-async", "--namespace=team-a",
                      "--gpus_per_worker=1", "--mode=async", "--epochs=2",
                      "--secret_file=" + testing::TestSecretFile()},
               "job.yaml");
  auto text = ReadFileToString(manifest);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("kind: Secret"));
  EXPECT_THAT(*text, HasSubstr("restartPolicy: OnFailure"));
  EXPECT_THAT(*text, HasSubstr("prometheus.io/scrape: \"true\""));
  EXPECT_THAT(*text, HasSubstr("prometheus.io/port: \"9100\""));
  EXPECT_THAT(*text, HasSubstr("nvidia.com/gpu: 1"));
  EXPECT_THAT(*text, HasSubstr("\"--mode=async\""));

  const std::string configs = dir_ + "/tf_configs.jsonl";
  const Ran v = Validate(manifest, configs);
  ASSERT_EQ(v.code, 0) << v.output;
  auto lines = ReadFileToString(configs);
  ASSERT_TRUE(lines.ok());
  std::set<std::string> replicas;
  std::set<uint64_t> job_ids;
  for (absl::string_view line : absl::StrSplit(*lines, '\n', absl::SkipEmpty())) {
    auto json = ParseJson(line, "tf_configs");
    ASSERT_TRUE(json.ok()) << json.status();
    const auto& f = json->struct_value().fields();
    const std::string replica = f.at("replica").string_value();
    replicas.insert(replica);
    const std::string tf_config = f.at("tf_config").string_value();
    auto cluster = ClusterSpec::FromJson(tf_config, replica);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    ASSERT_TRUE(cluster->task().has_value());
    EXPECT_EQ(cluster->num_ps(), 2);
    EXPECT_EQ(cluster->num_workers(), 3);
    EXPECT_TRUE(cluster->has_chief());
    EXPECT_THAT(tf_config, HasSubstr(absl::StrCat("mnist-async-", replica, ".team-a.svc:2222")));
    job_ids.insert(cluster->JobId());

    // `pstrain task` starts the replica's binary with the manifest's flags:
    // one flag more, with a value that binary refuses after parsing all of
    // them, shows which binary ran and that it knew every flag.
    const bool ps = absl::StartsWith(replica, "ps-");
    // The container's command and args, as the validator read them.
    std::vector<std::string> command;
    for (const char* key : {"command", "args"}) {
      for (const auto& a : f.at(key).list_value().values()) {
        // The Secret's mount in the pod is the test's secret file here.
        command.push_back(a.string_value() == "--secret_file=/etc/pstrain/job.secret"
                              ? "--secret_file=" + testing::TestSecretFile()
                              : a.string_value());
      }
    }
    ASSERT_GE(command.size(), 3u) << replica;
    EXPECT_EQ(command[0], "pstrain");
    EXPECT_EQ(command[1], "task");
    std::vector<std::string> args(command.begin() + 1, command.end());
    ASSERT_GT(args.size(), 5u) << replica;
    args.push_back(ps ? "--peer_timeout_s=-1" : "--epochs=0");
    const Ran t = RunProgram(testing::BinaryPath("pstrain"), args, tf_config);
    EXPECT_EQ(t.code, 2) << replica << ": " << t.output;
    EXPECT_THAT(t.output, HasSubstr(ps ? "ps_server: error: " : "worker: error: ")) << t.output;
    EXPECT_THAT(t.output, HasSubstr(ps ? "--peer_timeout_s" : "epochs")) << t.output;
    EXPECT_THAT(t.output, ::testing::Not(HasSubstr("Unknown command line flag"))) << t.output;
  }
  EXPECT_EQ(replicas, (std::set<std::string>{"chief-0", "worker-0", "worker-1", "ps-0", "ps-1"}));
  EXPECT_EQ(job_ids.size(), 1u) << "every replica must compute the same job id";
  // Byte for byte what the operator sets (Go writes the cluster's keys sorted).
  EXPECT_EQ(TfConfigs(configs).at("worker-1"),
            "{\"cluster\":{\"chief\":[\"mnist-async-chief-0.team-a.svc:2222\"],\"ps\":["
            "\"mnist-async-ps-0.team-a.svc:2222\",\"mnist-async-ps-1.team-a.svc:2222\"],\"worker\":["
            "\"mnist-async-worker-0.team-a.svc:2222\",\"mnist-async-worker-1.team-a.svc:2222\"]},"
            "\"task\":{\"type\":\"worker\",\"index\":1},\"environment\":\"cloud\"}");
}

// enableDynamicWorker: PS and Worker replicas only (the spec's four
// workers are Workers 0..3), the manifest validates, each replica's
// TF_CONFIG is the operator's sparse one byte for byte, and parses to
// worker i at rank i; every worker agrees on the job id (a ps learns it
// from the chief's INIT). The same from an operator of before May 2023
// ("sparseCluster").
TEST_F(K8s, ADynamicWorkerManifestGivesSparseTfConfigsOfOneJob) {
  const std::string manifest = Generate(
      testing::SourcePath("cluster_specs/local_2ps_4w.json"),
      {"--image=localhost/pstrain:test", "--name=dyn", "--mode=ssp", "--dynamic_workers"}, "dyn.yaml");
  auto text = ReadFileToString(manifest);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("enableDynamicWorker: true"));
  EXPECT_THAT(*text, ::testing::Not(HasSubstr("Chief:")));
  EXPECT_THAT(*text, HasSubstr("    Worker:\n      replicas: 4\n"));
  for (bool before_2023 : {false, true}) {
    const std::string configs = dir_ + (before_2023 ? "/dyn_old.jsonl" : "/dyn.jsonl");
    const Ran v = Validate(manifest, configs,
                           before_2023 ? std::vector<std::string>{"--operator_before_2023"}
                                       : std::vector<std::string>{});
    ASSERT_EQ(v.code, 0) << v.output;
    const std::map<std::string, std::string> tf_configs = TfConfigs(configs);
    const std::string key = before_2023 ? "sparseCluster" : "cluster";
    EXPECT_EQ(tf_configs.at("ps-1"), absl::StrCat("{\"", key, "\":{\"worker\":{},\"ps\":[\"dyn-ps-1.default.svc:2222\"]},"
                                                  "\"task\":{\"type\":\"ps\",\"index\":1}}"));
    EXPECT_EQ(tf_configs.at("worker-2"),
              absl::StrCat("{\"", key, "\":{\"worker\":{\"2\":\"dyn-worker-2.default.svc:2222\"},\"ps\":["
                           "\"dyn-ps-0.default.svc:2222\",\"dyn-ps-1.default.svc:2222\"]},"
                           "\"task\":{\"type\":\"worker\",\"index\":2}}"));
    std::map<std::string, int> ranks;
    std::set<uint64_t> job_ids;
    for (const auto& [replica, tf_config] : tf_configs) {
      auto cluster = ClusterSpec::FromJson(tf_config, replica);
      ASSERT_TRUE(cluster.ok()) << cluster.status();
      EXPECT_TRUE(cluster->sparse()) << replica;
      const TaskId task = *cluster->task();
      EXPECT_EQ(cluster->Address(task), absl::StrCat("dyn-", replica, ".default.svc:2222"));
      EXPECT_EQ(cluster->ChiefTask().ToString(), "worker:0") << replica;
      if (task.type == TaskType::kPs) {
        EXPECT_EQ(cluster->num_ps(), 0) << "a ps sees only itself";
        continue;
      }
      EXPECT_EQ(cluster->num_ps(), 2);
      ranks[replica] = cluster->WorkerRank(task);
      job_ids.insert(cluster->JobId());
    }
    EXPECT_EQ(ranks, (std::map<std::string, int>{
                         {"worker-0", 0}, {"worker-1", 1}, {"worker-2", 2}, {"worker-3", 3}}));
    EXPECT_EQ(job_ids.size(), 1u);
  }
}

// A dynamic-worker job with a Chief replica (an older manifest, or written
// by hand) validates: the operator accepts it, and gives the chief an
// empty cluster, which the chief refuses at once saying why.
TEST_F(K8s, TheOperatorGivesADynamicWorkerJobsChiefAnEmptyCluster) {
  const std::string manifest = Generate(
      testing::SourcePath("cluster_specs/local_2ps_2w.json"),
      {"--image=localhost/pstrain:test", "--name=dyn", "--mode=async", "--dynamic_workers"}, "dyn.yaml");
  auto text = ReadFileToString(manifest);
  ASSERT_TRUE(text.ok());
  // The Worker replica spec again, as a Chief of one replica.
  const size_t at = text->find("    Worker:\n      replicas: 2\n");
  ASSERT_NE(at, std::string::npos) << *text;
  std::string chief = text->substr(at);
  chief.replace(0, std::string("    Worker:\n      replicas: 2\n").size(), "    Chief:\n      replicas: 1\n");
  const std::string with_chief = dir_ + "/with_chief.yaml";
  ASSERT_TRUE(WriteFileAtomic(with_chief, *text + chief).ok());
  const std::string configs = dir_ + "/with_chief.jsonl";
  const Ran v = Validate(with_chief, configs);
  ASSERT_EQ(v.code, 0) << v.output;
  const std::map<std::string, std::string> tf_configs = TfConfigs(configs);
  ASSERT_EQ(tf_configs.count("chief-0"), 1u);
  EXPECT_EQ(tf_configs.at("chief-0"), R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"chief","index":0}})");
  auto cluster = ClusterSpec::FromJson(tf_configs.at("chief-0"), "TF_CONFIG");
  ASSERT_FALSE(cluster.ok());
  EXPECT_THAT(cluster.status().message(), HasSubstr("TF_CONFIG gives chief:0 an empty cluster"));
  EXPECT_THAT(cluster.status().message(), HasSubstr("Drop the Chief replica"));
}

TEST_F(K8s, TheValidatorRefusesWhatAClusterOrTheOperatorWould) {
  const std::string manifest = Generate(testing::SourcePath("cluster_specs/local_2ps_2w.json"),
                                        {"--image=pstrain:1", "--name=j"}, "ok.yaml");
  ASSERT_EQ(Validate(manifest).code, 0);
  auto text = ReadFileToString(manifest);
  ASSERT_TRUE(text.ok());
  const std::vector<std::pair<std::string, std::string>> breakages = {
      {"      replicas: 2\n", "      replicas: \"two\"\n"},            // schema: type
      {"restartPolicy: OnFailure", "restartPolicy: Sometimes"},         // operator: enum
      {"      replicas: 2\n", "      replicas: 2\n      restartPolcy: Never\n"},  // pruned field
      {"- name: tensorflow", "- name: main"},                           // operator: container
      {"apiVersion: kubeflow.org/v1", "apiVersion: kubeflow.org/v2"},
  };
  for (const auto& [from, to] : breakages) {
    std::string broken = *text;
    const size_t at = broken.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    broken.replace(at, from.size(), to);
    const std::string path = dir_ + "/broken.yaml";
    ASSERT_TRUE(WriteFileAtomic(path, broken).ok());
    const Ran v = Validate(path);
    EXPECT_EQ(v.code, 1) << to << "\n" << v.output;
  }
}

// deploy/k8s/mnist_sync_2ps_2w.yaml is what `pstrain k8s` writes today
// (deploy/k8s/README.md names its flags), and it validates.
TEST_F(K8s, TheCommittedExampleIsWhatTheCommandWrites) {
  const std::string manifest = Generate(
      testing::SourcePath("cluster_specs/local_2ps_2w.json"),
      {"--image=pstrain:latest", "--name=mnist-sync", "--mode=sync", "--epochs=3"}, "example.yaml");
  auto fresh = ReadFileToString(manifest);
  auto committed = ReadFileToString(testing::SourcePath("deploy/k8s/mnist_sync_2ps_2w.yaml"));
  ASSERT_TRUE(fresh.ok() && committed.ok());
  EXPECT_EQ(*fresh, *committed) << "regenerate it: see deploy/k8s/README.md";
  EXPECT_EQ(Validate(testing::SourcePath("deploy/k8s/mnist_sync_2ps_2w.yaml")).code, 0);
}

// The training flags reach the chief and worker replicas (here one Worker
// replica spec: the spec has no chief, worker 0 is it), the optimizer's
// among them.
TEST_F(K8s, TheOptimizerFlagsGoToTheWorkerReplicas) {
  const std::string manifest = Generate(
      testing::SourcePath("cluster_specs/local_2ps_2w.json"),
      {"--image=pstrain:latest", "--name=mnist-adamw", "--optimizer=adamw", "--weight_decay=0.01"},
      "adamw.yaml");
  auto text = ReadFileToString(manifest);
  ASSERT_TRUE(text.ok());
  for (const char* flag : {"\"--optimizer=adamw\"", "\"--weight_decay=0.01\""}) {
    size_t count = 0;
    for (size_t at = text->find(flag); at != std::string::npos; at = text->find(flag, at + 1)) {
      ++count;
    }
    EXPECT_EQ(count, 1u) << flag;  // the Worker replica spec, not the PS one
  }
  EXPECT_EQ(Validate(manifest).code, 0);
}

TEST_F(K8s, BadNamesImagesAndSpecsAreRefusedNamingThem) {
  const std::string spec = testing::SourcePath("cluster_specs/local_2ps_2w.json");
  const std::string evaluator = dir_ + "/evaluator.json";
  ASSERT_TRUE(WriteFileAtomic(evaluator, R"({"cluster": {"worker": ["localhost:2"],
      "ps": ["localhost:4"], "evaluator": ["localhost:6"]}})").ok());
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"k8s", "--cluster_spec=" + spec, "--image=pstrain:1", "--name=Bad_Name"}, "--name"},
      {{"k8s", "--cluster_spec=" + spec, "--image=pstrain:1", "--name=" + std::string(41, 'a')}, "--name"},
      {{"k8s", "--cluster_spec=" + spec, "--name=j"}, "--image"},
      {{"k8s", "--cluster_spec=" + spec, "--image=a b", "--name=j"}, "--image"},
      {{"k8s", "--cluster_spec=" + spec, "--image=p:1", "--name=j", "--namespace=NS"}, "--namespace"},
      {{"k8s", "--cluster_spec=" + evaluator, "--image=p:1", "--name=j"}, "evaluator"},
      {{"k8s", "--image=p:1", "--name=j"}, "--cluster_spec"},
      {{"k8s", "--cluster_spec=" + spec, "--image=p:1", "--name=j", "--optimizer=rmsprop"},
       "--optimizer"},
      {{"k8s", "--cluster_spec=" + spec, "--image=p:1", "--name=j", "--optimizer=adam",
        "--beta2=1"},
       "--beta2"},
  };
  for (const auto& [args, named] : cases) {
    const Ran r = RunProgram(testing::BinaryPath("pstrain"), args);
    EXPECT_EQ(r.code, 2) << args.back() << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(named)) << r.output;
  }
  // `pstrain task` without a TF_CONFIG, or with one naming no task it runs.
  Ran t = RunProgram(testing::BinaryPath("pstrain"), {"task", "--", "--insecure"});
  EXPECT_EQ(t.code, 2) << t.output;
  EXPECT_THAT(t.output, HasSubstr("TF_CONFIG"));
  t = RunProgram(testing::BinaryPath("pstrain"), {"task"},
          R"({"cluster": {"worker": ["a:1"], "ps": ["c:3"], "evaluator": ["b:2"]},
                  "task": {"type": "evaluator", "index": 0}})");
  EXPECT_EQ(t.code, 2) << t.output;
  EXPECT_THAT(t.output, HasSubstr("evaluator"));
}

}  // namespace
}  // namespace pstrain

#include "common/cluster_spec.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/file_util.h"
#include "common/free_ports.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr char kGood[] = R"({"cluster": {"chief": ["localhost:2220"],
  "worker": ["localhost:2222", "localhost:2223"], "ps": ["localhost:2230", "localhost:2231"]},
  "task": {"type": "worker", "index": 1}, "environment": "cloud"})";

TEST(ClusterSpec, ParsesTensorFlowStyleConfig) {
  auto spec = ClusterSpec::FromJson(kGood, "TF_CONFIG");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->num_ps(), 2);
  EXPECT_EQ(spec->num_workers(), 3);
  EXPECT_TRUE(spec->has_chief());
  ASSERT_TRUE(spec->task().has_value());
  EXPECT_EQ(spec->task()->ToString(), "worker:1");
  EXPECT_EQ(spec->Address({TaskType::kPs, 1}), "localhost:2231");
}

TEST(ClusterSpec, ChiefIsRankZeroAndWorkersFollow) {
  auto spec = ClusterSpec::FromJson(kGood, "TF_CONFIG");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->WorkerRank({TaskType::kChief, 0}), 0);
  EXPECT_EQ(spec->WorkerRank({TaskType::kWorker, 0}), 1);
  EXPECT_EQ(spec->TaskForRank(2).ToString(), "worker:1");
  EXPECT_TRUE(spec->IsChief({TaskType::kChief, 0}));
  EXPECT_FALSE(spec->IsChief({TaskType::kWorker, 0}));
}

TEST(ClusterSpec, WorkerZeroIsChiefWithoutChiefTask) {
  auto spec = ClusterSpec::FromJson(
      R"({"cluster": {"worker": ["a:1", "b:2"], "ps": ["c:3"]}})", "spec");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ChiefTask().ToString(), "worker:0");
  EXPECT_EQ(spec->WorkerRank({TaskType::kWorker, 1}), 1);
  EXPECT_FALSE(spec->task().has_value());
}

TEST(ClusterSpec, AcceptsMasterAsChiefAndIgnoresUnknownTopLevelKeys) {
  auto spec = ClusterSpec::FromJson(
      R"({"cluster": {"master": ["m:1"], "ps": ["p:2"], "evaluator": ["e:3"]},
          "task": {"type": "master", "index": 0}, "rpc_layer": "grpc",
          "session_master": "", "environment": "cloud"})",
      "TFJob");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task()->type, TaskType::kChief);
  EXPECT_EQ(spec->num_workers(), 1);
  EXPECT_EQ(spec->Addresses(TaskType::kEvaluator).size(), 1u);
}

TEST(ClusterSpec, AcceptsIpv6Addresses) {
  auto spec = ClusterSpec::FromJson(R"({"cluster": {"worker": ["[::1]:2222"], "ps": ["[::1]:2223"]}})",
                                    "spec");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto hp = ParseHostPort(spec->Address({TaskType::kPs, 0}));
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 2223);
}

TEST(ClusterSpec, JobIdDependsOnAddressesOnly) {
  auto a = ClusterSpec::FromJson(R"({"cluster": {"worker": ["h:1"], "ps": ["h:2"]},
                                     "task": {"type": "worker", "index": 0}})", "a");
  auto b = ClusterSpec::FromJson(R"({"cluster": {"worker": ["h:1"], "ps": ["h:2"]},
                                     "task": {"type": "ps", "index": 0}})", "b");
  auto c = ClusterSpec::FromJson(R"({"cluster": {"worker": ["h:1"], "ps": ["h:3"]}})", "c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->JobId(), b->JobId());
  EXPECT_NE(a->JobId(), c->JobId());
}

TEST(ClusterSpec, ToTfConfigRoundTrips) {
  auto spec = ClusterSpec::FromJson(kGood, "TF_CONFIG");
  ASSERT_TRUE(spec.ok());
  auto again = ClusterSpec::FromJson(spec->ToTfConfig({TaskType::kPs, 1}), "round trip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->task()->ToString(), "ps:1");
  EXPECT_EQ(again->JobId(), spec->JobId());
}

TEST(ClusterSpec, ToJsonIsTheClusterWithoutItsTaskAndRoundTrips) {
  auto spec = ClusterSpec::FromJson(kGood, "TF_CONFIG");
  ASSERT_TRUE(spec.ok());
  const std::string json = spec->ToJson();
  EXPECT_EQ(json.back(), '\n');
  EXPECT_EQ(json.find("\"task\""), std::string::npos);
  auto again = ClusterSpec::FromJson(json, "round trip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->task().has_value());
  EXPECT_EQ(again->JobId(), spec->JobId());
  EXPECT_EQ(again->ToTfConfig({TaskType::kChief, 0}), spec->ToTfConfig({TaskType::kChief, 0}));
}

TEST(ClusterSpec, LocalPutsWorkersThenPsOnConsecutiveLocalhostPorts) {
  const ClusterSpec spec = ClusterSpec::Local(2, 3, 100);
  EXPECT_EQ(spec.Addresses(TaskType::kWorker),
            (std::vector<std::string>{"localhost:100", "localhost:101", "localhost:102"}));
  EXPECT_EQ(spec.Addresses(TaskType::kPs), (std::vector<std::string>{"localhost:103", "localhost:104"}));
  EXPECT_FALSE(spec.has_chief());
  EXPECT_TRUE(ClusterSpec::FromJson(spec.ToJson(), "local").ok());
}

TEST(IsLoopbackHost, KnowsEveryLoopbackSpellingAndNothingElse) {
  for (const char* host : {"localhost", "LocalHost", "127.0.0.1", "127.1.2.3", "::1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"127.example.com", "10.0.0.1", "0.0.0.0", "::", "ps-0.svc", "localhost2"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(ClusterSpec, AnyTwoLoopbackSpellingsOfOnePortAreADuplicate) {
  auto spec =
      ClusterSpec::FromJson(R"({"cluster": {"worker": ["127.0.0.2:5"], "ps": ["LOCALHOST:5"]}})", "t");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("duplicate address"));
}

TEST(WithFreePorts, ReplacesLoopbackPortsWithDistinctFreeOnesAndKeepsOtherHosts) {
  auto spec = ClusterSpec::FromJson(
      R"({"cluster": {"chief": ["localhost:1"], "worker": ["127.0.0.1:2", "far-host:3"], "ps": ["[::1]:4"]},
          "task": {"type": "ps", "index": 0}})",
      "t");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto free = WithFreePorts(*spec);
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_EQ(free->Address({TaskType::kWorker, 1}), "far-host:3");
  std::set<int> ports;
  for (const TaskId& id :
       {TaskId{TaskType::kChief, 0}, TaskId{TaskType::kWorker, 0}, TaskId{TaskType::kPs, 0}}) {
    auto hp = ParseHostPort(free->Address(id));
    ASSERT_TRUE(hp.ok());
    EXPECT_EQ(hp->host, ParseHostPort(spec->Address(id))->host) << id.ToString();
    EXPECT_GT(hp->port, 1024) << id.ToString();
    ports.insert(hp->port);
  }
  EXPECT_EQ(ports.size(), 3u);
}

// Each malformed TF_CONFIG must be refused with InvalidArgument whose message
// names the offending field.
struct BadCase {
  const char* name;
  const char* json;
  const char* field;  // expected in the message
};

class MalformedTfConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(MalformedTfConfig, IsRefusedNamingTheField) {
  const BadCase& c = GetParam();
  auto spec = ClusterSpec::FromJson(c.json, "TF_CONFIG");
  ASSERT_FALSE(spec.ok()) << c.name << " was accepted";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(c.field)) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("TF_CONFIG"));
}

INSTANTIATE_TEST_SUITE_P(
    ClusterSpec, MalformedTfConfig,
    ::testing::Values(
        BadCase{"NotJson", "this is not json", "not valid JSON"},
        BadCase{"Empty", "   ", "empty"},
        BadCase{"TrailingGarbage", R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}} x)", "not valid JSON"},
        BadCase{"TopLevelList", R"([1, 2])", "must be a JSON object"},
        BadCase{"NoCluster", R"({"task": {"type": "ps", "index": 0}})", "cluster"},
        BadCase{"ClusterNotObject", R"({"cluster": ["a:1"]})", "cluster"},
        BadCase{"NoPs", R"({"cluster": {"worker": ["a:1"]}})", "cluster.ps"},
        BadCase{"EmptyPs", R"({"cluster": {"worker": ["a:1"], "ps": []}})", "cluster.ps"},
        BadCase{"NoWorkerNoChief", R"({"cluster": {"ps": ["a:1"]}})", "cluster.worker"},
        BadCase{"TaskListNotList", R"({"cluster": {"worker": "a:1", "ps": ["b:2"]}})", "cluster.worker"},
        BadCase{"AddressNotString", R"({"cluster": {"worker": [2222], "ps": ["b:2"]}})", "cluster.worker[0]"},
        BadCase{"UnknownTaskType", R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"], "trainer": ["c:3"]}})",
                "cluster.trainer"},
        BadCase{"TwoChiefs", R"({"cluster": {"chief": ["a:1", "a:2"], "ps": ["b:2"]}})", "cluster.chief"},
        BadCase{"ChiefAndMaster", R"({"cluster": {"chief": ["a:1"], "master": ["a:2"], "ps": ["b:2"]}})",
                "cluster.master"},
        BadCase{"DuplicateAddress", R"({"cluster": {"worker": ["a:1"], "ps": ["a:1"]}})", "duplicate address"},
        BadCase{"DuplicateViaLocalhostAlias",
                R"({"cluster": {"worker": ["localhost:5"], "ps": ["127.0.0.1:5"]}})", "duplicate address"},
        BadCase{"NoPort", R"({"cluster": {"worker": ["a"], "ps": ["b:2"]}})", "cluster.worker[0]"},
        BadCase{"PortZero", R"({"cluster": {"worker": ["a:0"], "ps": ["b:2"]}})", "invalid port"},
        BadCase{"PortTooBig", R"({"cluster": {"worker": ["a:70000"], "ps": ["b:2"]}})", "invalid port"},
        BadCase{"PortNotNumber", R"({"cluster": {"worker": ["a:http"], "ps": ["b:2"]}})", "invalid port"},
        BadCase{"NegativePort", R"({"cluster": {"worker": ["a:-1"], "ps": ["b:2"]}})", "invalid port"},
        BadCase{"EmptyHost", R"({"cluster": {"worker": [":1"], "ps": ["b:2"]}})", "empty host"},
        BadCase{"BadHostCharacter", R"({"cluster": {"worker": ["a b:1"], "ps": ["b:2"]}})", "invalid character"},
        BadCase{"UnbracketedIpv6", R"({"cluster": {"worker": ["::1:1"], "ps": ["b:2"]}})", "brackets"},
        BadCase{"TaskNotObject", R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": "worker"})", "task"},
        BadCase{"TaskMissingType", R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"index": 0}})",
                "task.type"},
        BadCase{"TaskTypeNotString",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": 1, "index": 0}})",
                "task.type"},
        BadCase{"TaskTypeUnknown",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "gpu", "index": 0}})",
                "task.type"},
        BadCase{"TaskMissingIndex", R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps"}})",
                "task.index"},
        BadCase{"TaskIndexString",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps", "index": "0"}})",
                "task.index"},
        BadCase{"TaskIndexNegative",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps", "index": -1}})",
                "task.index"},
        BadCase{"TaskIndexFraction",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps", "index": 0.5}})",
                "task.index"},
        BadCase{"TaskIndexOutOfRange",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps", "index": 1}})",
                "ps:1 is not in the cluster"},
        BadCase{"TaskTypeNotInCluster",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "chief", "index": 0}})",
                "chief:0 is not in the cluster"},
        BadCase{"DuplicateKey", R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"], "ps": ["c:3"]}})",
                "not valid JSON"},
        BadCase{"TwoEvaluators", R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"], "evaluator": ["c:3", "c:4"]}})",
                "cluster.evaluator"}),
    [](const ::testing::TestParamInfo<BadCase>& p) { return std::string(p.param.name); });

TEST(ResolveTaskConfig, FlagsOverrideTheJsonTask) {
  TaskConfigSources s;
  s.tf_config = kGood;
  s.task_type = "ps";
  s.task_index = 1;
  auto spec = ResolveTaskConfig(s);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task()->ToString(), "ps:1");
}

TEST(ResolveTaskConfig, ClusterSpecFileWinsOverTfConfig) {
  const std::string path = ::testing::TempDir() + "/spec.json";
  ASSERT_TRUE(WriteFileAtomic(path, R"({"cluster": {"worker": ["x:1"], "ps": ["x:2"]}})").ok());
  TaskConfigSources s;
  s.tf_config = kGood;
  s.cluster_spec_path = path;
  s.task_type = "worker";
  s.task_index = 0;
  auto spec = ResolveTaskConfig(s);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->num_ps(), 1);
}

TEST(ResolveTaskConfig, RefusesMissingConfiguration) {
  auto spec = ResolveTaskConfig(TaskConfigSources{});
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("TF_CONFIG"));
}

TEST(ResolveTaskConfig, RefusesSpecWithoutTask) {
  TaskConfigSources s;
  s.tf_config = R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}})";
  auto spec = ResolveTaskConfig(s);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("task"));
}

TEST(ResolveTaskConfig, MissingFileIsNotFound) {
  TaskConfigSources s;
  s.cluster_spec_path = "/nonexistent/spec.json";
  auto spec = ResolveTaskConfig(s);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("/nonexistent/spec.json"));
}

TEST(ResolveTaskConfig, FlagTaskOutOfRangeIsRefused) {
  TaskConfigSources s;
  s.tf_config = kGood;
  s.task_type = "worker";
  s.task_index = 7;
  auto spec = ResolveTaskConfig(s);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("worker:7"));
}

TEST(ResolveTaskConfig, UnknownFlagTaskTypeIsRefused) {
  TaskConfigSources s;
  s.tf_config = kGood;
  s.task_type = "driver";
  s.task_index = 0;
  auto spec = ResolveTaskConfig(s);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("--task_type"));
}

TEST(ClusterSpec, ShippedSpecsAreValid) {
  for (const char* name : {"local_1ps_1w", "local_1ps_2w", "local_2ps_2w", "local_2ps_4w",
                           "local_4ps_8w"}) {
    const std::string path = std::string(PSTRAIN_SOURCE_DIR) + "/cluster_specs/" + name + ".json";
    auto text = ReadFileToString(path);
    ASSERT_TRUE(text.ok()) << text.status();
    auto spec = ClusterSpec::FromJson(*text, path);
    EXPECT_TRUE(spec.ok()) << spec.status();
  }
}


// Kubeflow's training operator with enableDynamicWorker, byte for byte as
// its Go code marshals them (convertClusterSpecToSparseClusterSpec): a ps
// sees only itself, a worker every ps and only itself, and every other
// replica type an empty cluster. No "environment" key.
constexpr char kSparsePs1[] =
    R"({"cluster":{"worker":{},"ps":["job-ps-1.ns.svc:2222"]},"task":{"type":"ps","index":1}})";
constexpr char kSparseWorker3[] =
    R"({"cluster":{"worker":{"3":"job-worker-3.ns.svc:2222"},"ps":["job-ps-0.ns.svc:2222",)"
    R"("job-ps-1.ns.svc:2222"]},"task":{"type":"worker","index":3}})";
constexpr char kSparseWorker0[] =
    R"({"cluster":{"worker":{"0":"job-worker-0.ns.svc:2222"},"ps":["job-ps-0.ns.svc:2222",)"
    R"("job-ps-1.ns.svc:2222"]},"task":{"type":"worker","index":0}})";
constexpr char kEmptyChief[] = R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"chief","index":0}})";

TEST(ClusterSpec, SparsePsTakesTheOneListedAddressAsItsOwn) {
  auto spec = ClusterSpec::FromJson(kSparsePs1, "TF_CONFIG");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->sparse());
  EXPECT_EQ(spec->task()->ToString(), "ps:1");
  EXPECT_EQ(spec->Address({TaskType::kPs, 1}), "job-ps-1.ns.svc:2222");
  EXPECT_FALSE(spec->Contains({TaskType::kPs, 0}));
  EXPECT_EQ(spec->num_ps(), 0);  // unknown: the chief's INIT says
  EXPECT_EQ(spec->num_workers(), ClusterSpec::kDynamicWorkerSlots);
  // Worker 0 is the chief it waits for.
  EXPECT_EQ(spec->ChiefTask().ToString(), "worker:0");
  // Written back and read again, it is the same spec.
  auto again = ClusterSpec::FromJson(spec->ToTfConfig(*spec->task()), "again");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << spec->ToTfConfig(*spec->task());
  EXPECT_EQ(again->Address({TaskType::kPs, 1}), "job-ps-1.ns.svc:2222");
  EXPECT_EQ(again->JobId(), spec->JobId());
}

TEST(ClusterSpec, SparseWorkerIIsRankIAndWorkerZeroIsTheChief) {
  auto worker = ClusterSpec::FromJson(kSparseWorker3, "TF_CONFIG");
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto worker0 = ClusterSpec::FromJson(kSparseWorker0, "TF_CONFIG");
  ASSERT_TRUE(worker0.ok()) << worker0.status();
  EXPECT_FALSE(worker->has_chief());
  EXPECT_EQ(worker->WorkerRank(*worker->task()), 3);
  EXPECT_FALSE(worker->IsChief(*worker->task()));
  EXPECT_EQ(worker0->WorkerRank(*worker0->task()), 0);
  EXPECT_TRUE(worker0->IsChief(*worker0->task()));
  EXPECT_EQ(worker->ChiefTask().ToString(), "worker:0");
  EXPECT_EQ(worker->TaskForRank(3).ToString(), "worker:3");
  // Every rank slot is a worker, the last one included.
  const int last = ClusterSpec::kDynamicWorkerSlots - 1;
  EXPECT_EQ(worker->TaskForRank(last).ToString(), absl::StrCat("worker:", last));
  EXPECT_EQ(worker->WorkerRank({TaskType::kWorker, last}), last);
  EXPECT_EQ(worker->num_ps(), 2);
  // Every worker of the job computes the same id: the ps list's.
  EXPECT_EQ(worker->JobId(), worker0->JobId());
  auto full = ClusterSpec::FromJson(kGood, "TF_CONFIG");
  EXPECT_NE(worker->JobId(), full->JobId());
}

TEST(ClusterSpec, TheOperatorsEmptyClusterForAChiefIsRefusedSayingWhy) {
  auto spec = ClusterSpec::FromJson(kEmptyChief, "TF_CONFIG");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(spec.status().message());
  EXPECT_THAT(message, HasSubstr("TF_CONFIG gives chief:0 an empty cluster"));
  EXPECT_THAT(message, HasSubstr("enableDynamicWorker"));
  EXPECT_THAT(message, HasSubstr("Drop the Chief replica"));
  EXPECT_THAT(message, HasSubstr("worker 0 is the chief"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("cluster.ps")));
  // A Master replica, and the pre-2023 key, the same.
  spec = ClusterSpec::FromJson(
      R"({"sparseCluster":{"worker":{},"ps":[]},"task":{"type":"master","index":0}})", "$TF_CONFIG");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("$TF_CONFIG gives chief:0 an empty cluster"));
  // An Evaluator replica gets the same empty cluster: refused, naming it.
  spec = ClusterSpec::FromJson(R"({"cluster":{"worker":{},"ps":[]},"task":{"type":"evaluator","index":0}})",
                               "TF_CONFIG");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("gives evaluator:0 an empty cluster"));
  EXPECT_THAT(spec.status().message(), HasSubstr("Drop the Evaluator replica"));
}

TEST(ClusterSpec, ASparseClusterHasNoChiefTask) {
  // Listed (a hand-written spec): refused naming the field.
  for (const char* json :
       {R"({"cluster": {"ps": ["a:1"], "chief": {"0": "b:2"}}})",
        R"({"cluster": {"ps": ["a:1"], "worker": {"1": "c:3"}, "chief": ["b:2"]}})",
        R"({"cluster": {"ps": ["a:1"], "worker": {"1": "c:3"}, "master": ["b:2"]}})"}) {
    auto spec = ClusterSpec::FromJson(json, "spec.json");
    ASSERT_FALSE(spec.ok()) << json;
    EXPECT_THAT(spec.status().message(), HasSubstr("spec.json: cluster.")) << json;
    EXPECT_THAT(spec.status().message(), HasSubstr("its worker 0 is the chief")) << json;
  }
  // A chief task given a sparse cluster that lists the ps.
  auto spec = ClusterSpec::FromJson(
      R"({"cluster": {"ps": ["a:1"], "worker": {}}, "task": {"type": "chief", "index": 0}})", "TF_CONFIG");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("TF_CONFIG: task: chief:0 in a sparse"));
  // Or made one by the flags.
  TaskConfigSources sources;
  sources.tf_config = R"({"cluster": {"ps": ["a:1"], "worker": {"0": "b:2"}}})";
  sources.task_type = "chief";
  sources.task_index = 0;
  auto resolved = ResolveTaskConfig(sources);
  ASSERT_FALSE(resolved.ok());
  EXPECT_THAT(resolved.status().message(), HasSubstr("worker 0 is the chief"));
}

TEST(ClusterSpec, SparseClusterIsReadAsClusterButNotBesideIt) {
  // What operators before May 2023 wrote.
  const std::string legacy = absl::StrReplaceAll(kSparseWorker3, {{"\"cluster\"", "\"sparseCluster\""}});
  auto spec = ClusterSpec::FromJson(legacy, "TF_CONFIG");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto current = ClusterSpec::FromJson(kSparseWorker3, "TF_CONFIG");
  ASSERT_TRUE(current.ok());
  EXPECT_TRUE(spec->sparse());
  EXPECT_EQ(spec->WorkerRank(*spec->task()), 3);
  EXPECT_EQ(spec->JobId(), current->JobId());
  EXPECT_EQ(spec->ToTfConfig(*spec->task()), current->ToTfConfig(*current->task()));
  // Its errors name the key it came under.
  auto bad = ClusterSpec::FromJson(R"({"sparseCluster": {"worker": {"0": "b:2"}, "ps": [7]}})", "TF_CONFIG");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("TF_CONFIG: sparseCluster.ps[0]"));
  // Both keys: which one is meant cannot be told.
  auto both = ClusterSpec::FromJson(
      R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "sparseCluster": {"worker": {}, "ps": ["b:2"]}})",
      "TF_CONFIG");
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.status().message(), HasSubstr("both \"cluster\" and \"sparseCluster\""));
  auto neither = ClusterSpec::FromJson(R"({"task": {"type": "ps", "index": 0}})", "TF_CONFIG");
  ASSERT_FALSE(neither.ok());
  EXPECT_THAT(neither.status().message(), HasSubstr("TF_CONFIG: cluster: missing"));
}

TEST(ClusterSpec, SparseTaskOverridesFromFlagsWork) {
  TaskConfigSources sources;
  sources.tf_config = R"({"cluster": {"ps": ["job-ps-2.ns.svc:2222"], "worker": {}}})";
  sources.task_type = "ps";
  sources.task_index = 2;
  auto spec = ResolveTaskConfig(sources);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->Address(*spec->task()), "job-ps-2.ns.svc:2222");
}

TEST(ClusterSpec, RefusesBadSparseLists) {
  for (const auto& [json, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"cluster": {"ps": ["a:1"], "worker": {"x": "b:2"}}})", "task indices"},
           {R"({"cluster": {"ps": ["a:1"], "worker": {"-1": "b:2"}}})", "task indices"},
           {R"({"cluster": {"ps": ["a:1"], "worker": {"1": 7}}})", "host:port"},
           {R"({"cluster": {"ps": ["a:1"], "worker": {"1": "nohost"}}})", "no port"},
           {R"({"cluster": {"ps": ["a:1"], "worker": {"256": "b:2"}}})", "workers 0..255"},
           {R"({"cluster": {"ps": ["a:1"], "chief": {"1": "b:2"}}})", "lists no chief"},
           {R"({"cluster": {"ps": ["a:1"], "worker": {"1": "a:1"}}})", "duplicate address"},
           {R"({"cluster": {"ps": {}, "worker": {"0": "b:2"}}})", "at least one ps"},
       }) {
    auto spec = ClusterSpec::FromJson(json, "TF_CONFIG");
    EXPECT_FALSE(spec.ok()) << json;
    EXPECT_THAT(spec.status().message(), HasSubstr(want)) << json;
  }
}

}  // namespace
}  // namespace pstrain

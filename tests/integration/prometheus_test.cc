// Live metrics read by their real consumer: `pstrain launch --metrics` runs
// a 2 ps + 2 worker job, Debian's Prometheus server scrapes it with the
// scrape config the launcher wrote (RUN_DIR/prometheus.yml), and the test
// asks Prometheus's HTTP API for the ps's updates and the workers' step-time
// histogram, and sees them grow while the job trains.

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "common/file_util.h"
#include "common/free_ports.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/http_client.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using testing::RunningProcess;

// One series of an instant query's answer: its labels and value.
struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Asks Prometheus (HTTP API, /api/v1/query) for `query`; its vector.
absl::StatusOr<std::vector<Sample>> Query(int port, const std::string& query) {
  auto r = testing::HttpGet(port, "/api/v1/query?query=" + testing::UrlEncode(query));
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return absl::InternalError(absl::StrCat("HTTP ", r->status, " for ", query, ": ", r->body));
  }
  auto json = ParseJson(r->body, "prometheus answer");
  if (!json.ok()) return json.status();
  const auto& top = json->struct_value().fields();
  if (top.count("status") == 0 || top.at("status").string_value() != "success") {
    return absl::InternalError(absl::StrCat("query ", query, " failed: ", r->body));
  }
  std::vector<Sample> samples;
  for (const auto& series : top.at("data").struct_value().fields().at("result").list_value().values()) {
    const auto& f = series.struct_value().fields();
    Sample s;
    for (const auto& [name, value] : f.at("metric").struct_value().fields()) {
      s.labels[name] = value.string_value();
    }
    const auto& value = f.at("value").list_value().values();
    if (value.size() != 2 || !absl::SimpleAtod(value[1].string_value(), &s.value)) {
      return absl::DataLossError(absl::StrCat("malformed sample in ", r->body));
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

// A label's value ("" when the series has no such label).
std::string Label(const Sample& s, const std::string& name) {
  auto it = s.labels.find(name);
  return it == s.labels.end() ? "" : it->second;
}

double Sum(const std::vector<Sample>& samples) {
  double sum = 0;
  for (const Sample& s : samples) sum += s.value;
  return sum;
}

// Polls `query` until `done` says yes about its answer (or `timeout_s`).
std::vector<Sample> QueryUntil(int port, const std::string& query,
                               const std::function<bool(const std::vector<Sample>&)>& done,
                               double timeout_s, std::string* last_error) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  std::vector<Sample> last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto samples = Query(port, query);
    if (samples.ok()) {
      last = *samples;
      if (done(last)) return last;
    } else {
      *last_error = std::string(samples.status().message());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return last;
}

TEST(Prometheus, ScrapesALiveJobAndSeesUpdatesAndStepTimesGrow) {
  const std::string prometheus = testing::FindProgram("prometheus");
  ASSERT_FALSE(prometheus.empty()) << "prometheus not found (apt-get install prometheus; "
                                      "tools/setup.sh does)";
  const std::string dir = testing::MakeTempDir("prometheus");
  const std::string run_dir = dir + "/run";
  // Long enough to be watched; the test stops it once it has seen enough.
  auto job = RunningProcess::Start(
      testing::BinaryPath("pstrain"),
      {"launch", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_2ps_2w.json"),
       "--free_ports", "--metrics", "--run_dir=" + run_dir,
       "--data_dir=" + testing::SourcePath("data/mnist"), "--epochs=50", "--echo=none"});
  ASSERT_TRUE(job->WaitForOutput("prometheus --config.file=", 120)) << job->output();
  ASSERT_TRUE(FileExists(run_dir + "/prometheus.yml")) << job->output();

  auto port = FreeLoopbackPorts(1, {});
  ASSERT_TRUE(port.ok()) << port.status();
  const int web = (*port)[0];
  auto server = RunningProcess::Start(
      prometheus, {"--config.file=" + run_dir + "/prometheus.yml",
                   absl::StrCat("--web.listen-address=127.0.0.1:", web),
                   "--storage.tsdb.path=" + dir + "/tsdb", "--log.level=warn"});
  std::string error;

  // Every task is a target, and up.
  auto up = QueryUntil(web, "up{job=\"pstrain\"} == 1",
                       [](const std::vector<Sample>& s) { return s.size() == 4; }, 120, &error);
  ASSERT_EQ(up.size(), 4u) << "targets up: " << up.size() << "; last error: " << error
                           << "\nprometheus:\n" << server->output() << "\njob:\n" << job->output();
  std::map<std::string, int> up_by_type;
  // `up` has the target's labels: the config's `task`.
  for (const Sample& s : up) ++up_by_type[Label(s, "task").substr(0, Label(s, "task").find(':'))];
  EXPECT_EQ(up_by_type["ps"], 2);
  EXPECT_EQ(up_by_type["worker"], 2);

  // The ps's updates, one series per shard, growing.
  const std::string updates = "pstrain_updates_applied_total{job=\"pstrain\"}";
  auto first = QueryUntil(
      web, updates, [](const std::vector<Sample>& s) { return s.size() == 2 && Sum(s) > 0; }, 120,
      &error);
  ASSERT_EQ(first.size(), 2u) << error << "\n" << job->output();
  for (const Sample& s : first) {
    EXPECT_EQ(Label(s, "task_type"), "ps");
    EXPECT_THAT(Label(s, "task_index"), ::testing::AnyOf("0", "1"));
    EXPECT_FALSE(Label(s, "job_id").empty());
  }
  const double before = Sum(first);
  // What a reader of the closing note sees: the queries and their values.
  auto show = [](const std::string& query, const std::vector<Sample>& samples) {
    std::string text;
    for (const Sample& s : samples) {
      absl::StrAppend(&text, "\n    {task_type=", Label(s, "task_type"), ",task_index=",
                      Label(s, "task_index"), Label(s, "phase").empty() ? "" : ",phase=",
                      Label(s, "phase"), "} ", s.value);
    }
    std::printf("prometheus: %s%s\n", query.c_str(), text.c_str());
  };
  show(updates, first);
  auto later = QueryUntil(
      web, updates, [&](const std::vector<Sample>& s) { return Sum(s) > before; }, 120, &error);
  EXPECT_GT(Sum(later), before) << error;
  show(updates + " (later)", later);

  // The workers' step time by phase: a histogram whose count grows.
  const std::string steps = "sum by (phase) (pstrain_step_seconds_count)";
  auto phases = QueryUntil(
      web, steps, [](const std::vector<Sample>& s) { return s.size() == 3 && Sum(s) > 0; }, 120,
      &error);
  ASSERT_EQ(phases.size(), 3u) << error;
  show(steps, phases);
  std::map<std::string, double> count_by_phase;
  for (const Sample& s : phases) count_by_phase[Label(s, "phase")] = s.value;
  EXPECT_GT(count_by_phase["compute"], 0);
  EXPECT_EQ(count_by_phase["compute"], count_by_phase["communication"]);
  EXPECT_EQ(count_by_phase["compute"], count_by_phase["waiting"]);
  auto grown = QueryUntil(
      web, "sum(pstrain_step_seconds_count{phase=\"compute\"})",
      [&](const std::vector<Sample>& s) { return Sum(s) > count_by_phase["compute"]; }, 120,
      &error);
  EXPECT_GT(Sum(grown), count_by_phase["compute"]) << error;
  show("sum(pstrain_step_seconds_count{phase=\"compute\"}) (later)", grown);
  // Its buckets answer a quantile: a median compute time, in seconds.
  auto median = QueryUntil(
      web,
      "histogram_quantile(0.5, sum by (le) (rate(pstrain_step_seconds_bucket{phase=\"compute\"}[5s])))",
      [](const std::vector<Sample>& s) { return s.size() == 1 && s[0].value > 0; }, 60, &error);
  ASSERT_EQ(median.size(), 1u) << error;
  show("median compute seconds, histogram_quantile(0.5, ...[5s])", median);
  EXPECT_GT(median[0].value, 0.0);
  EXPECT_LT(median[0].value, 10.0);
  // And the chief's images/s.
  auto rate = QueryUntil(
      web, "pstrain_images_per_second{task_index=\"0\"}",
      [](const std::vector<Sample>& s) { return s.size() == 1 && s[0].value > 0; }, 60, &error);
  ASSERT_EQ(rate.size(), 1u) << error;
  show("pstrain_images_per_second{task_index=\"0\"}", rate);

  // Stop the job as a user would (Ctrl-C): it stops, and says so.
  job->Signal(SIGINT);
  auto code = job->Wait(60);
  ASSERT_TRUE(code.ok()) << code.status();
  server->Signal(SIGTERM);
  ASSERT_TRUE(server->Wait(60).ok());
}

}  // namespace
}  // namespace pstrain

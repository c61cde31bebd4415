// The worker's Prometheus families through MetricsRecorder: a step's time
// split into compute, communication and waiting; counters that follow the
// PsClient's byte totals (also across a restarted client); the chief's test
// accuracy. Checked on the text a scrape gets; also without a run_dir.

#include "worker/metrics_recorder.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/free_ports.h"
#include "common/metrics_server.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::unique_ptr<MetricsServer> Server() {
  auto port = FreeLoopbackPorts(1, {});
  EXPECT_TRUE(port.ok()) << port.status();
  auto s = MetricsServer::Start({"127.0.0.1", (*port)[0]},
                                {{"job_id", "1f"}, {"task_type", "chief"}, {"task_index", "0"}});
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

StepRecord Step(int64_t step, double compute_ms, double comm_ms, double wait_ms, int64_t sent,
                int64_t received) {
  StepRecord r;
  r.step = step;
  r.epoch = 1;
  r.loss = 0.25;
  r.examples = 64;
  r.staleness = 2;
  r.compute_ms = compute_ms;
  r.comm_ms = comm_ms;
  r.wait_ms = wait_ms;
  r.sent_bytes = sent;
  r.received_bytes = received;
  return r;
}

void ExpectLine(const std::string& text, const std::string& line) {
  EXPECT_TRUE(absl::StrContains(text, line + "\n")) << "missing: " << line << "\n" << text;
}

// The value of the sample `name_and_labels` in the exposition text.
double Value(const std::string& text, const std::string& name_and_labels) {
  const size_t at = text.find(name_and_labels + " ");
  EXPECT_NE(at, std::string::npos) << "missing: " << name_and_labels << "\n" << text;
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name_and_labels.size() + 1));
}

TEST(MetricsRecorderPrometheusTest, StepsSplitIntoComputeCommunicationAndWaiting) {
  auto server = Server();
  MetricsOptions o;  // no run_dir: Prometheus only
  o.chief = true;
  o.learning_rate = 0.05;
  o.server = server.get();
  auto recorder = MetricsRecorder::Open(o);
  ASSERT_TRUE(recorder.ok()) << recorder.status();
  ASSERT_TRUE((*recorder)->RecordStep(Step(0, 10, 4, 3, 1000, 2000)).ok());
  // The wait can never exceed the push/pull it was part of.
  ASSERT_TRUE((*recorder)->RecordStep(Step(1, 20, 6, 9, 2500, 4000)).ok());
  // A restarted PsClient counts from 0 again: nothing is subtracted.
  ASSERT_TRUE((*recorder)->RecordStep(Step(2, 10, 2, 0, 300, 500)).ok());
  ASSERT_TRUE((*recorder)->RecordEval({3, 1, 1.5, 0.125, 0.9375, false}).ok());
  const std::string text = server->Scrape();
  const std::string id = "job_id=\"1f\",task_index=\"0\",task_type=\"chief\"";
  ExpectLine(text, "# TYPE pstrain_step_seconds histogram");
  ExpectLine(text, "pstrain_step_seconds_count{" + id + ",phase=\"compute\"} 3");
  EXPECT_NEAR(Value(text, "pstrain_step_seconds_sum{" + id + ",phase=\"compute\"}"), 0.040, 1e-12);
  // waiting: 3 + 6 (capped at the push/pull's 6) + 0 ms; communication: the rest, 1 + 0 + 2.
  EXPECT_NEAR(Value(text, "pstrain_step_seconds_sum{" + id + ",phase=\"waiting\"}"), 0.009, 1e-12);
  EXPECT_NEAR(Value(text, "pstrain_step_seconds_sum{" + id + ",phase=\"communication\"}"), 0.003,
              1e-12);
  ExpectLine(text, "pstrain_step_seconds_bucket{" + id + ",phase=\"compute\",le=\"0.01\"} 2");
  ExpectLine(text, "pstrain_steps_total{" + id + "} 3");
  ExpectLine(text, "pstrain_images_total{" + id + "} 192");
  ExpectLine(text, "pstrain_sent_bytes_total{" + id + "} 2800");
  ExpectLine(text, "pstrain_received_bytes_total{" + id + "} 4500");
  ExpectLine(text, "pstrain_push_staleness_bucket{" + id + ",le=\"2\"} 3");
  ExpectLine(text, "pstrain_push_staleness_bucket{" + id + ",le=\"1\"} 0");
  ExpectLine(text, "pstrain_training_loss{" + id + "} 0.25");
  ExpectLine(text, "pstrain_global_step{" + id + "} 2");
  ExpectLine(text, "pstrain_learning_rate{" + id + "} 0.05");
  ExpectLine(text, "pstrain_test_accuracy{" + id + "} 0.9375");
  ExpectLine(text, "pstrain_test_loss{" + id + "} 0.125");
  ExpectLine(text, "pstrain_evaluations_total{" + id + "} 1");
}

TEST(MetricsRecorderPrometheusTest, AWorkerThatIsNotTheChiefHasNoTestFamilies) {
  auto server = Server();
  MetricsOptions o;
  o.server = server.get();
  auto recorder = MetricsRecorder::Open(o);
  ASSERT_TRUE(recorder.ok()) << recorder.status();
  ASSERT_TRUE((*recorder)->RecordStep(Step(0, 10, 4, 3, 1000, 2000)).ok());
  const std::string text = server->Scrape();
  EXPECT_TRUE(absl::StrContains(text, "pstrain_steps_total")) << text;
  EXPECT_FALSE(absl::StrContains(text, "pstrain_test_accuracy")) << text;
}

}  // namespace
}  // namespace pstrain

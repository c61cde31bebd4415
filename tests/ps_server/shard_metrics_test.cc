// A ps's ShardStats as Prometheus families: names, labels, and the
// staleness histogram's buckets (cumulative, the last one +Inf), checked on
// the text a scrape gets.

#include "ps_server/shard_metrics.h"

#include <sstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace pstrain {
namespace {

std::string Text(const ShardMetrics& m) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, m.Collect());
  return out.str();
}

TEST(ShardMetricsTest, ServesTheLatestPublishedStatsWithTheTasksIdentity) {
  ShardMetrics m({{"job_id", "ab12"}, {"task_type", "ps"}, {"task_index", "1"}});
  proto::ShardStats s;
  s.set_updates_applied(7);
  s.set_gradients_received(15);
  s.set_stale_gradients_dropped(2);
  s.set_refused_updates(1);
  s.set_unordered_sums(4);
  s.set_bytes_received(1000);
  s.set_bytes_sent(2000);
  s.set_version(7);
  s.set_initialized(true);
  s.set_range_begin(10);
  s.set_range_end(110);
  s.add_pushes_by_rank(8);
  s.add_pushes_by_rank(7);
  // Staleness 0: 5, 1: 3, ">= 2": 2; sum 3 + 2*2 + 1 (one of them was 3).
  s.add_staleness_histogram(5);
  s.add_staleness_histogram(3);
  s.add_staleness_histogram(2);
  s.set_staleness_sum(8);
  s.add_workers()->set_rank(0);  // final reports: not metrics
  m.Publish(s);
  const std::string text = Text(m);
  const std::string id = "job_id=\"ab12\",task_index=\"1\",task_type=\"ps\"";
  for (const std::string& line : std::vector<std::string>{
           "# TYPE pstrain_updates_applied_total counter",
           "pstrain_updates_applied_total{" + id + "} 7",
           "pstrain_gradients_received_total{" + id + "} 15",
           "pstrain_gradients_dropped_total{" + id + ",reason=\"stale\"} 2",
           "pstrain_gradients_dropped_total{" + id + ",reason=\"refused\"} 1",
           "pstrain_gradients_dropped_total{" + id + ",reason=\"late\"} 0",
           "pstrain_worker_pushes_total{" + id + ",rank=\"1\"} 7",
           "pstrain_unordered_sums_total{" + id + "} 4",
           "pstrain_received_bytes_total{" + id + "} 1000",
           "pstrain_sent_bytes_total{" + id + "} 2000",
           "# TYPE pstrain_shard_version gauge",
           "pstrain_shard_version{" + id + "} 7",
           "pstrain_shard_initialized{" + id + "} 1",
           "pstrain_shard_parameters{" + id + "} 100",
           "# TYPE pstrain_staleness histogram",
           "pstrain_staleness_count{" + id + "} 10",
           "pstrain_staleness_sum{" + id + "} 8",
           "pstrain_staleness_bucket{" + id + ",le=\"0\"} 5",
           "pstrain_staleness_bucket{" + id + ",le=\"1\"} 8",
           "pstrain_staleness_bucket{" + id + ",le=\"+Inf\"} 10",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line + "\n")) << "missing: " << line << "\n" << text;
  }
  EXPECT_FALSE(absl::StrContains(text, "le=\"2\"")) << text;  // the last bucket is ">= 2"
  // Every family is pstrain_ and counters end in _total.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (absl::StartsWith(line, "# TYPE ")) {
      EXPECT_TRUE(absl::StartsWith(line, "# TYPE pstrain_")) << line;
      if (absl::EndsWith(line, " counter")) {
        EXPECT_TRUE(absl::StrContains(line, "_total counter")) << line;
      }
    }
  }
  // A later publish replaces it.
  s.set_updates_applied(9);
  m.Publish(s);
  EXPECT_TRUE(absl::StrContains(Text(m), "pstrain_updates_applied_total{" + id + "} 9\n"));
}

TEST(ShardMetricsTest, BeforeAnyGradientTheHistogramIsEmptyButWellFormed) {
  ShardMetrics m({});
  m.Publish(proto::ShardStats());
  const std::string text = Text(m);
  EXPECT_TRUE(absl::StrContains(text, "pstrain_staleness_bucket{le=\"+Inf\"} 0\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "pstrain_staleness_count 0\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "pstrain_shard_initialized 0\n")) << text;
}

TEST(ShardMetricsTest, EachEmbeddingTableIsASampleLabelledByItsName) {
  ShardMetrics m({{"task_index", "0"}, {"task_type", "ps"}});
  proto::ShardStats s;
  for (const char* name : {"users", "items"}) {
    proto::EmbeddingTableStats* t = s.add_tables();
    t->set_name(name);
    t->set_rows(name[0] == 'u' ? 40 : 7);
    t->set_rows_evicted_cap(name[0] == 'u' ? 3 : 0);
    t->set_waiting_reset(name[0] == 'u' ? 1 : 0);
  }
  m.Publish(s);
  const std::string text = Text(m);
  for (const std::string& line : std::vector<std::string>{
           "# TYPE pstrain_embedding_rows gauge",
           "pstrain_embedding_rows{task_index=\"0\",task_type=\"ps\",table=\"users\"} 40",
           "pstrain_embedding_rows{task_index=\"0\",task_type=\"ps\",table=\"items\"} 7",
           "# TYPE pstrain_embedding_rows_evicted_cap_total counter",
           "pstrain_embedding_rows_evicted_cap_total{task_index=\"0\",task_type=\"ps\",table="
           "\"users\"} 3",
           "pstrain_embedding_waiting_reset_total{task_index=\"0\",task_type=\"ps\",table="
           "\"users\"} 1"}) {
    EXPECT_TRUE(absl::StrContains(text, line)) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace pstrain

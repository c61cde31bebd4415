#include "worker/run_summary.h"

#include <algorithm>
#include <limits>

namespace pstrain {
namespace {

double AsDouble(int64_t v) { return static_cast<double>(v); }

void FillThroughput(const proto::ShardStats& shard0, double eval_seconds,
                    proto::RunSummary* summary) {
  int64_t first = std::numeric_limits<int64_t>::max();
  int64_t last = 0;
  double images = 0;
  for (const proto::WorkerReport& w : shard0.workers()) {
    // A worker that took no step of its own (it joined, or came back,
    // after the job's last step: its steps are the job's) has no window.
    if (w.steps() == 0 || w.first_step_unix_us() <= 0) continue;
    first = std::min(first, w.first_step_unix_us());
    last = std::max(last, w.last_step_unix_us());
    images += static_cast<double>(w.images());
  }
  summary->set_images_trained(images);
  if (last <= first) return;
  const double seconds = std::max(1e-6, (last - first) * 1e-6 - eval_seconds);
  summary->set_train_seconds(seconds);
  summary->set_eval_seconds(eval_seconds);
  summary->set_train_images_per_sec(images / seconds);
}

void FillEncodingCounts(const std::vector<proto::ShardStats>& shards, proto::RunSummary* summary) {
  std::vector<int32_t> counts;
  for (const proto::ShardStats& s : shards) {
    if (counts.size() < static_cast<size_t>(s.pushes_by_encoding_size())) {
      counts.resize(s.pushes_by_encoding_size(), 0);
    }
    for (int i = 0; i < s.pushes_by_encoding_size(); ++i) {
      counts[i] += static_cast<int32_t>(s.pushes_by_encoding(i));
    }
  }
  for (int32_t c : counts) summary->add_pushes_by_encoding(c);
}

void FillCounters(const std::vector<proto::ShardStats>& shards, proto::RunSummary* summary) {
  std::vector<int64_t> histogram;
  double staleness_sum = 0;
  double applied = 0;
  for (const proto::ShardStats& s : shards) {
    summary->set_updates_applied(std::max<int32_t>(summary->updates_applied(), s.updates_applied()));
    summary->set_gradients_received(
        std::max<int32_t>(summary->gradients_received(), s.gradients_received()));
    summary->set_stale_gradients_dropped(
        std::max<int32_t>(summary->stale_gradients_dropped(), s.stale_gradients_dropped()));
    summary->set_late_gradients_dropped(
        std::max<int32_t>(summary->late_gradients_dropped(), s.late_gradients_dropped()));
    summary->set_max_staleness(std::max<int32_t>(summary->max_staleness(), s.max_staleness()));
    summary->set_malformed_requests(summary->malformed_requests() + s.malformed_requests());
    summary->set_rejected_requests(summary->rejected_requests() + s.rejected_requests());
    summary->set_handshakes_refused(summary->handshakes_refused() + s.handshakes_refused());
    summary->set_unauthorized_requests(summary->unauthorized_requests() + s.unauthorized_requests());
    summary->set_duplicate_requests(summary->duplicate_requests() + s.duplicate_requests());
    summary->set_nonfinite_gradients_dropped(summary->nonfinite_gradients_dropped() +
                                             s.nonfinite_gradients_dropped());
    summary->set_refused_updates(summary->refused_updates() + s.refused_updates());
    summary->set_oversized_requests(summary->oversized_requests() + s.oversized_requests());
    summary->set_unordered_sums(summary->unordered_sums() +
                                static_cast<int32_t>(s.unordered_sums()));
    summary->set_retired_session_requests(summary->retired_session_requests() +
                                          static_cast<int32_t>(s.retired_session_requests()));
    summary->set_partial_messages_dropped(summary->partial_messages_dropped() +
                                          static_cast<int32_t>(s.partial_messages_dropped()));
    staleness_sum += s.staleness_sum();
    applied += static_cast<double>(s.gradients_applied());
    if (histogram.size() < static_cast<size_t>(s.staleness_histogram_size())) {
      histogram.resize(s.staleness_histogram_size(), 0);
    }
    for (int i = 0; i < s.staleness_histogram_size(); ++i) histogram[i] += s.staleness_histogram(i);
    proto::ShardSummary* out = summary->add_shards();
    out->set_shard(s.shard_index());
    out->set_range_begin(static_cast<int32_t>(s.range_begin()));
    out->set_range_end(static_cast<int32_t>(s.range_end()));
    out->set_version(static_cast<int32_t>(s.version()));
    out->set_updates_applied(static_cast<int32_t>(s.updates_applied()));
    out->set_gradients_received(static_cast<int32_t>(s.gradients_received()));
    out->set_gradients_applied(static_cast<int32_t>(s.gradients_applied()));
    out->set_stale_gradients_dropped(static_cast<int32_t>(s.stale_gradients_dropped()));
    out->set_late_gradients_dropped(static_cast<int32_t>(s.late_gradients_dropped()));
    out->set_malformed_requests(static_cast<int32_t>(s.malformed_requests()));
    out->set_rejected_requests(static_cast<int32_t>(s.rejected_requests()));
    out->set_pulls_parked(static_cast<int32_t>(s.pulls_parked()));
    out->set_ssp_waits(static_cast<int32_t>(s.ssp_waits()));
    out->set_bytes_received(static_cast<double>(s.bytes_received()));
    out->set_bytes_sent(static_cast<double>(s.bytes_sent()));
    out->set_unordered_sums(static_cast<int32_t>(s.unordered_sums()));
  }
  summary->set_mean_staleness(applied > 0 ? staleness_sum / applied : 0.0);
  summary->set_p99_staleness(HistogramQuantile(histogram, 0.99));
  for (int64_t c : histogram) summary->add_staleness_histogram(static_cast<int32_t>(c));
}

void FillEmbeddingTables(const std::vector<proto::ShardStats>& shards,
                         proto::RunSummary* summary) {
  for (const proto::ShardStats& s : shards) {
    for (int t = 0; t < s.tables_size(); ++t) {
      while (summary->embedding_tables_size() <= t) summary->add_embedding_tables();
      const proto::EmbeddingTableStats& in = s.tables(t);
      proto::EmbeddingTableSummary& out = *summary->mutable_embedding_tables(t);
      out.set_name(in.name());
      out.set_rows(out.rows() + AsDouble(in.rows()));
      out.set_row_bytes(out.row_bytes() + AsDouble(in.row_bytes()));
      out.set_memory_bytes(out.memory_bytes() + AsDouble(in.memory_bytes()));
      out.set_rows_admitted(out.rows_admitted() + AsDouble(in.rows_admitted()));
      out.set_ids_waiting(out.ids_waiting() + AsDouble(in.ids_waiting()));
      out.set_gradients_unadmitted(out.gradients_unadmitted() + AsDouble(in.gradients_unadmitted()));
      out.set_rows_evicted_idle(out.rows_evicted_idle() + AsDouble(in.rows_evicted_idle()));
      out.set_rows_evicted_cap(out.rows_evicted_cap() + AsDouble(in.rows_evicted_cap()));
      out.set_rows_evicted_memory(out.rows_evicted_memory() + AsDouble(in.rows_evicted_memory()));
      out.set_waiting_reset(out.waiting_reset() + AsDouble(in.waiting_reset()));
      out.set_row_updates(out.row_updates() + AsDouble(in.row_updates()));
      out.set_rows_pulled(out.rows_pulled() + AsDouble(in.rows_pulled()));
      out.set_refused_row_updates(out.refused_row_updates() + AsDouble(in.refused_row_updates()));
      out.set_updates(std::max(out.updates(), AsDouble(in.updates())));
    }
  }
}

}  // namespace

double SecondsToAccuracy(const std::vector<EvalPoint>& evals, double target) {
  for (const EvalPoint& e : evals) {
    if (e.accuracy >= target) return e.train_seconds;
  }
  return -1.0;
}

int HistogramQuantile(const std::vector<int64_t>& histogram, double p) {
  int64_t total = 0;
  for (int64_t c : histogram) total += c;
  if (total == 0) return 0;
  const double want = p * static_cast<double>(total);
  int64_t seen = 0;
  for (size_t i = 0; i < histogram.size(); ++i) {
    seen += histogram[i];
    if (static_cast<double>(seen) >= want) return static_cast<int>(i);
  }
  return static_cast<int>(histogram.size()) - 1;
}

void FillSummaryResults(const std::vector<EvalPoint>& evals,
                        const std::vector<proto::ShardStats>& shards, double eval_seconds,
                        proto::RunSummary* summary) {
  if (!evals.empty()) {
    summary->set_final_test_accuracy(evals.back().accuracy);
    summary->set_final_test_loss(evals.back().loss);
  }
  summary->set_seconds_to_95(SecondsToAccuracy(evals, 0.95));
  summary->set_seconds_to_97(SecondsToAccuracy(evals, 0.97));
  summary->set_seconds_to_98(SecondsToAccuracy(evals, 0.98));
  summary->set_seconds_to_99(SecondsToAccuracy(evals, 0.99));
  if (!shards.empty()) FillThroughput(shards.front(), eval_seconds, summary);
  FillCounters(shards, summary);
  FillEmbeddingTables(shards, summary);
  FillEncodingCounts(shards, summary);
}

}  // namespace pstrain

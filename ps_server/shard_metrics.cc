#include "ps_server/shard_metrics.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Builds families with the task's identity on every sample.
class Families {
 public:
  explicit Families(const std::map<std::string, std::string>& identity) {
    for (const auto& [name, value] : identity) identity_.push_back({name, value});
  }

  void Counter(const std::string& name, const std::string& help, double value) {
    ClientMetric m = Sample({});
    m.counter.value = value;
    Add(name, help, MetricType::Counter, std::move(m));
  }
  // One sample of a counter family whose samples differ in `label`.
  void LabeledCounter(const std::string& name, const std::string& help, const std::string& label,
                      const std::string& label_value, double value) {
    ClientMetric m = Sample({{label, label_value}});
    m.counter.value = value;
    Add(name, help, MetricType::Counter, std::move(m));
  }
  // One sample of a gauge family whose samples differ in `label`.
  void LabeledGauge(const std::string& name, const std::string& help, const std::string& label,
                    const std::string& label_value, double value) {
    ClientMetric m = Sample({{label, label_value}});
    m.gauge.value = value;
    Add(name, help, MetricType::Gauge, std::move(m));
  }
  void Gauge(const std::string& name, const std::string& help, double value) {
    ClientMetric m = Sample({});
    m.gauge.value = value;
    Add(name, help, MetricType::Gauge, std::move(m));
  }
  void Histogram(const std::string& name, const std::string& help, ClientMetric::Histogram h) {
    ClientMetric m = Sample({});
    m.histogram = std::move(h);
    Add(name, help, MetricType::Histogram, std::move(m));
  }

  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  ClientMetric Sample(std::vector<ClientMetric::Label> extra) const {
    ClientMetric m;
    m.label = identity_;
    for (auto& l : extra) m.label.push_back(std::move(l));
    return m;
  }
  void Add(const std::string& name, const std::string& help, MetricType type, ClientMetric m) {
    if (families_.empty() || families_.back().name != name) {
      families_.push_back({name, help, type, {}});
    }
    families_.back().metric.push_back(std::move(m));
  }

  std::vector<ClientMetric::Label> identity_;
  std::vector<MetricFamily> families_;
};

double AsDouble(int64_t v) { return static_cast<double>(v); }

// What became of the gradients pushed to the shard.
void AddGradientFamilies(const proto::ShardStats& s, Families& f) {
  f.Counter("pstrain_updates_applied_total", "Optimizer steps this shard has taken",
            AsDouble(s.updates_applied()));
  f.Counter("pstrain_gradients_received_total", "Gradients pushed to this shard",
            AsDouble(s.gradients_received()));
  f.Counter("pstrain_gradients_applied_total", "Gradients that went into an update",
            AsDouble(s.gradients_applied()));
  const std::string dropped_help = "Gradients received but not applied, by why";
  f.LabeledCounter("pstrain_gradients_dropped_total", dropped_help, "reason", "stale",
                   AsDouble(s.stale_gradients_dropped()));
  f.LabeledCounter("pstrain_gradients_dropped_total", dropped_help, "reason", "late",
                   AsDouble(s.late_gradients_dropped()));
  f.LabeledCounter("pstrain_gradients_dropped_total", dropped_help, "reason", "nonfinite",
                   AsDouble(s.nonfinite_gradients_dropped()));
  f.LabeledCounter("pstrain_gradients_dropped_total", dropped_help, "reason", "refused",
                   AsDouble(s.refused_updates()));
  f.Counter("pstrain_unordered_sums_total",
            "Sync gradients summed as they arrived, not in rank order (the run repeats only to "
            "rounding)",
            AsDouble(s.unordered_sums()));
  for (int rank = 0; rank < s.pushes_by_rank_size(); ++rank) {
    f.LabeledCounter("pstrain_worker_pushes_total", "Gradients received from each worker rank",
                     "rank", absl::StrCat(rank), AsDouble(s.pushes_by_rank(rank)));
  }
}

// The requests the shard served or refused, and its peers.
void AddRequestFamilies(const proto::ShardStats& s, Families& f) {
  f.Counter("pstrain_pulls_served_total", "Parameter replies sent", AsDouble(s.pulls_served()));
  f.Counter("pstrain_pulls_parked_total",
            "Pulls held back until a sync version or the SSP bound was reached",
            AsDouble(s.pulls_parked()));
  f.Counter("pstrain_ssp_waits_total", "Pulls held back by the staleness bound (SSP)",
            AsDouble(s.ssp_waits()));
  f.Counter("pstrain_received_bytes_total", "Bytes of requests received (all frames)",
            AsDouble(s.bytes_received()));
  f.Counter("pstrain_sent_bytes_total", "Bytes of replies sent (all frames)", AsDouble(s.bytes_sent()));
  f.Counter("pstrain_malformed_requests_total", "Messages that could not be parsed",
            AsDouble(s.malformed_requests()));
  f.Counter("pstrain_refused_requests_total", "Parsed requests answered with an error",
            AsDouble(s.rejected_requests()));
  f.Counter("pstrain_unauthorized_requests_total",
            "Requests of an authenticated peer whose role may not make them",
            AsDouble(s.unauthorized_requests()));
  f.Counter("pstrain_oversized_requests_total", "Requests larger than the shard plan allows",
            AsDouble(s.oversized_requests()));
  f.Counter("pstrain_duplicate_requests_total", "Repeated requests answered again, not applied",
            AsDouble(s.duplicate_requests()));
  f.Counter("pstrain_retired_session_requests_total",
            "Requests of a client its rank had replaced with a newer one, refused",
            AsDouble(s.retired_session_requests()));
  f.Counter("pstrain_partial_messages_dropped_total",
            "Messages in pieces given up before their last piece", AsDouble(s.partial_messages_dropped()));
  f.Counter("pstrain_handshakes_refused_total", "Peers refused by CURVE/ZAP before any request",
            AsDouble(s.handshakes_refused()));
  f.Counter("pstrain_workers_declared_dead_total",
            "Worker ranks declared dead after --peer_timeout_s of silence",
            AsDouble(s.workers_declared_dead()));
  f.Counter("pstrain_workers_rejoined_total", "Worker ranks that came back",
            AsDouble(s.workers_rejoined()));
  f.Counter("pstrain_rollbacks_total", "Rollbacks of this live shard to a checkpoint",
            AsDouble(s.rollbacks()));
  f.Counter("pstrain_replications_total", "States of this shard its standby acknowledged",
            AsDouble(s.replications()));
  f.Counter("pstrain_replication_bytes_total",
            "Bytes of this shard's states (and tables) its standby acknowledged",
            AsDouble(s.replication_bytes()));
  f.Counter("pstrain_unreplicated_releases_total",
            "Replies released without the standby's acknowledgement", AsDouble(s.unreplicated_releases()));
}

// The shard's state: version, recoveries, its replica.
void AddStateFamilies(const proto::ShardStats& s, Families& f) {
  f.Gauge("pstrain_shard_version", "Version of this shard's parameters", AsDouble(s.version()));
  f.Gauge("pstrain_shard_generation", "Recoveries the chief has made of this shard",
          AsDouble(s.generation()));
  f.Gauge("pstrain_shard_initialized", "1 once INIT or RESTORE gave this shard its parameters",
          s.initialized() ? 1 : 0);
  f.Gauge("pstrain_shard_parameters", "Parameters this shard holds",
          AsDouble(static_cast<int64_t>(s.range_end() - s.range_begin())));
  f.Gauge("pstrain_max_staleness", "Largest staleness of an applied gradient", AsDouble(s.max_staleness()));
  f.Gauge("pstrain_replica_version", "Version of the standby replica this ps holds (-1: none)",
          AsDouble(s.replica_version()));
}

// Each embedding table's rows on this ps, one sample per table (label
// "table": its name).
void AddEmbeddingFamilies(const proto::ShardStats& s, Families& f) {
  using Field = int64_t (proto::EmbeddingTableStats::*)() const;
  struct Family {
    const char* name;
    const char* help;
    Field field;
    bool counter;
  };
  static const Family kFamilies[] = {
      {"pstrain_embedding_rows", "Rows of the embedding table held on this ps",
       &proto::EmbeddingTableStats::rows, false},
      {"pstrain_embedding_memory_bytes",
       "Bytes the table's rows take on this ps: values, optimizer state, index",
       &proto::EmbeddingTableStats::memory_bytes, false},
      {"pstrain_embedding_ids_waiting", "Ids touched but not admitted yet",
       &proto::EmbeddingTableStats::ids_waiting, false},
      {"pstrain_embedding_rows_admitted_total", "Rows made (an id admitted, or first updated)",
       &proto::EmbeddingTableStats::rows_admitted, true},
      {"pstrain_embedding_gradients_unadmitted_total",
       "Row gradients dropped because their id had no row yet",
       &proto::EmbeddingTableStats::gradients_unadmitted, true},
      {"pstrain_embedding_rows_evicted_idle_total",
       "Rows dropped after evict_after_steps of the ps's updates untouched",
       &proto::EmbeddingTableStats::rows_evicted_idle, true},
      {"pstrain_embedding_rows_evicted_cap_total",
       "Rows dropped, least recently updated, to stay under max_rows_per_ps",
       &proto::EmbeddingTableStats::rows_evicted_cap, true},
      {"pstrain_embedding_rows_evicted_memory_total",
       "Rows dropped, least recently updated of the ps's tables, to stay under "
       "--embedding_memory_mb",
       &proto::EmbeddingTableStats::rows_evicted_memory, true},
      {"pstrain_embedding_waiting_reset_total",
       "Times the ids waiting for admission (past their bound) were forgotten, touch counts "
       "starting again",
       &proto::EmbeddingTableStats::waiting_reset, true},
      {"pstrain_embedding_row_updates_total", "Row updates applied",
       &proto::EmbeddingTableStats::row_updates, true},
      {"pstrain_embedding_rows_pulled_total", "Rows sent to workers",
       &proto::EmbeddingTableStats::rows_pulled, true},
      {"pstrain_embedding_refused_row_updates_total",
       "Row updates not applied: they would have made the row non-finite in f32",
       &proto::EmbeddingTableStats::refused_row_updates, true},
  };
  for (const Family& family : kFamilies) {
    for (const proto::EmbeddingTableStats& t : s.tables()) {
      const double value = AsDouble((t.*family.field)());
      if (family.counter) {
        f.LabeledCounter(family.name, family.help, "table", t.name(), value);
      } else {
        f.LabeledGauge(family.name, family.help, "table", t.name(), value);
      }
    }
  }
}

// The staleness of applied gradients, as a Prometheus histogram.
void AddStalenessHistogram(const proto::ShardStats& s, Families& f) {
  ClientMetric::Histogram h;
  uint64_t cumulative = 0;
  const int n = s.staleness_histogram_size();
  for (int i = 0; i < n; ++i) {
    cumulative += static_cast<uint64_t>(s.staleness_histogram(i));
    // The last bucket of ShardStats counts "that much or more": +Inf.
    if (i + 1 < n) h.bucket.push_back({cumulative, static_cast<double>(i)});
  }
  h.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
  h.sample_count = cumulative;
  h.sample_sum = s.staleness_sum();
  f.Histogram("pstrain_staleness",
              "Staleness of applied gradients: versions between the one a gradient was computed "
              "on and the one it was applied to",
              std::move(h));
}

}  // namespace

ShardMetrics::ShardMetrics(std::map<std::string, std::string> identity)
    : identity_(std::move(identity)) {}

void ShardMetrics::Publish(const proto::ShardStats& stats) {
  absl::MutexLock lock(&mu_);
  stats_ = stats;
  stats_.clear_workers();  // the final reports: not metrics
}

std::vector<MetricFamily> ShardMetrics::Collect() const {
  proto::ShardStats s;
  {
    absl::MutexLock lock(&mu_);
    s = stats_;
  }
  Families f(identity_);
  AddGradientFamilies(s, f);
  AddRequestFamilies(s, f);
  AddStateFamilies(s, f);
  AddStalenessHistogram(s, f);
  AddEmbeddingFamilies(s, f);
  return f.Take();
}

}  // namespace pstrain

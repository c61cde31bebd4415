#pragma once

// A ps's live metrics for Prometheus: its ShardStats (the same counters
// STATS answers) as Prometheus families, with the task's identity labels.
//
// The event loop owns the counters (RequestHandler::Stats()); a scrape runs
// on the exporter's thread. So the loop publishes a copy now and then
// (Publish, a few times a second) and a scrape reads the latest copy: never
// older than the loop's publish interval, and the loop never waits on HTTP.
//
// Families (all prefixed pstrain_; units and _total as Prometheus's
// conventions ask):
//   counters  updates_applied_total, gradients_received_total,
//             gradients_applied_total,
//             gradients_dropped_total{reason=stale|late|nonfinite|refused},
//             worker_pushes_total{rank}, pulls_served_total,
//             pulls_parked_total, ssp_waits_total, received_bytes_total,
//             sent_bytes_total, malformed_requests_total,
//             refused_requests_total, unauthorized_requests_total,
//             oversized_requests_total, duplicate_requests_total,
//             retired_session_requests_total,
//             partial_messages_dropped_total, handshakes_refused_total,
//             workers_declared_dead_total, workers_rejoined_total, rollbacks_total,
//             replications_total, unreplicated_releases_total
//   gauges    shard_version, shard_generation, shard_initialized,
//             shard_parameters, max_staleness, replica_version
//   histogram staleness (of applied gradients; buckets 0, 1, ..., the
//             ShardStats histogram's last bucket is +Inf)
//
// Thread safety: Publish and Collect may run on different threads.

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "proto/pstrain.pb.h"

namespace pstrain {

class ShardMetrics : public prometheus::Collectable {
 public:
  explicit ShardMetrics(std::map<std::string, std::string> identity);

  void Publish(const proto::ShardStats& stats);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::map<std::string, std::string> identity_;
  mutable absl::Mutex mu_;
  proto::ShardStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

// ps_server: serves one shard of the parameters for a cluster.
//
//   TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 0}}' ps_server
//   ps_server --cluster_spec=cluster_specs/local_2ps_2w.json --task_type=ps --task_index=0
//             --secret_file=job.secret   (every task of the job gets the same file)

#include <cstdlib>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/malloc_policy.h"
#include "common/signals.h"
#include "flags/parse.h"
#include "flags/task_flags.h"
#include "ps_server/ps_server.h"
#include "transport/security.h"

namespace {

// The flags' defaults: a default PsServerOptions.
const pstrain::PsServerOptions& Defaults() {
  static const pstrain::PsServerOptions* const defaults = new pstrain::PsServerOptions();
  return *defaults;
}

}  // namespace

ABSL_FLAG(double, peer_timeout_s, Defaults().peer_timeout_s,
          "A registered worker silent (no heartbeat) this long is presumed dead");
ABSL_FLAG(double, register_timeout_s, Defaults().register_timeout_s,
          "The chief must initialise the shard within this many seconds of the ps's start, every "
          "worker register within as many of the chief's INIT");
ABSL_FLAG(std::string, bind, Defaults().bind_endpoint,
          "Endpoint to bind instead of the spec's address, e.g. tcp://0.0.0.0:2222");
ABSL_FLAG(std::string, checkpoint_dir, Defaults().checkpoint_dir,
          "Directory for this ps's checkpoint files (SAVE writes, RESTORE reads); '' for none");
ABSL_FLAG(int, metrics_port, Defaults().metrics_port,
          "Serve live metrics for Prometheus at http://HOST:PORT/metrics; 0 for none");
ABSL_FLAG(std::string, metrics_host, Defaults().metrics_host,
          "Address the metrics endpoint binds: 0.0.0.0 (every interface) or 127.0.0.1");
ABSL_FLAG(std::string, timeline_dir, Defaults().timeline_dir,
          "Write this ps's timeline (update applies, sync gathers, checkpoints) as Chrome trace "
          "events into DIR/ps<k>.json; '' for none");
ABSL_FLAG(int, io_threads, Defaults().io_threads,
          "ZeroMQ I/O threads (1 to 16): with CURVE, each encrypts and decrypts its share of the "
          "workers' connections; 0: one per worker up to half the host's cores and 8 (CURVE), "
          "else 1");
ABSL_FLAG(int, update_threads, Defaults().update_threads,
          "Threads a large update of the shard runs on (1 to 64), the event loop's included; the "
          "values are the same on any number");
ABSL_FLAG(int64_t, max_message_mb, Defaults().max_message_bytes >> 20,
          "Largest message accepted from a peer, in MiB");
ABSL_FLAG(int, busy_poll_us, Defaults().busy_poll_us,
          "Microseconds the event loop looks for the next request after the last one before it "
          "sleeps (0 to 20000; 0: at once): sooner answers for small models' steps, at the cost "
          "of a core while requests keep coming");

namespace {

pstrain::PsServerOptions PsServerOptionsFromFlags() {
  pstrain::PsServerOptions options;
  options.peer_timeout_s = absl::GetFlag(FLAGS_peer_timeout_s);
  options.register_timeout_s = absl::GetFlag(FLAGS_register_timeout_s);
  options.bind_endpoint = absl::GetFlag(FLAGS_bind);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_mb) << 20;
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  options.timeline_dir = absl::GetFlag(FLAGS_timeline_dir);
  options.io_threads = absl::GetFlag(FLAGS_io_threads);
  options.update_threads = absl::GetFlag(FLAGS_update_threads);
  options.busy_poll_us = absl::GetFlag(FLAGS_busy_poll_us);
  return options;
}

absl::Status RunServer(const char* tf_config, const pstrain::Cancellation& stop) {
  auto cluster = pstrain::ResolveTaskConfig(pstrain::TaskConfigSourcesFromFlags(tf_config));
  if (!cluster.ok()) return cluster.status();
  if (cluster->task()->type != pstrain::TaskType::kPs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps_server runs ps tasks, but the configuration names ", cluster->task()->ToString(),
        " (start it with the worker binary)"));
  }
  auto security =
      pstrain::ResolveTransportSecurity(pstrain::SecretFileFlag(), pstrain::InsecureFlag());
  if (!security.ok()) return security.status();
  pstrain::PsServerOptions options = PsServerOptionsFromFlags();
  if (absl::Status s = pstrain::ValidatePsServerOptions(options); !s.ok()) return s;
  options.io_threads = pstrain::AutoIoThreads(options.io_threads, cluster->num_workers(),
                                              security->secure(),
                                              std::thread::hardware_concurrency());
  auto server = pstrain::PsServer::Create(*cluster, options, *security, &stop);
  if (!server.ok()) return server.status();
  return (*server)->Run();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves one parameter shard. Configure with $TF_CONFIG or --cluster_spec, "
      "--task_type=ps, --task_index=I.");
  pstrain::ParseFlagsOrExit(argc, argv);
  pstrain::InitLogging(argv[0]);
  pstrain::KeepFreedMemoryForReuse();  // a step's large blocks (common/malloc_policy.h)
  const pstrain::Cancellation& stop = pstrain::InstallShutdownHandlers();
  return pstrain::ExitWith("ps_server", RunServer(std::getenv("TF_CONFIG"), stop), stop);
}

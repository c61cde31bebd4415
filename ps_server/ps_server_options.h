#pragma once

// How a ps task runs, with its defaults. The defaults are written here and
// only here: ps_server's flags (ps_server/main.cc) take theirs from a default
// PsServerOptions, and `pstrain launch` hands one to each ps it starts
// through ToArgs(). A small library of its own, so that the launcher needs
// none of the server.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pstrain {

struct PsServerOptions {
  // A registered worker silent this long (no heartbeat, no request) is
  // declared dead: the shard stops waiting for it until it is heard from
  // again. Seconds, so that a dead worker stalls sync training briefly.
  // Flag --peer_timeout_s.
  double peer_timeout_s = 10.0;
  // The chief must initialise (or restore) the shard within this long of
  // the ps's start (a ps may start minutes before its chief's pod), every
  // worker register within this long after the chief's INIT; and the job
  // fails when no worker at all has been alive this long.
  // Flag --register_timeout_s.
  double register_timeout_s = 600.0;
  // After a failure, keep answering with the error this long before exiting.
  double failure_grace_s = 5.0;
  // Largest message accepted (ZMQ_MAXMSGSIZE). Flag --max_message_mb, in MiB.
  int64_t max_message_bytes = int64_t{1} << 30;
  // How long queued replies (the SHUTDOWN ack) may take to leave at exit.
  int linger_ms = 2000;
  // Overrides the bind endpoint derived from the spec ("tcp://0.0.0.0:2222").
  // Flag --bind.
  std::string bind_endpoint;
  // Where SAVE writes this ps's shard files and RESTORE reads them
  // (DIR/ckpt-<step>/shard-<k>-of-<n>.ckpt). Empty: no checkpoints; SAVE and
  // RESTORE are refused. Flag --checkpoint_dir; `pstrain launch` gives every
  // ps RUN_DIR/checkpoints.
  std::string checkpoint_dir;
  // Serve live metrics for Prometheus on metrics_host:metrics_port
  // (ps_server/shard_metrics.h); 0: none. Flags --metrics_port and
  // --metrics_host; `pstrain launch --metrics` picks a free port per task.
  int metrics_port = 0;
  std::string metrics_host = "0.0.0.0";
  // Write this ps's timeline (Chrome trace events: each update's apply, each
  // sync version's gather, checkpoints) to DIR/ps<k>.json, or
  // DIR/ps<k>.<time>.json when a run's earlier process left that file.
  // Empty: none. Flag --timeline_dir; `pstrain launch --timeline` gives
  // every ps RUN_DIR/timeline.
  std::string timeline_dir;
  // ZeroMQ I/O threads of the ps's context (1 to 16; 0: AutoIoThreads).
  // Each worker's connection is served by one of them: with CURVE, where
  // an I/O thread encrypts and decrypts every byte, more threads let
  // several workers' traffic be handled at once (on 16 cores, 8 threads
  // served 8 workers 2.6 GB/s of CURVE PUSH_PULL, one 0.74 GB/s to 4:
  // docs/reports/scaling_16core_2026-11-27/README.md). Flag --io_threads.
  int io_threads = 0;
  // Threads an update of the shard runs on, the event loop's included (1
  // to 64): a large shard's update (and its gradient's finiteness check)
  // is shared out in chunks of 64Ki floats (ps_server/chunk_pool.h), the
  // same values on any number of threads. A worker waits for it before its
  // reply goes. 1 by default: on 2 cores shared with other work helpers
  // bought nothing measurable (benchmarks/log/wire_bench.md). Flag
  // --update_threads.
  int update_threads = 1;
  // How long after the last request the event loop looks for the next
  // before it sleeps, microseconds (0: it sleeps at once; at most
  // kMaxBusyPollUs). Looking costs the core it runs on; it answers sooner
  // where a sleeping thread and an idle core wake slowly (small models'
  // steps). Flag --busy_poll_us.
  int busy_poll_us = 0;

  // "--name=value" for every field that has a flag (max_message_bytes in
  // whole MiB, rounded down), such that ps_server parses them back to these
  // values.
  std::vector<std::string> ToArgs() const;
};

// InvalidArgument naming the flag for a value out of range.
absl::Status ValidatePsServerOptions(const PsServerOptions& options);

// The I/O threads a ps uses for --io_threads=`requested`: that number when
// it is set (> 0); else one without CURVE (plaintext is not bound by its
// I/O thread), and with CURVE one per worker of the spec up to half the
// host's cores and at most 8 (each worker's connection is encrypted on one
// thread; the other half of the cores is left to the ps's event loop and
// the host's other tasks).
int AutoIoThreads(int requested, int num_workers, bool curve, unsigned host_cores);

}  // namespace pstrain

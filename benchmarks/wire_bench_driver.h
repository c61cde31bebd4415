#pragma once

// wire_bench's driver (benchmarks/wire_bench.cc says what it measures):
// starts each measurement's processes, gives their clients one start
// signal, collects their RESULT lines, ends and reaps every process within
// its time, and prints a RESULT line per measurement and the table.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pstrain {

struct WireBenchOptions {
  std::vector<int64_t> sizes;           // floats each way
  std::vector<int> workers;             // client processes per measurement
  std::vector<std::string> securities;  // "plain", "curve", "curve-local", "plain-local"
  // The echoes to measure, by what each does before it answers (none,
  // copy, sgd: wire_bench.cc's EchoWork); the first is what PUSH_PULL is
  // set against. Empty: no echo.
  std::vector<std::string> echo_works = {"none"};
  // The echo's transport (--echo_transport): tcp, loopback TCP as every
  // pstrain task listens; ipc, a Unix domain socket in the run's temporary
  // directory, what a co-located ps reached without the TCP stack would
  // save; shm, the header on that socket and the payload through shared
  // memory (wire_bench.cc's SharedSegment), what it would save without a
  // socket's copies; unix, a Unix stream socket without ZeroMQ (each
  // message one write of its lengths, header and payload, read straight
  // into the receiver's buffer), what a co-located ps reached without
  // ZeroMQ's I/O threads would save.
  std::string echo_transport = "tcp";
  // PUSH_PULL once per entry, ps_server given the entry's flags: each a
  // system of its own, in every round (A/B/C...). Default: one, no flags.
  std::vector<std::vector<std::string>> ps_variants = {{}};
  int rounds = 2;              // echo, PUSH_PULL, echo, PUSH_PULL, ...
  double seconds = 2.0;        // timed per measurement
  double warmup_s = 0.5;       // untimed round trips before (two at least; 0: none)
  // Microseconds each client computes between round trips (a step's
  // forward and backward), so that each request finds its peers idle, as
  // in a job; the round trip times leave it out, the bytes/s do not.
  int gap_us = 0;
  double timeout_s = 120.0;    // per measurement, start to reaped
  std::string mode = "async";  // the ps's
  // 0: PUSH_PULL; D > 0: rows of D floats by id instead (wire_bench.cc's
  // RunRowsClient), each worker cycling through rows_per_worker ids.
  int embedding_dim = 0;
  int64_t rows_per_worker = 0;
  bool rows_prefetch = false;  // each push asks for the next block's rows ("rows_prefetch")
  std::string self;            // wire_bench (its children's binary)
  std::string ps_server;       // the ps_server binary
};

// Runs every measurement; a failed one is reported on stdout (an ERROR
// line naming it and what its processes said) and the run goes on.
// Internal when any failed.
absl::Status RunWireBench(const WireBenchOptions& options);

}  // namespace pstrain

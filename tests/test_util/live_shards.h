#pragma once

// Real ps servers in a test's own process: one PsServer per ps task of a
// spec, each running on a thread of its own, over loopback TCP. They end
// as a job's do (a client's SHUTDOWN), or when Stop() cancels one (a ps
// that goes away under a live client). The destructor stops those still
// running and joins them all.

#include <memory>
#include <thread>
#include <vector>

#include "common/cancellation.h"
#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "ps_server/ps_server.h"
#include "transport/security.h"

namespace pstrain {

class LiveShards {
 public:
  LiveShards(const ClusterSpec& spec, const TransportSecurity& security,
             const PsServerOptions& options = PsServerOptions());
  ~LiveShards();

  LiveShards(const LiveShards&) = delete;
  LiveShards& operator=(const LiveShards&) = delete;

  // Whether every ps was created (a test asserts it).
  bool ok() const { return ok_; }
  // Stops ps `k` (its Run returns Cancelled), waits for it to end and
  // destroys it: its connections close.
  void Stop(int k);
  // Starts ps `k` again after Stop: a fresh process's state (empty, until
  // the chief restores it), on the same address.
  void Restart(int k);

 private:
  // Makes ps `k` (its cancellation flag and server; false, and a test
  // failure, when it cannot be made) / runs it on its thread.
  bool Create(int k);
  void Run(int k);

  ClusterSpec spec_;
  TransportSecurity security_;
  PsServerOptions options_;
  std::vector<std::unique_ptr<CancellationFlag>> cancels_;
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::thread> threads_;
  bool ok_ = true;
};

// A job on loopback for a test: a spec of `num_ps` ps and `num_workers`
// workers on free ports, a fresh job secret (CURVE), and its ps running.
struct LiveJob {
  ClusterSpec spec;
  TransportSecurity security;
  std::unique_ptr<LiveShards> shards;
};
// A test ASSERTs that shards is set and ok().
LiveJob StartLiveJob(int num_ps, int num_workers, const PsServerOptions& options = {});

}  // namespace pstrain

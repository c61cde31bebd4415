#pragma once

// The ps's protocol logic, without sockets: a parsed request in, the
// replies it causes out. A reply may go to another peer than the request's
// (a push that completes a sync version releases every parked pull), and a
// request may cause no reply yet (it is parked).
//
// Every request is checked before it touches state: protocol version, job
// id, message type, sender rank, plan fingerprint, shard range, payload size
// and encoding, finite gradient values. A failed check is an error reply
// and a counter, never an abort: these bytes come from the network.
//
// Thread safety: none; the ps's single event loop owns it.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/cluster_spec.h"
#include "common/shard_plan.h"
#include "common/transport.h"
#include "proto/pstrain.pb.h"
#include "ps_server/update_policy.h"

namespace pstrain {

struct Reply {
  std::string peer;          // ROUTER identity of the receiver
  proto::Header header;
  bool with_params = false;  // attach the shard's current parameters
};

struct RequestHandlerOptions {
  uint64_t job_id = 0;   // ClusterSpec::JobId() of the cluster this ps serves
  int shard_index = 0;   // this ps's index
  int num_shards = 1;    // number of ps tasks
};

class RequestHandler {
 public:
  explicit RequestHandler(const RequestHandlerOptions& options);

  // Handles one well-formed message from `peer`, appending replies to `out`.
  void Handle(const std::string& peer, const Message& request, std::vector<Reply>* out);

  // Answers a message that could not be parsed (counted as malformed).
  void HandleMalformed(const std::string& peer, const absl::Status& error,
                       std::vector<Reply>* out);

  // Answers every parked request with `status` (a dead peer, shutdown).
  void AbortParked(const absl::Status& status, std::vector<Reply>* out);

  // Latches a job failure (a dead worker): answers every parked request and
  // every later one (but STATS and SHUTDOWN) with `status`, so each worker
  // learns why the job stopped.
  void Fail(const absl::Status& status, std::vector<Reply>* out);
  const absl::Status& failure() const { return failure_; }

  // Adds transport byte counts to the STATS figures.
  void CountBytes(int64_t received, int64_t sent);

  bool initialized() const { return policy_ != nullptr; }
  bool shutdown_requested() const { return shutdown_requested_; }
  // REQUIRES: initialized().
  const proto::JobConfig& job() const { return job_; }
  absl::Span<const float> params() const;
  int64_t version() const;
  // Per worker rank (sized at INIT): whether it has registered.
  const std::vector<bool>& registered() const { return registered_; }
  // Whether `rank` has sent its final report (the BARRIER "done"): the job
  // needs nothing more from it, and it may exit while the chief finishes.
  bool reported_done(int rank) const { return reports_.count(rank) > 0; }

  proto::ShardStats Stats() const;

 private:
  struct Parked {
    std::string peer;
    proto::Header reply;
  };
  // A REGISTER that came before INIT: its request, answered at INIT (or
  // refused by AbortParked) with a reply made then.
  struct ParkedRegister {
    std::string peer;
    proto::Header request;
  };
  struct ParkedPull {
    Parked parked;
    PullRequest pull;
  };
  struct BarrierState {
    std::vector<bool> arrived;
    std::vector<Parked> waiting;
  };

  absl::Status CheckEnvelope(const proto::Header& h) const;
  absl::Status CheckWorkerRequest(const Message& m) const;
  absl::Status CheckPayload(const Message& m, bool want_payload) const;

  void HandleRegister(const std::string& peer, const Message& m, std::vector<Reply>* out);
  void HandleInit(const std::string& peer, const Message& m, std::vector<Reply>* out);
  absl::Status Initialize(const Message& m);
  void HandlePush(const std::string& peer, const Message& m, bool then_pull, std::vector<Reply>* out);
  void HandlePull(const std::string& peer, const Message& m, std::vector<Reply>* out);
  void HandleBarrier(const std::string& peer, const Message& m, std::vector<Reply>* out);
  void HandleShutdown(const std::string& peer, const Message& m, std::vector<Reply>* out);

  void ServeOrPark(Parked parked, const PullRequest& pull, std::vector<Reply>* out);
  void ReleaseParkedPulls(std::vector<Reply>* out);
  void RecordPush(int rank, const PushOutcome& outcome);
  proto::Header MakeReply(const proto::Header& request) const;
  void Refuse(const std::string& peer, const proto::Header& request, const absl::Status& status,
              std::vector<Reply>* out);

  RequestHandlerOptions options_;
  proto::JobConfig job_;
  uint64_t fingerprint_ = 0;
  ShardRange range_;
  std::unique_ptr<UpdatePolicy> policy_;
  std::vector<bool> registered_;
  std::vector<ParkedRegister> parked_registers_;
  std::vector<ParkedPull> parked_pulls_;
  std::map<std::string, BarrierState> barriers_;
  std::map<int, proto::WorkerReport> reports_;
  bool shutdown_requested_ = false;
  absl::Status failure_;
  proto::ShardStats stats_;
};

}  // namespace pstrain

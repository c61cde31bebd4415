#pragma once

// Speaks the pstrain protocol by hand to one ps, as any peer might: the
// chief, a worker, a client tool, or a stranger with the wrong keys or
// none. For tests that attack a live ps_server. It reads each reply as one
// message: a reply in pieces (parameters of 256 KiB or more under CURVE,
// 32 MiB or more in plaintext; transport/pieces.h) is not put together.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"
#include "transport/job_secret.h"
#include "transport/transport.h"
#include "zmq.hpp"

namespace pstrain::testing {

struct ProtocolClientOptions {
  int port = 0;
  uint64_t job_id = 0;
  // Who the header says we are.
  proto::TaskType sender = proto::WORKER;
  int rank = 0;
  int shard_floats = 16;     // the range the header names
  uint64_t plan_fingerprint = 0xF00D;
  // CURVE: our key pair and the ps's public key; none: NULL mechanism.
  std::optional<CurveKeyPair> keys;
  std::optional<CurveKey> server_key;
  std::string routing_id;    // "" lets ZeroMQ pick
};

class ProtocolClient {
 public:
  explicit ProtocolClient(const ProtocolClientOptions& options);

  // A header of `type` with a fresh request id.
  proto::Header Header(proto::MessageType type);
  void SendRaw(const std::vector<std::string>& frames);
  absl::Status Send(const proto::Header& h, const std::vector<float>& payload = {});
  // Sends and waits up to `timeout_s` for the reply.
  absl::StatusOr<Message> Call(const proto::Header& h, const std::vector<float>& payload = {},
                               double timeout_s = 10);
  absl::StatusOr<Message> Receive(double timeout_s = 10);

 private:
  ProtocolClientOptions options_;
  zmq::context_t context_{1};
  zmq::socket_t socket_;
  uint64_t request_id_ = 0;
};

// ProtocolClientOptions for task `name` ("worker:0", "client") of a job
// whose secret is `secret`, talking to ps:0.
ProtocolClientOptions AuthenticatedAs(const JobSecret& secret, const std::string& name, int port,
                                      uint64_t job_id);

}  // namespace pstrain::testing

#include "tests/test_util/protocol_client.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain::testing {

ProtocolClient::ProtocolClient(const ProtocolClientOptions& options)
    : options_(options), socket_(context_, zmq::socket_type::dealer) {
  socket_.set(zmq::sockopt::linger, 0);
  if (!options.routing_id.empty()) socket_.set(zmq::sockopt::routing_id, options.routing_id);
  if (options.keys && options.server_key) {
    socket_.set(zmq::sockopt::curve_serverkey,
                zmq::buffer(options.server_key->data(), options.server_key->size()));
    socket_.set(zmq::sockopt::curve_publickey,
                zmq::buffer(options.keys->public_key.data(), kCurveKeyBytes));
    socket_.set(zmq::sockopt::curve_secretkey,
                zmq::buffer(options.keys->secret_key.data(), kCurveKeyBytes));
  }
  socket_.connect(absl::StrCat("tcp://127.0.0.1:", options.port));
}

proto::Header ProtocolClient::Header(proto::MessageType type) {
  proto::Header h;
  h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h.set_job_id(options_.job_id);
  h.set_type(type);
  h.mutable_sender()->set_type(options_.sender);
  h.set_rank(options_.rank);
  h.set_request_id(++request_id_);
  h.set_plan_fingerprint(options_.plan_fingerprint);
  h.set_range_begin(0);
  h.set_range_end(static_cast<uint64_t>(options_.shard_floats));
  h.set_encoding(proto::F32);
  h.set_num_shards(1);
  return h;
}

void ProtocolClient::SendRaw(const std::vector<std::string>& frames) {
  // Bounded: a DEALER blocks while it has no pipe to the peer (a refused
  // handshake tears it down), and a test must never hang on that.
  socket_.set(zmq::sockopt::sndtimeo, 10000);
  for (size_t i = 0; i < frames.size(); ++i) {
    zmq::message_t m(frames[i]);
    (void)socket_.send(m, i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

absl::Status ProtocolClient::Send(const proto::Header& h, const std::vector<float>& payload) {
  return SendRequest(socket_, h, payload, false);
}

absl::StatusOr<Message> ProtocolClient::Call(const proto::Header& h,
                                             const std::vector<float>& payload, double timeout_s) {
  if (auto s = Send(h, payload); !s.ok()) return s;
  return Receive(timeout_s);
}

absl::StatusOr<Message> ProtocolClient::Receive(double timeout_s) {
  zmq::socket_t* sockets[] = {&socket_};
  for (int waited_ms = 0; waited_ms < timeout_s * 1000; waited_ms += 50) {
    auto r = PollReadable(sockets, 50);
    if (r.ok() && (*r)[0]) return ReceiveReply(socket_);
  }
  return absl::DeadlineExceededError(absl::StrCat("no reply in ", timeout_s, " s"));
}

ProtocolClientOptions AuthenticatedAs(const JobSecret& secret, const std::string& name, int port,
                                      uint64_t job_id) {
  ProtocolClientOptions o;
  o.port = port;
  o.job_id = job_id;
  o.keys = secret.KeyPairFor(name);
  o.server_key = secret.KeyPairFor("ps:0").public_key;
  return o;
}

}  // namespace pstrain::testing

#pragma once

// The primary's side of the hot standby (JobConfig.ps_replicas = 1): ps k
// sends its shard's whole state (parameters, the optimizer's slots,
// version, update count, clocks) to its standby, ps (k+1) mod n,
// after every change, and holds back every reply that would let a worker
// see or rely on a state the standby does not have yet (replies carrying
// parameters, acknowledged pushes) until the standby acknowledged it. So
// whatever any worker has seen survives the primary: the chief restores a
// restarted primary from its standby (RequestHandler's FETCH_REPLICA),
// and no applied update is lost.
//
// State, not operations, is shipped: one message in flight, always the
// newest state (a slow standby is sent fewer, newer states, never a
// backlog), and a restarted standby is whole again with the next one. It
// costs two floats per parameter per message; shipping the applied
// gradient instead would halve that.
//
// Embedding tables are too large to ship whole after every change: they go
// whole once (and again when the standby refused a message, or the tables
// were replaced by a restore), then as what changed since the state the
// standby last acknowledged (the rows updated or made, the ids dropped,
// the admission counts moved: EmbeddingTables::EncodeSince). A delta on an
// acknowledged state is right whatever the standby received since, so a
// lost or slow message costs only a resend of a larger delta.
//
// A state over the standby's message limit (--max_message_mb, the same on
// every ps: the standby would drop the connection on a larger message)
// goes in parts (transport/state_parts.h), each sent once the standby
// answered the one before, from one encoding of the state that the
// primary keeps until the last part is answered; the answer to the last
// is the state's. A refused part, or a standby whose connection closed,
// starts a new state whole. Only a limit that leaves no room for a part
// beside its header makes the primary give up, saying so; it looks again
// a resend time later.
//
// A standby that does not acknowledge within resend_s (and the time the
// message's bytes take at 100 MB/s) is sent the newest state again (it
// restarted, or the message was lost); an answer to any copy still
// outstanding counts, so a standby slower than that still catches up.
// Nothing is encoded while no connection to the standby is up, nor for a
// resend time after it refused one. One that has not
// acknowledged for give_up_s, or whose connection closed (it died), no
// longer holds replies back (the job goes on unreplicated, counted and
// logged, until it answers again): a dead standby costs the job nothing,
// a frozen one give_up_s. The give-up time counts only while this ps
// runs: after a pause of its own of half the give-up time or more (wall
// time its process spent no CPU in: it was frozen or suspended), its
// standby gets the whole give-up time again.
//
// A primary whose shard moved while it was away (frozen, and its standby
// adopted the shard) learns so from its standby, which refuses its state
// naming the newer placement term it serves the shard at (ReplicaState.term
// of the refusal). It is deposed: it holds every reply that would show its
// copy, or say a gradient was applied to it, sends the standby nothing and
// never gives up on it. A worker so held moves on when its views show the
// shard's server (PsClient::CheckRoutes). Once the chief restores the shard
// here at that term or later (its give-back), every reply held is answered
// with a rejoin error: it showed the copy that the restore replaced, and
// the worker computes that step again on the restored shard. Without it, a
// woken primary would give up on its standby at once (it had been behind
// for longer than the give-up time) and acknowledge updates into a copy
// that the chief's give-back then replaces. A refusal naming a term more
// than kMaxTermLead past this ps's own deposes nothing (a shard moves one
// term at a time): it is logged.
//
// Thread safety: none; the ps's event loop owns it and its socket.

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "ps_server/request_handler.h"
#include "transport/socket_monitor.h"
#include "transport/transport.h"

namespace pstrain {

struct ReplicatorOptions {
  std::string standby_name;  // "ps:1 (localhost:2231)", for logs
  std::string endpoint;      // where the standby listens
  SocketOptions socket;      // CURVE client keys of this ps, for the standby
  double resend_s = 1.0;
  double give_up_s = 10.0;  // the ps: its --peer_timeout_s
};

class Replicator {
 public:
  // Connects to the standby (ZeroMQ connects in the background).
  static absl::StatusOr<std::unique_ptr<Replicator>> Create(zmq::context_t& context,
                                                            const ReplicatorOptions& options,
                                                            const Clock* clock);

  // Takes out of `replies` those to hold until the standby has the state
  // `handler` is in now, and keeps them.
  void Hold(const RequestHandler& handler, std::vector<Reply>* replies);

  // Sends the newest state when the standby lacks it and nothing is in
  // flight, reads acknowledgements; appends the replies now released.
  void Pump(RequestHandler& handler, std::vector<Reply>* released);

  // Every held reply, at once (the ps is finishing).
  void ReleaseAll(std::vector<Reply>* released);

  zmq::socket_t* socket() { return &socket_; }

 private:
  Replicator(const ReplicatorOptions& options, const Clock* clock, zmq::socket_t socket,
             SocketMonitor events)
      : options_(options), clock_(clock), socket_(std::move(socket)), events_(std::move(events)) {}

  // Reads the socket's connection events: true when it was closed.
  bool Disconnected();
  // The standby's message limit leaves no room for even a small part of a
  // state: gives up (saying why) and holds sends back a resend time.
  void TooSmallLimit();
  void GiveUp(const std::string& why);
  // The standby refused this ps's state, naming term `theirs`, newer
  // than this ps's own.
  void Depose(const RequestHandler& handler, int64_t theirs, const std::string& why);
  // `r` as the rejoin error a reply of a replaced copy becomes.
  Reply AsRejoin(const Reply& r) const;
  // CPU time of this process (all its threads) now.
  static int64_t ProcessCpuMicros();

  // Advances serial_ when the handler's state moved since the last look.
  void Observe(const RequestHandler& handler);
  void Send(RequestHandler& handler);
  // The next part of stream_.
  void SendPart();
  void ReadAcks(RequestHandler& handler);
  void Release(uint64_t up_to, std::vector<Reply>* released);

  struct Key {
    int64_t generation = -1, version = -1, updates = -1;
    bool operator!=(const Key& o) const {
      return generation != o.generation || version != o.version || updates != o.updates;
    }
  };

  ReplicatorOptions options_;
  const Clock* clock_;
  zmq::socket_t socket_;
  SocketMonitor events_;  // socket_'s connection
  Key key_;               // the handler's state at the last look
  uint64_t serial_ = 0;   // states seen; held replies are tagged with it
  uint64_t acked_ = 0;    // the newest serial the standby has
  uint64_t seq_ = 0;      // REPLICATE requests sent
  // The REPLICATEs sent and not answered yet, oldest first (at most
  // kMaxOutstanding: older ones are forgotten).
  struct Sent {
    uint64_t seq = 0;
    uint64_t serial = 0;  // the state it carries
    int64_t bytes = 0;
    int64_t tables_clock = -1, tables_epoch = -1;
    int64_t resend_us = 0;  // when the next copy may go
    // A part of a state in parts: its stream, where it ends, and whether
    // it is the last (whose answer is the state's).
    uint64_t stream = 0;
    uint64_t part_end = 0;
    bool last_part = false;
    int64_t state_bytes = 0;  // the whole state's (for the counters)
  };
  // Keeps `s` as sent, with its resend time.
  void Track(Sent s);
  static constexpr size_t kMaxOutstanding = 8;
  static constexpr int64_t kMaxTermLead = 16;
  static constexpr double kAssumedBytesPerS = 100e6;
  std::deque<Sent> sent_;
  // The state going in parts (payload null: none): its header, payload
  // and the next part's start.
  struct Stream {
    proto::Header header;
    std::shared_ptr<const std::vector<float>> payload;
    uint64_t id = 0;
    uint64_t offset = 0;
    size_t part_bytes = 0;
    uint64_t serial = 0;
    int64_t tables_clock = -1;
    int64_t tables_epoch = -1;  // the handler's when it was encoded
  };
  Stream stream_;
  int64_t refused_until_us_ = 0;  // the standby refused the last: wait a resend time
  // Embedding tables: the standby's copy (acknowledged).
  bool tables_whole_ = true;  // send them whole next
  int64_t tables_acked_clock_ = -1, tables_acked_epoch_ = -1;
  int64_t too_large_until_us_ = 0;  // the limit left no room for a part
  int64_t behind_since_us_ = 0;  // 0: the standby is up to date
  bool gave_up_ = false;
  bool standby_closed_ = false;  // its connection closed since its last ack
  // This ps's last Pump, by the clock and in CPU time: a pause shows as
  // wall time without CPU time.
  int64_t last_pump_us_ = 0;
  int64_t last_pump_cpu_us_ = 0;
  // Deposed: the standby serves this shard at deposed_term_, newer than
  // this ps's state.
  bool deposed_ = false;
  int64_t deposed_term_ = 0;
  int shard_ = -1;  // this ps's shard, for the rejoin error
  std::deque<std::pair<uint64_t, Reply>> held_;
};

}  // namespace pstrain

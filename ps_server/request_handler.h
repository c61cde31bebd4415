#pragma once

// The ps's protocol logic, without sockets: a parsed request in, the
// replies it causes out. A reply may go to another peer than the request's
// (a push that completes a sync version releases every parked pull), and a
// request may cause no reply yet (it is parked).
//
// RequestHandler is the request's path; each concern is a collaborator
// with its own header and test:
//   ps_server/access_control.h   checks 1-3 below: who sent it, may it
//   ps_server/request_repeats.h  check 5: repeats and retired clients
//   ps_server/parked_requests.h  what is answered later, and its bounds
//   ps_server/worker_table.h     registration and liveness of each rank
//   ps_server/update_policy.h    sync / async / SSP over the ShardStore
//   ps_server/checkpoint_store.h SAVE's and RESTORE's files
//   ps_server/standby_replica.h  the replica this ps keeps as a standby
//
// Every request is checked before it touches state, in this order:
//  1. envelope: not a reply, protocol version, job id;
//  2. who sent it: on an authenticated socket the peer's task comes from
//     its CURVE identity (Peer::user_id), never from the header; a header
//     that claims another rank is refused. Without authentication the
//     header's sender and rank are taken at their word (--insecure);
//  3. what that role may do: only the chief INITs, RESTOREs, SAVEs and
//     SHUTs DOWN; workers train; a client reads STATS;
//  4. size: before INIT nothing but INIT carries a payload over 64 KiB;
//     after it nothing is larger than the shard (a message in pieces is
//     judged at its first piece: AdmitPieces);
//  5. repeats: a (rank, session, request_id) seen before is answered again
//     (or refused when too old), never applied twice, and a request of a
//     session the rank has left behind is refused;
//  6. the request's own fields: plan fingerprint, shard range, payload size
//     and encoding (a gradient is decoded by common/wire_codec.h, which
//     refuses anything but its exact layout), gradients that are finite
//     once decoded and whose update keeps the shard finite in f32.
// A failed check is an error reply and a counter, never an abort: these
// bytes come from the network. Error replies carry no job id, plan
// fingerprint, shard range or version, and their messages never reveal
// the ps's own values of them.
//
// Gradient pushes may come in any encoding of Header.encoding (F32, BF16,
// FP16, TOPK), each worker its own: the ps decodes each into f32 and then
// treats it as any other (sync averages what it decoded, weighted by
// examples). Everything the ps sends (parameters) is F32.
//
// Recovery: a rank silent for the peer timeout is declared dead
// (DeclareSilentDead): sync versions, barriers and SSP stop waiting for it,
// and it is waited for again as soon as it is heard from. A REGISTER from a
// new session of a rank (a restarted worker) drops what its old session
// left parked. A training request before INIT/RESTORE (a restarted ps) and
// a parked request when the chief rolls the shard back (RESTORE with
// rollback) are refused with Header.rejoin (common/rejoin.h): the worker
// registers again instead of failing.
//
// Hot standby (JobConfig.ps_replicas): ps k is the standby of shard
// (k-1) mod n. It keeps the latest state its primary REPLICATEs and gives
// it to the chief (FETCH_REPLICA), which restores a restarted primary from
// it (RESTORE from_payload): nothing applied is lost. When the primary
// stays away, the chief has the standby serve the shard from it
// (AdoptReplica, on a second handler: ps_server/hosted_shards.h). The
// primary's side, sending its state and holding back what a worker could
// see before the standby has it, is ps_server/replicator.h.
//
// Thread safety: none; the ps's single event loop owns it.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/shard_checkpoint.h"
#include "common/clock.h"
#include "common/shard_plan.h"
#include "proto/pstrain.pb.h"
#include "ps_server/access_control.h"
#include "ps_server/checkpoint_store.h"
#include "ps_server/chunk_pool.h"
#include "ps_server/embedding_tables.h"
#include "ps_server/gradient_reducer.h"
#include "ps_server/parked_requests.h"
#include "ps_server/request_repeats.h"
#include "ps_server/standby_replica.h"
#include "ps_server/update_policy.h"
#include "ps_server/worker_table.h"
#include "transport/pieces.h"
#include "transport/state_parts.h"
#include "transport/transport.h"

namespace pstrain {

// Buckets of ShardStats.staleness_histogram; the last counts ">= 255".
inline constexpr int kStalenessBuckets = 256;

struct Reply {
  std::string peer;          // ROUTER identity of the receiver
  proto::Header header;
  bool with_params = false;  // attach the shard's current parameters
  bool record = false;       // remember it for repeats of the request
  // Sent as the payload instead (FETCH_REPLICA: a replica's state).
  std::shared_ptr<const std::vector<float>> payload = nullptr;
  // Unsolicited (a SHUTDOWN notice): its receiver may be long gone.
  bool notice = false;
  // with_params: the previous version's instead (a PULL with
  // exact_version; UpdatePolicy::HoldsPreviousVersion). Sent at once,
  // never held back: the next update writes into that buffer.
  bool previous_params = false;
};

struct RequestHandlerOptions {
  uint64_t job_id = 0;   // ClusterSpec::JobId() of the cluster this ps serves
  int shard_index = 0;   // this ps's index
  int num_shards = 1;    // number of ps tasks in its spec
  int num_workers = 1;   // number of chief + worker tasks in its spec
  // Authenticated peers by user id. Non-empty: every request must come
  // from one of them (CURVE). Empty: the header's claims are trusted.
  std::map<std::string, Principal> principals;
  const Clock* clock = nullptr;  // null: the real clock
  // Where SAVE writes this shard's checkpoint files and RESTORE reads them
  // (checkpoint/checkpoint_dir.h). Empty: both are refused.
  std::string checkpoint_dir;
  // A random id of this ps process, in every reply (Header.ps_instance):
  // how a client tells a restarted ps from a reconnected one.
  uint64_t instance = 0;
  // A sparse spec (ClusterSpec::sparse(), TFJob enableDynamicWorker): the
  // ps knows neither the job id nor the shard count and takes both from
  // the chief's INIT (or RESTORE); num_workers is the rank slots, and a
  // rank not heard from is absent (not waited for) until it is. Sync is
  // refused: its versions need the whole membership.
  bool dynamic_workers = false;
  // Threads that share large updates with the event loop (borrowed; null:
  // none). The shard's values are the same with or without them.
  ChunkPool* update_pool = nullptr;
};

class RequestHandler {
 public:
  explicit RequestHandler(const RequestHandlerOptions& options);

  // Handles one well-formed message from `peer`, appending replies to `out`.
  void Handle(const Peer& peer, const Message& request, std::vector<Reply>* out);

  // Answers a message that could not be parsed (counted as malformed);
  // `request`, when its header could be read (a piece out of place), so
  // that the sender can tell which of its requests was refused.
  void HandleMalformed(const Peer& peer, const absl::Status& error, std::vector<Reply>* out,
                       const proto::Header& request = proto::Header());

  // Checks 1-3 above for a request this handler does not serve itself
  // (ADOPT, RELEASE: ps_server/hosted_shards.h): OK when it may be acted
  // on, else the refusal (counted).
  absl::Status Admit(const Peer& peer, const proto::Header& h);
  // The first piece of a message in pieces (transport/pieces.h), judged as
  // the whole message would be before any of it is kept: checks 1-4 above
  // (who sent it, whether its role may, the size its layout claims against
  // the shard's and the pre-INIT limit) and the request's own fields but
  // its payload (a training request of this job's plan and shard). Returns
  // the largest payload the whole message may have; a refusal is counted
  // as the whole message's would be.
  absl::StatusOr<size_t> AdmitPieces(const Peer& peer, const proto::Header& first);
  // A reply to `request` from this shard (its range, version, generation,
  // this ps's instance).
  proto::Header MakeReply(const proto::Header& request) const;

  // Answers every parked request with `status` (a dead peer, shutdown).
  void AbortParked(const absl::Status& status, std::vector<Reply>* out);

  // Latches a job failure (a dead worker): answers every parked request and
  // every later one (but STATS and SHUTDOWN) with `status`, so each worker
  // learns why the job stopped.
  void Fail(const absl::Status& status, std::vector<Reply>* out);
  const absl::Status& failure() const { return failure_; }

  // Declares dead every rank silent for longer than `peer_timeout_s` (once
  // initialised; ranks past their final report excepted, and, after a
  // fresh INIT, ranks that never registered: PsServer's register timeout
  // covers them). Returns the ranks newly declared dead; `out` gets the
  // replies their absence releases.
  std::vector<int> DeclareSilentDead(double peer_timeout_s, std::vector<Reply>* out);

  // Failover (ps_server/hosted_shards.h). On an empty handler made for
  // shard `replica.header.shard_index()`: serves that shard from a
  // standby's replica, at the replica's generation and its term + 1.
  // InvalidArgument when the replica is not one of this job and shard.
  absl::Status AdoptReplica(const HeldReplica& replica);
  // Gives the shard up: answers whatever is parked with `why` (a rejoin
  // status) and returns the shard's state as a replica, to be kept by the
  // standby. REQUIRES: initialized().
  HeldReplica ReleaseAsReplica(const absl::Status& why, std::vector<Reply>* out);
  // The replica this ps holds as a standby (of shard (index - 1) mod n).
  const HeldReplica& replica() const { return standby_.held(); }
  void KeepReplica(HeldReplica replica) { standby_.Set(std::move(replica)); }
  // The shard's placement term (proto ShardPlacement).
  int64_t term() const { return term_; }
  // Counts what the ps did with shards of others (STATS).
  void CountAdoption() { stats_.set_adoptions(stats_.adoptions() + 1); }
  void CountRelease() { stats_.set_releases(stats_.releases() + 1); }
  void CountRefusal() { stats_.set_rejected_requests(stats_.rejected_requests() + 1); }
  void CountStaleReplication() {
    stats_.set_stale_replications_refused(stats_.stale_replications_refused() + 1);
  }

  // Adds transport byte counts to the STATS figures.
  void CountBytes(int64_t received, int64_t sent);
  // Adds peers refused at the handshake to the STATS figures.
  void SetHandshakesRefused(int64_t refused) { stats_.set_handshakes_refused(refused); }
  // Adds messages in pieces given up (PieceAssembler) to the STATS figures.
  void SetPartialMessagesDropped(int64_t dropped) { stats_.set_partial_messages_dropped(dropped); }

  bool initialized() const { return policy_ != nullptr; }
  int shard_index() const { return options_.shard_index; }
  // The shard came from a checkpoint (RESTORE), not from INIT.
  bool restored() const { return restored_; }
  int64_t generation() const { return generation_; }
  bool shutdown_requested() const { return shutdown_requested_; }
  // REQUIRES: initialized().
  const proto::JobConfig& job() const { return job_; }
  absl::Span<const float> params() const;
  // The parameters as a message frame sent without a copy: the buffer is
  // not written while ZeroMQ holds it (transport/pinned_floats.h).
  // `previous`: the previous version's (Reply::previous_params).
  // REQUIRES: initialized(); previous: policy's HoldsPreviousVersion().
  zmq::message_t ParamsFrame(bool previous = false) const;
  // Floats [begin, begin + count) of them, the same way (a reply in
  // pieces). REQUIRES: as above, the range inside the shard.
  zmq::message_t ParamsFrame(size_t begin, size_t count, bool previous = false) const;
  int64_t version() const;
  // Optimizer steps the shard has taken. REQUIRES: initialized().
  int64_t updates() const;
  // Every worker rank of the spec: registration and liveness.
  const WorkerTable& workers() const { return workers_; }
  // Whether `rank` has sent its final report (the BARRIER "done"): the job
  // needs nothing more from it, and it may exit while the chief finishes.
  bool reported_done(int rank) const { return reports_.count(rank) > 0; }

  proto::ShardStats Stats() const;

  // The shard's state for its standby: parameters then the optimizer's
  // slots (common/optimizer.h), and the rest. REQUIRES: initialized().
  std::vector<float> StateSnapshot() const;
  proto::ReplicaState ReplicaStateNow() const;
  // A REPLICATE's payload: StateSnapshot, then the tables (a job with
  // tables): what changed after their clock `since` when `since` >= 0 and
  // their logs reach back that far, else whole (and logged from now on);
  // sets `r`'s tables fields. TablesReplicated: the standby has the tables
  // as they were at `clock` (their logs forget that).
  std::vector<float> ReplicaPayloadNow(int64_t since, proto::ReplicaState* r);
  void TablesReplicated(int64_t clock) { tables_.ForgetThrough(clock); }
  int64_t tables_clock() const { return tables_.clock(); }
  // How many times INIT or RESTORE replaced the shard and its tables
  // (ReplicaState.tables_epoch).
  int64_t tables_epoch() const { return tables_epoch_; }
  // A REPLICATE request for this shard's standby, without payload.
  proto::Header ReplicateHeader(uint64_t seq) const;
  // Counts what the replicator did (STATS).
  // `bytes`: an acknowledged REPLICATE's payload.
  void CountReplication(bool acknowledged, int64_t bytes = 0);

 private:
  // Steps and versions beyond this are lies (2^48 steps is millennia of
  // training); refusing them keeps step + 1 and version + 1 from overflowing.
  static constexpr int64_t kMaxStepOrVersion = int64_t{1} << 48;

  // Checks 1-3: who sent `h` and whether it may; a refusal is counted.
  absl::StatusOr<Principal> Identify(const Peer& peer, const proto::Header& h);
  absl::Status CheckSize(const Message& m) const;
  // The largest payload a request `h` may carry (check 4).
  size_t MaxPayloadBytes(const proto::Header& h) const;
  absl::Status CheckWorkerRequest(const Message& m) const;
  absl::Status CheckPayload(const Message& m, bool want_payload) const;
  bool AnswerRepeat(const Peer& peer, const proto::Header& h, std::vector<Reply>* out);
  void Dispatch(const Peer& peer, const Message& request, std::vector<Reply>* out);
  void Route(const Peer& peer, const Principal& who, const Message& request,
             std::vector<Reply>* out);

  void HandleRegister(const std::string& peer, const Message& m, std::vector<Reply>* out);
  void HandleInit(const std::string& peer, const Message& m, std::vector<Reply>* out);
  absl::Status CheckInit(const proto::Header& h) const;
  absl::Status CheckInitFields(const proto::Header& h) const;
  absl::Status Initialize(const Message& m);
  void FinishInit(const std::string& peer, const proto::Header& h, std::vector<Reply>* out);
  // Checkpoints (checkpoint/shard_checkpoint.h): SAVE writes the shard at its
  // current version; RESTORE initialises it from its file instead of INIT's
  // payload, or only checks that file. Both read and write on the event
  // loop: for this model's shards a few milliseconds, fsyncs included.
  void HandleSave(const std::string& peer, const Message& m, std::vector<Reply>* out);
  void HandleRestore(const std::string& peer, const Message& m, std::vector<Reply>* out);
  absl::StatusOr<proto::SavedShard> Save(int64_t step, int keep, int64_t keep_from_step);
  absl::StatusOr<ShardCheckpoint> LoadCheckpoint(const proto::Header& h) const;
  // The embedding tables of RESTORE `h`'s checkpoint, whose shard is at
  // `version` (none: an empty set).
  // A RESTORE from_payload's tables (after its state's `floats` floats).
  absl::StatusOr<EmbeddingTables> TablesFromPayload(const Message& m, size_t floats) const;
  absl::StatusOr<EmbeddingTables> LoadTables(const proto::Header& h, int64_t version) const;
  // Loads the shard from its file (RESTORE); with rollback on a live shard,
  // answers what is parked with a rejoin refusal into `out` first.
  absl::Status Restore(const Message& m, std::vector<Reply>* out);
  void Install(const proto::Header& h, std::unique_ptr<UpdatePolicy> policy);
  void HandlePush(const std::string& peer, const Message& m, bool then_pull, std::vector<Reply>* out);
  // A push's gradient as f32 (decoded unless it came as f32 of the
  // shard's size), or the refusal's reason.
  absl::StatusOr<absl::Span<const float>> PushedGradient(const Message& m);
  // The request's step settings, checked against the job (null without).
  absl::Status ReadStepSettings(const proto::Header& h, std::optional<StepOptions>* settings) const;
  // Sync: a worker's gradient toward the workers' average (REDUCE,
  // ps_server/gradient_reducer.h), answered once every live rank's is in.
  void HandleReduce(const std::string& peer, const Message& m, std::vector<Reply>* out);
  // The round's answers, with its average (complete) or as stale.
  void AnswerReduce(std::vector<Reply>* out);
  // The optimizer's slots and each segment's step count (OPTIMIZER_STATE).
  void HandleOptimizerState(const std::string& peer, const Message& m, std::vector<Reply>* out);
  // The shard's store for `job` over `range`: `state` (parameters, then
  // the optimizer's slots), `updates` taken, each segment's
  // (`segment_updates`, empty: all `updates`). InvalidArgument naming the
  // field for a state or counts that do not fit the shard.
  absl::StatusOr<std::unique_ptr<ShardStore>> MakeStore(
      const proto::JobConfig& job, const ShardRange& range, std::vector<float> state,
      int64_t updates, absl::Span<const int64_t> segment_updates) const;
  // Counts a decoded gradient by its encoding (ShardStats.pushes_by_encoding).
  void CountEncoding(proto::Encoding encoding);
  void HandlePull(const std::string& peer, const Message& m, std::vector<Reply>* out);
  // Embedding tables (ps_server/embedding_tables.h): a step's rows, and
  // their gradients.
  void HandleEmbeddingPull(const std::string& peer, const Message& m, std::vector<Reply>* out);
  void HandleEmbeddingPush(const std::string& peer, const Message& m, std::vector<Reply>* out);
  // Sync: applies the embedding pushes of every version the shard applied.
  void SettleEmbeddings();
  void HandleBarrier(const std::string& peer, const Message& m, std::vector<Reply>* out);
  void HandleShutdown(const std::string& peer, const Message& m, std::vector<Reply>* out);
  // The chief's last word on which checkpoints it keeps (SHUTDOWN's
  // keep_from_step, after its last manifest): this ps's older files go.
  // Failures are logged; the job is over either way.
  void RemoveCheckpointsBefore(int64_t keep_from_step);
  void HandleReplicate(const std::string& peer, const Principal& who, const Message& m,
                       std::vector<Reply>* out);
  // REPLICATE `h` refused, for `refusal`, with its seq.
  void RefuseReplicate(const std::string& peer, const proto::Header& h, const absl::Status& why,
                       StandbyReplica::Refusal refusal, std::vector<Reply>* out);
  // A whole REPLICATE (or one put together from its parts) kept.
  void KeepReplicate(const std::string& peer, const Principal& who, const Message& m,
                     std::vector<Reply>* out);
  void HandleFetchReplica(const std::string& peer, const Message& m, std::vector<Reply>* out);

  // Liveness: a dead rank is not waited for; one heard from again is.
  void SetDead(int rank, bool dead, std::vector<Reply>* out);
  // Whether the sync versions, SSP's clocks and the reduce round wait for
  // `rank`; answers a round this completes. Returns whether it completed
  // a version (UpdatePolicy::SetActive).
  bool SetWaitedFor(int rank, bool waited_for, std::vector<Reply>* out);
  // Drops what an earlier session of `rank` left parked (a restarted worker).
  void ForgetOldSession(int rank, std::vector<Reply>* out);
  // `rank` sent its final report: versions, reduces and SSP's bound no
  // longer wait for it (a worker whose loop ended before the others').
  void LeaveTraining(int rank, std::vector<Reply>* out);
  // Answers barrier `name` when every live rank has arrived.
  void MaybeReleaseBarrier(const std::string& name, std::vector<Reply>* out);

  void ServeOrPark(Parked parked, const PullRequest& pull, std::vector<Reply>* out);
  // Whether `pull` may be answered now: the policy's verdict, but for a
  // rank past its final report in SSP (its final parameters).
  bool Servable(const PullRequest& pull) const;
  // Answers PULL `h` (exact_version, for version() - 1) with the previous
  // version's parameters. REQUIRES: policy_->HoldsPreviousVersion().
  void ServePrevious(const std::string& peer, const proto::Header& h, std::vector<Reply>* out);
  void ReleaseParkedPulls(std::vector<Reply>* out);
  void RecordPush(int rank, const PushOutcome& outcome);
  void RecordReplies(const std::vector<Reply>& out, size_t from);
  void Refuse(const std::string& peer, const proto::Header& request, const absl::Status& status,
              std::vector<Reply>* out);

  // Marks every rank slot never heard from absent (dynamic workers).
  void MarkUnheardAbsent();

  RequestHandlerOptions options_;
  const Clock* clock_;
  // Checks 1-3; it holds the job's id: the spec's, or (dynamic workers,
  // 0 until then) the chief's INIT/RESTORE's.
  AccessControl access_;
  // The shard count, known as the job's id is.
  int num_shards_ = 0;
  proto::JobConfig job_;
  uint64_t fingerprint_ = 0;
  ShardRange range_;
  std::unique_ptr<UpdatePolicy> policy_;
  // The job's embedding tables' rows held here.
  EmbeddingTables tables_;
  // Sync: the workers' averaged gradient for scripts that ask (REDUCE).
  std::unique_ptr<GradientReducer> reducer_;
  int64_t unordered_sums_before_ = 0;  // the policies' before this one (Stats)
  WorkerTable workers_;
  RequestRepeats repeats_;
  ParkedRequests parked_;
  std::map<int, proto::WorkerReport> reports_;  // the final BARRIER's, by rank
  bool shutdown_requested_ = false;
  bool restored_ = false;
  // Where SAVE and RESTORE keep the shard's files.
  CheckpointStore checkpoints_;
  // The replica this ps keeps as standby of shard (index - 1) mod n.
  StandbyReplica standby_;
  // States coming in parts (transport/state_parts.h): a REPLICATE from the
  // primary, a RESTORE from the chief.
  StatePartsAssembler replica_parts_, restore_parts_;
  // The replica's payload as FETCH_REPLICA sends it in parts: encoded at
  // the first part's request, kept until its last part went (or the
  // replica changed: standby_.changes()).
  struct FetchedReplica {
    uint64_t changes = 0;
    proto::ReplicaState replica;
    std::shared_ptr<const std::vector<float>> payload;
  };
  std::optional<FetchedReplica> fetched_;
  std::vector<float> scratch_;  // a pushed gradient whose frame is misaligned
  int64_t generation_ = 0;
  int64_t term_ = 0;
  int64_t tables_epoch_ = 0;  // tables_ replaced (ReplicaState.tables_epoch)
  absl::Status failure_;
  proto::ShardStats stats_;
};

// A reply to a refused request: the request's type and id and the error,
// nothing about the shard or the job.
proto::Header ErrorReply(const proto::Header& request, const absl::Status& status);

// Judges the first piece of a message in pieces as the whole message
// (RequestHandler::AdmitPieces, or HostedShards's for the shard it names):
// the largest payload it may have, or its refusal.
using PieceJudge =
    std::function<absl::StatusOr<size_t>(const Peer& peer, const proto::Header& first)>;

// Where a piece came from, beyond its peer.
struct PieceSource {
  int fd = -1;         // its connection (transport/transport.h RoutedMessage)
  int64_t now_us = 0;  // when it was received (a monotonic clock)
};

// What a ps does with a piece (transport/pieces.h) from `peer`: a first piece
// is judged by `judge` before anything of it is kept (refused: answered
// with its header and the refusal, and whatever the peer held is given
// up); every piece then goes to `pieces`, which returns the whole message
// once its last piece is in, or nullopt while more are due. Every message
// `pieces` gave up (to make room, or past its deadline) is answered in
// `out` with its first piece's header; a piece that does not fit is
// answered there too, with its own header (counted as malformed by
// `handler`), and its refusal returned (for the caller's log). So no
// sender of a piece is left waiting for a reply that will not come.
absl::StatusOr<std::optional<Message>> AssemblePiece(PieceAssembler& pieces,
                                                     RequestHandler& handler, const Peer& peer,
                                                     Message piece, const PieceJudge& judge,
                                                     const PieceSource& source,
                                                     std::vector<Reply>* out);

}  // namespace pstrain

#pragma once

// A worker's connection to every ps of the cluster: one DEALER socket per
// shard, requests to all shards in flight at once, replies matched by
// request id. Every call returns a Status that names the ps and the request
// when something goes wrong: a ps that cannot be reached, a refusal, a dead
// peer (from the HeartbeatMonitor), the options' Cancellation firing
// (Cancelled).
//
// Recovery: a refusal marked rejoin by the ps, a ps whose instance id
// changed (it restarted), a ps whose connection closed or that stopped
// answering heartbeats all come back as a rejoin status (common/rejoin.h):
// the caller makes a new client and registers again (worker/trainer.h).
//
// Routing (failover): shard k's requests go to the ps that serves it, which
// is ps k unless ps k is away and its standby adopted the shard. Where each
// shard is served is decided by WaitForServers from what every ps says it
// serves (worker/shard_routes.h), and kept until the client is replaced;
// a ps serving two shards gets both shards' requests on one socket.
//
// Payload lifetime: gradients are sent without copying. The payloads passed
// to PushPull and FinishStep (their bytes) must stay alive and unchanged
// until the call returns; after a call fails, destroy the client before
// reusing them.
//
// Encodings: each shard's gradient goes out as encoded (EncodedShard:
// common/wire_codec.h, made by worker/gradient_encoder.h); parameters
// always come back F32.
//
// Thread safety: none; one training thread drives it.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/cancellation.h"
#include "common/cluster_spec.h"
#include "common/shard_plan.h"
#include "common/wire_codec.h"
#include "proto/pstrain.pb.h"
#include "transport/security.h"
#include "transport/stream_link.h"
#include "transport/transport.h"
#include "worker/heartbeat.h"

namespace pstrain {

struct PsClientOptions {
  // Every ps must answer within this long of WaitForServers' start.
  double connect_timeout_s = 60.0;
  double heartbeat_interval_s = 1.0;
  // A ps that stops answering heartbeats for this long is dead.
  double peer_timeout_s = 60.0;
  // Upper bound on one request's wait (0: none beyond the liveness checks;
  // sync requests legitimately wait for the slowest worker).
  double rpc_timeout_s = 0.0;
  int64_t max_message_bytes = int64_t{1} << 30;
  // How long a wait for replies looks before it sleeps (--busy_poll_us).
  int busy_poll_us = 0;
  // CURVE keys from the job secret, or none (--insecure).
  TransportSecurity security;
  // ZeroMQ I/O threads of this client's context (1 to 16). ZeroMQ gives
  // each connection to one of them, so with several the traffic to
  // different ps tasks (CURVE's encryption above all) is handled at once.
  int io_threads = 1;
  // Requests to a ps on this host go over its Unix socket, a link of
  // pstrain's own frames without ZeroMQ, unencrypted, admitted by the
  // task's key (transport/local_route.h, local_links.h; an --insecure
  // job's key is public), once the ps says where it is; else, and across
  // hosts, over TCP. Off here (benchmarks of the wire and tests of the
  // TCP path get TCP); the worker's --colocated_ipc turns it on by default.
  bool colocated_ipc = false;
  // Stops every wait of the client: it then returns Cancelled. The worker's
  // is its SIGINT/SIGTERM (worker/main.cc). Borrowed; must outlive the
  // client. Null: never cancelled.
  const Cancellation* cancel = nullptr;
};

// Which shards a RESTORE goes to, and what it makes of them.
struct RestoreScope {
  std::vector<int> shards;  // empty: every shard
  bool rollback = false;    // live shards go back to the file too (sync)
  int64_t generation = 0;   // the shards' generation afterwards
  // [shard] the placement term each restored shard is served at
  // afterwards, at least (empty: the ps keeps its own). Above every term
  // the shard had anywhere, its standby's replica included: a standby
  // refuses the states of an older term than the replica it holds, and
  // the chief would take that replica for the newer state.
  std::vector<int64_t> terms;
};

// The largest part of a standby's state the chief relays at once
// (RestoreFromReplica): the 357 MB state of a ps holding about 330 MB of
// rows went over in 2.9-3.1 s in 6 parts of 64 MiB, each restored while
// the next was fetched (3.8-7.7 s one part after another), the chief's
// peak RSS 544-589 MB (459-461 MB one after another; 1,173-1,369 MB when
// the state went in one message) (benchmarks/embedding_scale.sh, KILL_AT).
inline constexpr size_t kRelayPartBytes = size_t{64} << 20;

// How RestoreFromReplica restores a shard from its standby's replica.
struct ReplicaRestore {
  std::optional<int64_t> generation;  // the shard's afterwards (nullopt: the replica's)
  bool rollback = false;              // a live shard is replaced too
  int64_t min_term = 0;               // served at max(this, the replica's term + 1)
};

// What REGISTER returned from every shard.
struct Registration {
  proto::JobConfig job;              // the chief's
  std::vector<int64_t> clocks;       // [shard] this rank's clock there
  std::vector<int64_t> generations;  // [shard]
  std::vector<int64_t> versions;     // [shard]
  int64_t min_clock() const;
  bool same_generation() const;
};

// One embedding table's part of a step (EMBEDDING_PULL, EMBEDDING_PUSH):
// its distinct ids, and their rows (pull: filled) or row gradients (push).
// The client sends each ps the ids it holds (common/embedding.h).
struct EmbeddingRows {
  int table = 0;  // index into JobConfig.tables
  int dim = 0;    // the table's row length
  absl::Span<const int64_t> ids;
  absl::Span<float> rows;         // pull: ids.size() x dim, filled
  absl::Span<const float> grads;  // push: ids.size() x dim
  bool has_grad = false;          // push: the table had a gradient this step
  double lr = -1;                 // push: this update's lr (< 0: the table's own)
};

// What one shard said in a reply.
struct ShardReply {
  int64_t version = 0;           // the shard's version of the returned parameters
  int64_t min_clock = 0;         // the slowest worker's finished steps (SSP)
  int64_t staleness = 0;         // PUSH: the gradient's staleness at arrival
  bool dropped = false;          // PUSH: the gradient was not applied
  int64_t received_unix_us = 0;  // when the reply arrived (for the timeline)
  int64_t parked_us = 0;         // how long the ps held the request back (Header.parked_us)
};

class PsClient {
 public:
  // Connects sockets and starts the heartbeat thread. `self` is this
  // worker's task; `plan` the shard plan it computed from its model.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(const ClusterSpec& cluster,
                                                          const TaskId& self, const ShardPlan& plan,
                                                          const PsClientOptions& options);
  ~PsClient();

  // Waits until every shard has a ps to serve it (its own ps answers, or
  // another serves it: shard_routes.h), logging who is missing, and routes
  // every shard there. Unavailable naming each unreachable ps and its
  // address after `timeout_s` (< 0: connect_timeout_s); UnservedShards()
  // then says which shards have none. A shard SetRoute moved stays where
  // it was moved while that ps answers, until the views agree.
  absl::Status WaitForServers(double timeout_s = -1);
  std::vector<int> UnservedShards() const { return unserved_; }
  // The ps shard `shard`'s requests go to.
  int route(int shard) const { return route_[shard]; }
  // Routes `shard` to `ps`, which the caller (the chief) just moved it to,
  // and keeps it there through WaitForServers until the heartbeat's views
  // say so too: a view lags (one beat a --heartbeat_interval_s), and the
  // shard's own ps, frozen and waking just after its standby adopted the
  // shard, answers at once still listing it. Routed back there by a view
  // from before the adoption, the chief would serve the shard from two ps
  // (its sync steps waiting on each other), and never give it back.
  void SetRoute(int shard, int ps) {
    route_[shard] = ps;
    pinned_[shard] = ps;
  }
  // Shards routed away from their own ps whose own ps answers again (it
  // restarted, or woke up): the chief gives them back (RELEASE).
  std::vector<int> ShardsWhoseHomeIsBack() const;

  // Chief only (failover): ps `holder`, the standby of shard `shard`,
  // serves it from its replica from now on; routes the shard there. The
  // reply carries the shard's version and the replica's ReplicaState.
  absl::StatusOr<proto::Header> Adopt(int shard, int holder);
  // Chief only: the ps that adopted `shard` gives it up and keeps its
  // state as its replica (RestoreFromReplica restores the shard's own ps
  // from it; the reply's ReplicaState says which).
  absl::StatusOr<proto::Header> Release(int shard);
  // STATS of ps `ps`'s own shard, wherever the shard is routed.
  absl::StatusOr<proto::ShardStats> StatsOf(int ps, double timeout_s = -1);

  // Chief only: sends every shard its slice of `params` and the job.
  absl::Status Init(const proto::JobConfig& job, absl::Span<const float> params);
  // The same with the optimizer's state (a script's loaded state_dict):
  // states[shard] its parameters then its part of each slot
  // (common/optimizer.h), segment_updates[shard][segment] each tensor
  // segment's step count (common/param_groups.h).
  absl::Status InitWithState(const proto::JobConfig& job,
                             const std::vector<std::vector<float>>& states,
                             const std::vector<std::vector<int64_t>>& segment_updates);

  // Every shard's optimizer state (OPTIMIZER_STATE): its slots into `slots`
  // (laid out as Init's; REQUIRES: num_slots x total floats) and each
  // segment's step count into (*segment_updates)[shard].
  absl::Status OptimizerState(absl::Span<float> slots,
                              std::vector<std::vector<int64_t>>* segment_updates);

  // Sync: sends `grads` (f32, the flat vector; computed at `step` on
  // `versions`, of `num_examples` examples; the step's reduce `round`,
  // 0, 1, ...) toward the workers' average
  // (REDUCE) and waits for it, into `average` (the flat vector). `absent`
  // (ascending layout indices): the tensors this worker has no gradient
  // for; the reply's *absent_everywhere: those no worker has. *stale: some
  // shard had passed `versions` (the job went on without this worker):
  // `average` is then not whole.
  absl::Status Reduce(int64_t step, absl::Span<const int64_t> versions, uint32_t round,
                      int num_examples, absl::Span<const float> grads,
                      const std::vector<int32_t>& absent, absl::Span<float> average,
                      std::vector<int32_t>* absent_everywhere, bool* stale);

  // The optimizer settings every PUSH and PUSH_PULL sent from now on
  // carries (a script's param_groups; proto StepSettings); nullopt: none.
  void SetStepSettings(std::optional<proto::StepSettings> settings) {
    step_settings_ = std::move(settings);
  }

  // Chief only: initialises every shard from its own files of checkpoint
  // `step` (shards[k]: the manifest's entry for shard k, its checksums)
  // instead of a payload;
  // with `verify_only`, only has every shard check its file. The refusal
  // names the ps and the file.
  absl::Status Restore(const proto::JobConfig& job, int64_t step,
                       absl::Span<const proto::SavedShard> shards, bool verify_only,
                       const RestoreScope& scope = {});

  // Chief only (--ps_replicas): restores shard `shard` on its own ps from
  // the replica that ps `holder` keeps as its standby (parameters, the
  // optimizer's slots, embedding tables), relayed in parts (each at most
  // a message and kRelayPartBytes: transport/state_parts.h), part k
  // restored while part k + 1 is fetched, so that the chief holds two
  // parts at most. `check` is shown the replica's header (its
  // ReplicaState, range, job, counters) before anything is sent on, and
  // may refuse it. Returns that header. NotFound when `holder` holds no
  // replica; FailedPrecondition when it is of another plan or range, or
  // changed while it was relayed (the shard's ps then keeps its state).
  absl::StatusOr<proto::Header> RestoreFromReplica(
      const proto::JobConfig& job, int holder, int shard, const ReplicaRestore& how,
      const std::function<absl::Status(const proto::Header&)>& check);

  // Chief only: initialises the empty shard `shard` from such a state
  // (with `rollback`, a live one too).
  // `stats` (may be null): the counters to continue from. The shard is
  // served afterwards at term max(`min_term`, the state's term + 1).
  absl::Status RestoreFromState(const proto::JobConfig& job, int shard,
                                const proto::ReplicaState& replica, absl::Span<const float> state,
                                int64_t generation, bool rollback = false,
                                const proto::ShardStats* stats = nullptr, int64_t min_term = 0);

  // Chief only: every shard writes checkpoint `step`, and removes its files
  // of checkpoints older than `keep_from_step` (the oldest complete one the
  // job keeps; an embedding table's chain reaches back at most `keep` - 1
  // saves); returns what each wrote, by shard.
  absl::StatusOr<std::vector<proto::SavedShard>> Save(int64_t step, int keep,
                                                      int64_t keep_from_step);

  // Registers with every shard and returns the chief's job config and this
  // rank's clock on each shard (waits until the chief has initialised the
  // shards, at most `timeout_s` when > 0). In a fresh job every clock is 0;
  // after a RESTORE, the checkpoint's. A refusal for this worker's plan
  // carries the chief's job: into `refused_job` (may be null).
  absl::StatusOr<Registration> Register(double timeout_s = 0,
                                        proto::JobConfig* refused_job = nullptr);

  // Fetches every shard's parameters at version >= min_versions[k] into
  // `params` (the full flat vector). `step` is this worker's clock.
  absl::Status Pull(int64_t step, absl::Span<const int64_t> min_versions, absl::Span<float> params,
                    std::vector<ShardReply>* replies);
  // Fetches every shard's parameters of `version` itself (Header.
  // exact_version): a sync shard one version past it sends its previous
  // version's; one that no longer holds them (restored since) sends its
  // current ones, and (*replies)[k].version says so. A shard not at
  // `version` yet is waited for.
  absl::Status PullVersion(int64_t step, int64_t version, absl::Span<float> params,
                           std::vector<ShardReply>* replies);

  // Pushes `grads` (grads[k]: shard k's gradient, encoded; computed at
  // `step` on versions `computed_on`, averaged over `num_examples`) and
  // receives the parameters that follow.
  absl::Status PushPull(int64_t step, absl::Span<const int64_t> computed_on, int num_examples,
                        absl::Span<const EncodedShard> grads, absl::Span<float> params,
                        std::vector<ShardReply>* replies);

  // The same, a shard at a time (overlap: each shard's gradient goes out as
  // soon as backward has finished it, while backward goes on):
  // StartPushPull prepares the step (nothing is sent); SendShard(k, g)
  // sends shard k's push now; FinishPushPull sends every push not sent yet
  // (grads, as PushPull's) and waits for every reply. Each payload stays
  // alive and unchanged until FinishPushPull returns. An error of SendShard
  // is kept and returned by FinishPushPull.
  void StartPushPull(int64_t step, absl::Span<const int64_t> computed_on, int num_examples,
                     absl::Span<float> params);
  void SendShard(int shard, const EncodedShard& grad);
  absl::Status FinishPushPull(absl::Span<const EncodedShard> grads,
                              std::vector<ShardReply>* replies);
  // After every shard's SendShard, before FinishPushPull: waits until
  // params[0, end) hold what this push/pull's replies carry, so that the
  // next forward can start on the first layers while the rest comes in
  // (Model::ForwardAhead). A reply in pieces counts as far as its pieces
  // are in, one on a link (the ps's Unix socket) as far as its bytes are;
  // they come in order, first layers first. Only FinishPushPull
  // says that the replies are whole and the step done: what forward read
  // is final only once it returned OK. An error (a refusal, a dead ps) is
  // the one FinishPushPull would have returned; the step has failed.
  absl::Status WaitParams(int64_t end);

  // PushPull to the shards with push_to[k], and from the others only the
  // parameters that follow (version computed_on[k] + 1): the end of a step
  // some shards already have the gradient of (a restored shard lost it).
  // `grads` must be the very payloads the step pushed first.
  absl::Status FinishStep(int64_t step, absl::Span<const int64_t> computed_on, int num_examples,
                          absl::Span<const EncodedShard> grads, const std::vector<bool>& push_to,
                          absl::Span<float> params, std::vector<ShardReply>* replies);

  // The rows of every table's ids, from the ps tasks that hold them, into
  // each EmbeddingRows's rows.
  absl::Status EmbeddingPull(absl::Span<const EmbeddingRows> tables);
  // The step's row gradients (computed at `step` on `versions`, of
  // `num_examples` examples) to every ps, each its ids' (a ps holding none
  // of them still hears of the step: sync averages over the pushes). A ps
  // the job went past drops them, as it drops the step's dense push.
  // `only`: to the shards it marks true, not every one.
  //
  // Sent, not waited for: the step's dense push follows on the same
  // connections at once (the ps applies the rows with it), and the next
  // call that waits for replies (that push's) waits for these too and
  // fails with their refusal. So a step is two round trips (rows in, rows
  // and dense gradient out), not three. The ids and gradients are copied
  // here; `tables` may change once this returns.
  absl::Status EmbeddingPush(int64_t step, absl::Span<const int64_t> versions, int num_examples,
                             absl::Span<const EmbeddingRows> tables,
                             const std::vector<bool>* only = nullptr);
  // A prefetch (async): a pull of `tables`' rows (each EmbeddingRows's
  // table, dim and ids; copied) staged to go out right behind the next
  // step's dense push (FinishPushPull), on the same connections, and
  // waited for with it: a ps takes a connection's requests in order, so
  // it answers with the rows that push applied, and the step and the next
  // forward's rows are one round trip, not two. Staging a table again
  // before that push replaces its ids. InvalidArgument when what is
  // staged would be more ids than one request may hold, or rows over the
  // message limit (nothing is staged then). A ps's refusal of the
  // prefetch drops it and fails nothing (the step's pushes stand).
  absl::Status StageEmbeddingPrefetch(absl::Span<const EmbeddingRows> tables);
  // The rows of `tables` from the answered prefetch where it holds a
  // table's very ids in the same order, the rest pulled (EmbeddingPull).
  // prefetched_tables() counts the tables it answered. An answered
  // prefetch is dropped at the next push (rows or dense), or when any
  // wait fails. A ps the heartbeat or the routes say is lost fails the
  // call as a pull would, even when every table was prefetched.
  absl::Status EmbeddingPullPrefetched(absl::Span<const EmbeddingRows> tables);
  // Table reads a prefetch answered so far.
  int64_t prefetched_tables() const { return prefetched_tables_; }
  // Waits at the barrier `name` on every shard until every worker reached
  // it. `report` (may be null), the worker's final figures, goes to every
  // shard: shard 0's STATS carries them to the chief, and a shard holding a
  // worker's report no longer expects heartbeats from it (it may exit while
  // the chief evaluates).
  absl::Status Barrier(const std::string& name, const proto::WorkerReport* report);

  // Every shard's counters (also from a ps that is not initialised yet:
  // ShardStats.initialized says). At most `timeout_s` when > 0.
  absl::StatusOr<std::vector<proto::ShardStats>> Stats(double timeout_s = 0);

  // Chief only: tells every shard that training is over, and to remove its
  // files of checkpoints before `keep_from_step` (0: none).
  absl::Status Shutdown(int64_t keep_from_step = 0);
  // This worker makes no more requests: the ps tasks may exit from now on
  // (the chief shuts them down), which is no failure and is not logged as
  // one. Shutdown does it too.
  void StopWatchingPs();

  int num_shards() const { return plan_.num_shards(); }
  // Bytes of requests sent and replies received so far (header and
  // payload frames; heartbeats are not counted).
  int64_t sent_bytes() const { return sent_bytes_; }
  int64_t received_bytes() const { return received_bytes_; }
  // Messages of requests sent and of replies received in pieces
  // (CURVE's large payloads; transport/pieces.h).
  int64_t pieces_sent() const { return pieces_sent_; }
  int64_t pieces_received() const { return pieces_received_; }

 private:
  struct Call {
    int shard = 0;
    proto::Header header;
    absl::Span<const char> payload;     // sent (whole 32-bit words)
    absl::Span<float> params;           // reply payload lands here (may be empty)
    int socket = -1;                    // the ps to ask, when not `shard`'s own
    std::vector<float>* raw = nullptr;  // the whole reply payload lands here
    int ps() const { return socket >= 0 ? socket : shard; }
    proto::Header reply;
    bool done = false;
    int64_t received_unix_us = 0;
    // A reply in pieces (transport/pieces.h): how many are in, and their
    // layout, from the first.
    uint32_t pieces_in = 0;
    uint32_t parts = 0;
    uint64_t piece_bytes = 0;
  };

  PsClient(const ClusterSpec& cluster, const TaskId& self, const ShardPlan& plan,
           const PsClientOptions& options);

  proto::Header BaseHeader(proto::MessageType type, int shard) const;
  // Whether a replica's header `r` (FETCH_REPLICA's reply from ps
  // `holder`) is of shard `shard` of this plan; *total: the bytes its
  // whole state has.
  absl::Status CheckReplicaHeader(int holder, int shard, const proto::Header& r,
                                  uint64_t* total) const;
  // The FETCH_REPLICA of the part of shard `shard`'s replica on ps
  // `holder` from byte `offset`, at most `part_bytes`, into `part`.
  Call ReplicaPartCall(int holder, int shard, uint64_t offset, uint64_t part_bytes,
                       std::vector<float>* part) const;
  absl::Status Exchange(std::vector<Call>* calls, double timeout_s = -1);
  absl::Status SendCall(Call& call, int64_t deadline_us);
  absl::Status WaitReplies(std::vector<Call>* calls, int64_t deadline_us);
  // Until `enough()` (checked whenever replies came in) rather than every
  // call answered. `poll_first`: reads what the sockets hold before the
  // first check, without waiting.
  absl::Status WaitReplies(std::vector<Call>* calls, int64_t deadline_us,
                           const std::function<bool()>& enough, bool poll_first = false);
  // How many of the shard's floats a call's reply has placed in its
  // params so far: all once done, else those of its pieces in.
  int64_t FloatsIn(const Call& call) const;
  // Reads what ps `ps`'s socket holds into the calls waiting on it (and
  // rows_unanswered_'s), until each of them is answered or nothing more is
  // queued.
  absl::Status DrainSocket(int ps, std::vector<Call>* calls);
  // Whether a call of `calls` (or rows_unanswered_, staged_) waits for ps
  // `ps`'s reply.
  bool WaitingOn(int ps, const std::vector<Call>& calls) const;
  // The same from its link (links_[ps]), each reply's parameters read
  // straight into their place.
  absl::Status DrainLink(int ps, std::vector<Call>* calls);
  // The call of `calls` (or rows_unanswered_, staged_) waiting on ps `ps`
  // for the reply to `request_id`; null: none (an abandoned request's).
  Call* WaitingCall(int ps, uint64_t request_id, std::vector<Call>* calls);
  // One reply `m` from ps `ps` into the call it answers. `placed_bytes`
  // > 0: its payload is in the call's parameters already (DrainLink), and
  // these are its frame's bytes.
  absl::Status TakeMessage(int ps, std::vector<Call>* calls, const Message& m, size_t placed_bytes);
  // SendMessage on ps `call.ps()`'s link: the whole frame written before
  // it returns.
  absl::Status SendOnLink(const Call& call, const proto::Header& header,
                          absl::Span<const char> payload, int64_t deadline_us);
  // Ends every link whose reader is placing a reply's payload: a call
  // that fails leaves that place to its caller, not to the link.
  void BreakPlacingLinks();
  // A link that failed: the error of the request that finds it so.
  absl::Status LinkLost(int ps, const absl::Status& why);
  // Waits for rows_unanswered_'s replies alone.
  absl::Status WaitRowPushes();
  // When a request sent now must be answered (--rpc_timeout_s).
  int64_t RpcDeadline() const;
  // One call to ps `ps` about shard `shard`.
  absl::StatusOr<proto::Header> CallOne(proto::MessageType type, int shard, int ps,
                                        double timeout_s = -1);
  // Sends `payload` with `header` (one message), retrying while the queue
  // is full until the heartbeat or the deadline gives up.
  absl::Status SendMessage(const Call& call, const proto::Header& header,
                           absl::Span<const char> payload, int64_t deadline_us);
  // The reply's header: the ps's verdict. `m`'s payload goes where the
  // call wants it unless `payload_placed` (its pieces already did).
  absl::Status TakeReply(Call& call, const Message& m, bool payload_placed = false);
  // One piece of a reply in pieces, checked against the ones before it.
  absl::Status TakePiece(Call& call, const Message& m);
  absl::Status CheckWaiting(int64_t deadline_us, proto::MessageType type) const;
  // A rejoin status when a shard's requests go to a ps that the views now
  // say lost it (worker/shard_routes.h: FirstOutrankedRoute), once
  // WaitForServers chose the routes (before, during the chief's failover,
  // they are the default ones). A sync step split between a woken ps and
  // the standby that adopted its shard would otherwise wait on itself.
  absl::Status CheckRoutes() const;
  std::string ShardName(int shard) const;
  std::vector<Call> ShardCalls(proto::MessageType type, int64_t step,
                               absl::Span<const int64_t> versions);
  static void CollectReplies(const std::vector<Call>& calls, std::vector<ShardReply>* replies);

  ClusterSpec cluster_;
  TaskId self_;
  int rank_;
  ShardPlan plan_;
  PsClientOptions options_;
  const Cancellation* cancel_;  // options_.cancel, or NeverCancelled()
  uint64_t session_ = 0;        // random: names this client's requests on the ps
  uint64_t next_request_id_ = 1;
  std::vector<uint64_t> instances_;  // [ps] the ps process that answered first
  std::vector<int> route_;           // [shard] the ps serving it (WaitForServers)
  std::vector<int> pinned_;          // [shard] where SetRoute moved it, until the views agree; -1
  // WaitForServers: each ps of this host whose socket is unused yet
  // (nothing in flight) is reached over its Unix socket from now on.
  void UseLocalRoutes(const std::vector<LocalSocket>& sockets);
  bool routed_ = false;  // WaitForServers chose route_ (CheckRoutes runs from then)
  // The push/pull under way between StartPushPull and FinishPushPull.
  struct PendingStep {
    std::vector<Call> calls;
    std::vector<bool> sent;
    int num_examples = 0;
    int64_t deadline_us = 0;
    absl::Status error;  // SendShard's first
  };
  PendingStep pending_;
  // EmbeddingPush's requests, sent and not answered yet: every wait for
  // replies (WaitReplies) takes their replies too and is not over before
  // they are in.
  std::vector<Call> rows_unanswered_;
  // StageEmbeddingPrefetch's tables (staged_: their ids, then once sent
  // with the dense push its calls and the positions of each ps's rows in
  // each table's), and the last one answered (ready_: the rows, each
  // table's ids x dim), which the next forward takes.
  struct Prefetch {
    std::vector<int> tables;
    std::vector<int> dims;
    std::vector<std::vector<int64_t>> ids;
    std::vector<Call> calls;
    std::vector<std::vector<std::vector<size_t>>> split;  // [ps][staged table] -> positions (Split)
    std::vector<std::vector<float>> rows;
    bool refused = false;  // a ps refused its pull: dropped when answered
  };
  Prefetch staged_;
  Prefetch ready_;
  int64_t prefetched_tables_ = 0;
  std::vector<std::vector<char>> prefetch_out_;
  std::vector<std::vector<float>> prefetch_in_;
  // Which ps holds which of a request's ids: [ps][table] -> positions.
  using Split = std::vector<std::vector<std::vector<size_t>>>;
  // EMBEDDING_PULL calls of `tables` by `split`, their ids in out[k], their
  // rows to come in in[k]; the answered calls' rows into the tables'.
  std::vector<Call> PullCalls(absl::Span<const EmbeddingRows> tables, const Split& split,
                              std::vector<std::vector<char>>* out,
                              std::vector<std::vector<float>>* in);
  absl::Status ScatterRows(absl::Span<const Call> calls, absl::Span<const EmbeddingRows> tables,
                           const Split& split, const std::vector<std::vector<float>>& in) const;
  // Sends the staged prefetch (FinishPushPull, behind the dense push).
  absl::Status SendPrefetch(int64_t deadline_us);
  // The sent prefetch's replies into ready_, once every one is in.
  absl::Status TakePrefetch();
  // The rows of `t` from ready_, if it holds its very ids.
  bool FromPrefetch(const EmbeddingRows& t);
  std::optional<proto::StepSettings> step_settings_;
  std::vector<int> unserved_;  // shards WaitForServers found no ps for
  // EmbeddingPull's and EmbeddingPush's per-ps requests and replies, kept
  // from call to call: a step's rows are megabytes, and buffers made anew
  // for each would cost their pages' faults every step. Requests go out
  // without a copy, so these outlive the sockets (declared before them).
  std::vector<std::vector<char>> embedding_pull_out_;
  std::vector<std::vector<char>> embedding_push_out_;
  std::vector<std::vector<float>> embedding_in_;
  zmq::context_t context_;
  std::vector<zmq::socket_t> sockets_;
  std::vector<bool> used_;  // [ps] a request went out on sockets_[ps]
  // [ps] the link to the ps over its Unix socket (transport/local_links.h),
  // which its requests take instead of sockets_[ps]; null: ZeroMQ.
  std::vector<std::unique_ptr<StreamLink>> links_;
  // [ps] the request whose reply the link's reader is placing (FloatsIn).
  std::vector<uint64_t> placing_request_;
  std::unique_ptr<HeartbeatMonitor> heartbeat_;
  bool watch_heartbeat_ = true;  // false once SHUTDOWN is under way
  int64_t sent_bytes_ = 0;
  int64_t received_bytes_ = 0;
  int64_t pieces_sent_ = 0;
  int64_t pieces_received_ = 0;
};

}  // namespace pstrain

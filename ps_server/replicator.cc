#include "ps_server/replicator.h"

#include <algorithm>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "common/rejoin.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

// A reply that shows a state (parameters, an embedding table's rows) or
// says a gradient was applied.
// Not one with the previous version's parameters: the standby had that
// state before any worker saw it, and the next update writes into its
// buffer, so it goes out at once (Reply::previous_params).
bool ShowsState(const Reply& r) {
  if (r.header.has_error() && r.header.error().code() != 0) return false;
  if (r.previous_params) return false;
  return r.with_params || r.header.type() == proto::PUSH || r.header.type() == proto::PUSH_PULL ||
         r.header.type() == proto::EMBEDDING_PULL;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Replicator>> Replicator::Create(zmq::context_t& context,
                                                               const ReplicatorOptions& options,
                                                               const Clock* clock) {
  SocketOptions so = options.socket;
  so.immediate = true;  // nothing queued for a standby that is not there
  auto socket = ConnectDealer(context, options.endpoint, so);
  if (!socket.ok()) {
    return absl::Status(socket.status().code(),
                        absl::StrCat(options.standby_name, ": ", socket.status().message()));
  }
  // The standby's connection closing is how its death is seen at once.
  auto events = SocketMonitor::Watch(context, *socket, kConnectionClosed);
  if (!events.ok()) {
    return absl::Status(events.status().code(),
                        absl::StrCat(options.standby_name, ": ", events.status().message()));
  }
  return std::unique_ptr<Replicator>(
      new Replicator(options, clock, *std::move(socket), *std::move(events)));
}

bool Replicator::Disconnected() { return events_.Saw(kConnectionClosed); }

void Replicator::GiveUp(const std::string& why) {
  gave_up_ = true;
  if (!sent_.empty()) sent_.back().resend_us = 0;  // a new copy may go at once
  LOG(ERROR) << options_.standby_name << " " << why
             << ": going on without a standby until it answers";
}

void Replicator::Depose(const RequestHandler& handler, int64_t theirs, const std::string& why) {
  const int64_t mine = handler.term();
  if (theirs > mine + kMaxTermLead) {
    LOG_EVERY_N(ERROR, 100) << options_.standby_name << " refused this shard's state naming term "
                            << theirs << ", more than " << kMaxTermLead << " past this ps's "
                            << mine << ": not taken as a move of the shard";
    return;
  }
  deposed_term_ = std::max(deposed_term_, theirs);
  if (deposed_) return;
  deposed_ = true;
  LOG(ERROR) << options_.standby_name << " serves shard " << shard_ << " at term " << theirs
             << ", newer than this ps's " << mine << " (" << why
             << "): the shard moved while this ps was away. Replies that would show this copy "
                "are held until the chief restores the shard here";
}

Reply Replicator::AsRejoin(const Reply& r) const {
  return Reply{
      r.peer,
      ErrorReply(r.header, RejoinError(absl::StrCat("shard ", shard_,
                                                    " was replaced by the chief while this request "
                                                    "waited (it had moved while this ps was away): "
                                                    "register again")))};
}

int64_t Replicator::ProcessCpuMicros() {
  timespec t{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<int64_t>(t.tv_sec) * 1'000'000 + t.tv_nsec / 1000;
}

void Replicator::Observe(const RequestHandler& handler) {
  if (!handler.initialized()) return;
  shard_ = handler.shard_index();
  if (deposed_ && handler.term() >= deposed_term_) {
    deposed_ = false;
    // What was held showed the copy that the restore replaced: out with
    // the next Pump as rejoin errors.
    for (auto& [serial, r] : held_) {
      serial = 0;
      r = AsRejoin(r);
    }
    sent_.clear();  // their answers are about the replaced copy
    // The standby has the whole give-up time for the restored state.
    behind_since_us_ = clock_->NowMicros();
    LOG(WARNING) << "the chief restored shard " << shard_ << " here at term " << handler.term()
                 << ": serving it again (" << held_.size()
                 << " held replies answered with a rejoin error)";
  }
  // On every request: three numbers, not the whole ReplicaState (clocks).
  const Key now{handler.generation(), handler.version(), handler.updates()};
  if (now != key_) {
    key_ = now;
    ++serial_;
    if (behind_since_us_ == 0) behind_since_us_ = clock_->NowMicros();
  }
}

void Replicator::Hold(const RequestHandler& handler, std::vector<Reply>* replies) {
  Observe(handler);
  if (!deposed_ && (acked_ >= serial_ || gave_up_)) return;
  std::vector<Reply> pass;
  for (Reply& r : *replies) {
    if (ShowsState(r)) {
      held_.emplace_back(serial_, std::move(r));
    } else {
      pass.push_back(std::move(r));
    }
  }
  *replies = std::move(pass);
}

bool Replicator::TooLarge(int64_t bytes) {
  const absl::Status fits = FitsOneMessage(
      static_cast<size_t>(std::max<int64_t>(bytes, 0)), options_.socket.max_message_bytes,
      [] { return std::string("its state with its embedding tables"); },
      "start the ps tasks with a larger --max_message_mb, or with more ps (each holds a part of "
      "the rows)");
  if (fits.ok()) return false;
  // The standby would drop the connection on it, and again on every
  // resend: the job goes on without one, and the size is looked at again
  // a resend time later (evictions may have made room).
  too_large_until_us_ = clock_->NowMicros() + static_cast<int64_t>(options_.resend_s * 1e6);
  if (!gave_up_) GiveUp(absl::StrCat("cannot hold this shard: ", fits.message()));
  return true;
}

void Replicator::Send(RequestHandler& handler) {
  const int64_t now = clock_->NowMicros();
  if (now < too_large_until_us_ || now < refused_until_us_) return;
  proto::Header h = handler.ReplicateHeader(++seq_);
  // The tables as a delta on what the standby acknowledged last (a delta
  // on an older state than the standby's is still right: it holds every
  // change since), unless it refused one or they were replaced since.
  const bool delta = !tables_whole_ && tables_acked_epoch_ == h.replica().tables_epoch();
  if (!delta && TooLarge(handler.WholeReplicaBytesBound())) return;
  // The socket is made with `immediate`: it takes a message only once a
  // connection is up, and nothing is encoded for a standby not there.
  if (!CanSend(socket_)) return;
  const std::vector<float> state =
      handler.ReplicaPayloadNow(delta ? tables_acked_clock_ : -1, h.mutable_replica());
  if (TooLarge(static_cast<int64_t>(state.size() * sizeof(float)))) {
    tables_whole_ = true;  // the delta's changes were not sent
    return;
  }
  if (!SendRequest(socket_, h, state, /*zero_copy=*/false).ok()) return;  // not connected: later
  Sent s;
  s.seq = seq_;
  s.serial = serial_;
  s.bytes = static_cast<int64_t>(state.size() * sizeof(float));
  s.tables_clock = handler.tables_clock();
  s.tables_epoch = h.replica().tables_epoch();
  // Resent if not acknowledged within resend_s, and the time the bytes
  // take at kAssumedBytesPerS: a large state is not sent again while the
  // first copy is still on its way.
  s.resend_us = clock_->NowMicros() +
                static_cast<int64_t>(
                    1e6 * (options_.resend_s + static_cast<double>(s.bytes) / kAssumedBytesPerS));
  if (sent_.size() >= kMaxOutstanding) sent_.pop_front();
  sent_.push_back(s);
}

void Replicator::ReadAcks(RequestHandler& handler) {
  for (;;) {
    auto reply = ReceiveReply(socket_);
    if (!reply.ok()) return;
    const proto::Header& h = reply->header;
    if (h.type() != proto::REPLICATE) continue;
    // The answer to any message still outstanding counts, the newest
    // included: a standby slower than the resend time still catches up.
    auto it = std::find_if(sent_.begin(), sent_.end(),
                           [&](const Sent& s) { return s.seq == h.replica().seq(); });
    if (it == sent_.end()) continue;
    const Sent s = *it;
    sent_.erase(sent_.begin(), it + 1);  // older ones are answered by this one, or never will be
    if (h.error().code() != 0) {
      tables_whole_ = true;  // what it holds of them is not known
      refused_until_us_ = clock_->NowMicros() + static_cast<int64_t>(options_.resend_s * 1e6);
      // A newer term than this ps's own: not one from before a restore here.
      if (h.replica().term() > handler.term()) {
        Depose(handler, h.replica().term(), h.error().message());
      } else {
        LOG_EVERY_N(ERROR, 100) << options_.standby_name
                                << " refused this shard's state: " << h.error().message();
      }
      continue;
    }
    if (s.serial <= acked_) continue;  // a newer state was acknowledged already
    acked_ = s.serial;
    tables_whole_ = false;
    tables_acked_clock_ = s.tables_clock;
    tables_acked_epoch_ = s.tables_epoch;
    handler.TablesReplicated(tables_acked_clock_);
    standby_closed_ = false;
    handler.CountReplication(true, s.bytes);
  }
}

void Replicator::Release(uint64_t up_to, std::vector<Reply>* released) {
  while (!held_.empty() && held_.front().first <= up_to) {
    released->push_back(std::move(held_.front().second));
    held_.pop_front();
  }
}

void Replicator::Pump(RequestHandler& handler, std::vector<Reply>* released) {
  const int64_t now = clock_->NowMicros();
  const int64_t cpu = ProcessCpuMicros();
  // This ps was paused (frozen, suspended: time in which it spent no CPU,
  // not time it spent serving): the standby's silence over that time says
  // nothing of it, and it may have adopted the shard meanwhile. It gets
  // the whole give-up time again to answer.
  const double paused_s =
      static_cast<double>((now - last_pump_us_) - (cpu - last_pump_cpu_us_)) * 1e-6;
  if (last_pump_us_ != 0 && behind_since_us_ != 0 && paused_s >= options_.give_up_s / 2) {
    LOG(WARNING) << "this ps was paused for " << paused_s << " s with a state "
                 << options_.standby_name << " had not acknowledged: waiting up to "
                 << options_.give_up_s << " s for it again";
    behind_since_us_ = now;
  }
  last_pump_us_ = now;
  last_pump_cpu_us_ = cpu;
  Observe(handler);
  ReadAcks(handler);
  if (Disconnected()) {
    standby_closed_ = true;
    tables_whole_ = true;  // a restarted standby holds no tables
  }
  if (deposed_) return;  // held; the standby is sent nothing (it would refuse it)
  // One message in flight: the newest, until its answer or its resend time.
  const bool in_flight = !sent_.empty() && now < sent_.back().resend_us;
  if (!in_flight && acked_ < serial_ && handler.initialized()) Send(handler);
  if (acked_ >= serial_) {
    if (gave_up_) LOG(WARNING) << options_.standby_name << " has this shard's state again";
    behind_since_us_ = 0;
    gave_up_ = false;
  } else if (!gave_up_ && standby_closed_) {
    GiveUp("closed its connection (it died or restarted)");
  } else if (!gave_up_ && behind_since_us_ != 0 &&
             (now - behind_since_us_) * 1e-6 > options_.give_up_s) {
    GiveUp(absl::StrCat("has not acknowledged this shard's state for ", options_.give_up_s, " s"));
  }
  const size_t before = released->size();
  Release(gave_up_ ? serial_ : acked_, released);
  if (gave_up_) {
    for (size_t i = before; i < released->size(); ++i) handler.CountReplication(false);
  }
}

void Replicator::ReleaseAll(std::vector<Reply>* released) { Release(serial_, released); }

}  // namespace pstrain

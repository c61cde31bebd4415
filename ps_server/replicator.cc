#include "ps_server/replicator.h"

#include <algorithm>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "common/rejoin.h"
#include "glog/logging.h"
#include "transport/state_parts.h"

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
    sent_.clear();       // their answers are about the replaced copy
    stream_ = Stream();  // and so is a state going in parts
    // The standby has the whole give-up time for the restored state.
    behind_since_us_ = clock_->NowMicros();
    LOG(WARNING) << "the chief restored shard " << shard_ << " here at term " << handler.term()
                 << ": serving it again (" << held_.size()
                 << " held replies answered with a rejoin error)";
  }
  // A state going in parts that a restore here replaced (INIT and RESTORE
  // replace the tables): the state now goes instead.
  if (stream_.payload != nullptr && handler.tables_epoch() != stream_.tables_epoch) {
    stream_ = Stream();
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

void Replicator::Send(RequestHandler& handler) {
  const int64_t now = clock_->NowMicros();
  if (now < too_large_until_us_ || now < refused_until_us_) return;
  // The socket is made with `immediate`: it takes a message only once a
  // connection is up, and nothing is encoded for a standby not there.
  if (stream_.payload != nullptr) {
    if (CanSend(socket_)) SendPart();  // a state in parts goes on
    return;
  }
  proto::Header h = handler.ReplicateHeader(seq_ + 1);
  const size_t part_bytes = StatePartBytes(options_.socket.max_message_bytes, h);
  if (part_bytes < kMinStatePartBytes) return TooSmallLimit();
  if (!CanSend(socket_)) return;
  ++seq_;
  // The tables as a delta on what the standby acknowledged last (a delta
  // on an older state than the standby's is still right: it holds every
  // change since), unless it refused one or they were replaced since.
  const bool delta = !tables_whole_ && tables_acked_epoch_ == h.replica().tables_epoch();
  std::vector<float> state =
      handler.ReplicaPayloadNow(delta ? tables_acked_clock_ : -1, h.mutable_replica());
  const size_t bytes = state.size() * sizeof(float);
  if (bytes > part_bytes) {
    // Over one message: in parts, each sent once the standby answered the
    // one before (transport/state_parts.h).
    stream_.header = std::move(h);
    stream_.payload = std::make_shared<const std::vector<float>>(std::move(state));
    stream_.id = ((static_cast<uint64_t>(now) << 8) ^ seq_) | 1;  // 0: not a part
    stream_.tables_epoch = stream_.header.replica().tables_epoch();
    stream_.offset = 0;
    stream_.part_bytes = part_bytes;
    stream_.serial = serial_;
    stream_.tables_clock = handler.tables_clock();
    LOG(INFO) << "sending " << options_.standby_name << " a state of " << bytes
              << " bytes in parts of " << part_bytes << " (over one message)";
    return SendPart();
  }
  if (!SendRequest(socket_, h, state, /*zero_copy=*/false).ok()) return;  // not connected: later
  Sent s;
  s.seq = seq_;
  s.serial = serial_;
  s.bytes = static_cast<int64_t>(bytes);
  s.tables_clock = handler.tables_clock();
  s.tables_epoch = h.replica().tables_epoch();
  s.state_bytes = s.bytes;
  Track(s);
}

void Replicator::SendPart() {
  proto::Header h = stream_.header;
  h.mutable_replica()->set_seq(++seq_);
  const uint64_t total = stream_.payload->size() * sizeof(float);
  proto::StatePart* p = h.mutable_state_part();
  p->set_offset(stream_.offset);
  p->set_total(total);
  p->set_stream(stream_.id);
  const std::vector<float> part = StateSlice(*stream_.payload, stream_.offset, stream_.part_bytes);
  if (!SendRequest(socket_, h, part, /*zero_copy=*/false).ok()) return;  // not connected: later
  Sent s;
  s.seq = seq_;
  s.serial = stream_.serial;
  s.bytes = static_cast<int64_t>(part.size() * sizeof(float));
  s.tables_clock = stream_.tables_clock;
  s.tables_epoch = h.replica().tables_epoch();
  s.stream = stream_.id;
  s.part_end = stream_.offset + static_cast<uint64_t>(s.bytes);
  s.last_part = s.part_end >= total;
  s.state_bytes = static_cast<int64_t>(total);
  Track(s);
}

void Replicator::Track(Sent s) {
  // Resent if not acknowledged within resend_s, and the time the bytes
  // take at kAssumedBytesPerS: a large state is not sent again while the
  // first copy is still on its way. The last part of a state in parts is
  // answered once the standby has checked and kept the whole state: its
  // time is the whole state's.
  const int64_t bytes = s.last_part ? s.state_bytes : s.bytes;
  s.resend_us = clock_->NowMicros() +
                static_cast<int64_t>(
                    1e6 * (options_.resend_s + static_cast<double>(bytes) / kAssumedBytesPerS));
  if (sent_.size() >= kMaxOutstanding) sent_.pop_front();
  sent_.push_back(s);
}

void Replicator::TooSmallLimit() {
  // Not even a small part fits the standby's message limit beside its
  // header: the job goes on without a standby, and looks again a resend
  // time later.
  too_large_until_us_ = clock_->NowMicros() + static_cast<int64_t>(options_.resend_s * 1e6);
  if (!gave_up_) {
    GiveUp(absl::StrCat("cannot hold this shard: its messages of at most ",
                        options_.socket.max_message_bytes,
                        " bytes leave no room for a part of its state beside their header; start "
                        "the ps tasks with a larger --max_message_mb"));
  }
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
    if (h.error().code() != 0 && s.stream != 0 && s.stream != stream_.id &&
        h.replica().term() <= handler.term()) {
      // A part of a state that is done with (a copy of its last part
      // resent before the answer came, or a state dropped since): its
      // refusal says nothing of what the standby holds.
      continue;
    }
    if (h.error().code() != 0) {
      tables_whole_ = true;  // what it holds of them is not known
      stream_ = Stream();    // a state in parts starts again, as a new one
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
    if (s.stream != 0 && !s.last_part) {
      // A part of a state: the next goes (Pump) from where this one ended.
      if (s.stream == stream_.id) stream_.offset = std::max(stream_.offset, s.part_end);
      continue;
    }
    if (s.stream != 0 && s.stream == stream_.id) stream_ = Stream();  // its last part: done
    if (s.serial <= acked_) continue;  // a newer state was acknowledged already
    acked_ = s.serial;
    tables_whole_ = false;
    tables_acked_clock_ = s.tables_clock;
    tables_acked_epoch_ = s.tables_epoch;
    handler.TablesReplicated(tables_acked_clock_);
    standby_closed_ = false;
    handler.CountReplication(true, s.state_bytes);
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
    stream_ = Stream();    // nor any part of a state
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

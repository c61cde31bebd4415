#include "ps_server/access_control.h"

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

bool WorkerMayDo(proto::MessageType type) {
  switch (type) {
    case proto::REGISTER:
    case proto::PUSH:
    case proto::PULL:
    case proto::PUSH_PULL:
    case proto::REDUCE:
    case proto::OPTIMIZER_STATE:
    case proto::EMBEDDING_PULL:
    case proto::EMBEDDING_PUSH:
    case proto::BARRIER:
    case proto::HEARTBEAT:
    case proto::STATS:
      return true;
    default:
      return false;
  }
}

bool PsMayDo(proto::MessageType type) {
  return type == proto::STATS || type == proto::HEARTBEAT || type == proto::REPLICATE;
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kChief:
      return "the chief";
    case Role::kWorker:
      return "a worker";
    case Role::kPs:
      return "a ps";
    case Role::kClient:
      return "a client";
  }
  return "?";
}

bool IsWorkerSender(const proto::TaskId& t) {
  return t.type() == proto::CHIEF || t.type() == proto::WORKER;
}

absl::StatusOr<Principal> AccessControl::Check(const Peer& peer, const proto::Header& h,
                                               Refusal* refusal) const {
  auto refuse = [&](absl::Status s, bool unauthorized) -> absl::StatusOr<Principal> {
    if (refusal != nullptr) *refusal = {s, unauthorized};
    return s;
  };
  if (absl::Status s = CheckEnvelope(h); !s.ok()) return refuse(s, false);
  absl::StatusOr<Principal> who = Authenticate(peer, h);
  if (!who.ok()) return refuse(who.status(), true);
  if (absl::Status s = Authorize(*who, h); !s.ok()) return refuse(s, true);
  return who;
}

absl::Status AccessControl::CheckEnvelope(const proto::Header& h) const {
  if (h.is_reply()) return absl::InvalidArgumentError("a reply sent to a ps");
  if (h.protocol_version() != proto::PROTOCOL_VERSION_CURRENT) {
    return absl::FailedPreconditionError(
        absl::StrCat("protocol version ", h.protocol_version(), "; this ps speaks version ",
                     proto::PROTOCOL_VERSION_CURRENT));
  }
  if (!proto::MessageType_IsValid(h.type()) || h.type() == proto::MESSAGE_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat("unknown message type ", h.type()));
  }
  // A sparse ps learns its job from the chief's INIT or RESTORE.
  const bool unknown = options_.job_id_from_init && options_.job_id == 0;
  if (h.job_id() != options_.job_id && !unknown) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request for job ", absl::Hex(h.job_id()),
        ", which this ps does not serve (started from another cluster spec?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Principal> AccessControl::Authenticate(const Peer& peer,
                                                      const proto::Header& h) const {
  if (authenticated()) {
    auto it = options_.principals.find(peer.user_id);
    if (it == options_.principals.end()) {
      return absl::UnauthenticatedError("the peer is not an authenticated task of this job");
    }
    const Principal& who = it->second;
    const bool trains = who.role == Role::kChief || who.role == Role::kWorker;
    if (trains && h.rank() != who.rank) {
      return absl::PermissionDeniedError(absl::StrCat("the request claims rank ", h.rank(),
                                                      " but comes from ", peer.user_id, " (rank ",
                                                      who.rank, ")"));
    }
    return who;
  }
  // --insecure: the header's word.
  switch (h.sender().type()) {
    case proto::CHIEF:
    case proto::WORKER:
      if (h.rank() < 0 || h.rank() >= options_.num_ranks) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", h.rank(), " is not a worker rank of this job"));
      }
      return Principal{h.rank() == 0 ? Role::kChief : Role::kWorker, h.rank()};
    case proto::PS:
      return Principal{Role::kPs, -1, h.sender().index()};
    case proto::CLIENT:
      return Principal{Role::kClient, -1};
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown sender type ", h.sender().type()));
  }
}

absl::Status AccessControl::Authorize(const Principal& who, const proto::Header& h) const {
  const proto::MessageType t = h.type();
  const bool allowed = who.role == Role::kChief ||
                       (who.role == Role::kWorker && WorkerMayDo(t)) ||
                       (who.role == Role::kPs && PsMayDo(t)) ||
                       (who.role == Role::kClient && t == proto::STATS);
  if (allowed) return absl::OkStatus();
  if (t == proto::INIT || t == proto::RESTORE || t == proto::SAVE || t == proto::SHUTDOWN) {
    return absl::PermissionDeniedError(absl::StrCat("only the chief may ",
                                                    proto::MessageType_Name(t), "; ",
                                                    RoleName(who.role), " may not"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(RoleName(who.role), " may not send ", proto::MessageType_Name(t)));
}

}  // namespace pstrain

#pragma once

// How a task's sockets authenticate and encrypt: ZeroMQ's CURVE with key
// pairs derived from the job secret (transport/job_secret.h), or nothing at
// all when the user says --insecure.
//
// Secure: the ps's ROUTER is a CURVE server whose clients are checked by a
// ZAP handler (transport/handshake_guard.h) against the public keys of its
// spec's tasks; a worker's DEALERs are CURVE clients that know each ps's
// public key. A peer without the secret is refused at the handshake and
// never reaches the request handler; an accepted peer's messages carry its
// task name ("worker:1") as ZeroMQ's User-Id, which the ps trusts instead of
// the header's claims.
// Insecure: the NULL mechanism; header claims are trusted.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "transport/job_secret.h"
#include "transport/transport.h"

namespace pstrain {

struct TransportSecurity {
  std::optional<JobSecret> secret;  // nullopt: --insecure
  bool secure() const { return secret.has_value(); }
};

// From the flags' values: exactly one of `secret_file` (non-empty) and
// `insecure` must be given. InvalidArgument saying how to make a secret
// when neither is; the secret file's own errors otherwise. Logs a warning
// for --insecure and for a secret file readable by others.
absl::StatusOr<TransportSecurity> ResolveTransportSecurity(const std::string& secret_file,
                                                           bool insecure);

// Sets `options` up for a CURVE server socket of task `self`. No-op when
// insecure.
void UseCurveServer(const TransportSecurity& security, absl::string_view self,
                    SocketOptions* options);

// Sets `options` up for a CURVE client socket of `self` talking to the
// server task `server`. No-op when insecure.
void UseCurveClient(const TransportSecurity& security, absl::string_view self,
                    absl::string_view server, SocketOptions* options);

}  // namespace pstrain

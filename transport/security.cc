#include "transport/security.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {

absl::StatusOr<TransportSecurity> ResolveTransportSecurity(const std::string& secret_file,
                                                           bool insecure) {
  if (!secret_file.empty() && insecure) {
    return absl::InvalidArgumentError("give --secret_file or --insecure, not both");
  }
  TransportSecurity security;
  if (insecure) {
    LOG(WARNING) << "--insecure: this task's sockets are neither authenticated nor encrypted; "
                    "anyone who can reach them can read the model, push gradients or stop "
                    "the job. Use --secret_file=FILE outside a trusted network.";
    return security;
  }
  if (secret_file.empty()) {
    return absl::InvalidArgumentError(
        "no job secret: give --secret_file=FILE (make one with `pstrain keygen --out=FILE` and "
        "hand the same file to every task of the job; `pstrain launch` makes one for you), or "
        "--insecure to run unauthenticated on a trusted network");
  }
  auto secret = JobSecret::Load(secret_file);
  if (!secret.ok()) return secret.status();
  if (SecretFileIsShared(secret_file)) {
    LOG(WARNING) << secret_file << " is readable by other users; chmod 600 it (under "
                    "Kubernetes: defaultMode: 0400 on the Secret volume; read by the pod's own "
                    "fsGroup is fine)";
  }
  security.secret = *std::move(secret);
  return security;
}

void UseCurveServer(const TransportSecurity& security, absl::string_view self,
                    SocketOptions* options) {
  if (!security.secure()) return;
  options->curve_server_keys = security.secret->KeyPairFor(self);
}

void UseCurveClient(const TransportSecurity& security, absl::string_view self,
                    absl::string_view server, SocketOptions* options) {
  if (!security.secure()) return;
  options->curve_client_keys = security.secret->KeyPairFor(self);
  options->curve_server_public_key = security.secret->KeyPairFor(server).public_key;
}

}  // namespace pstrain

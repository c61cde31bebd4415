#pragma once

// One secret per job, from which every task derives its CURVE key pair.
//
// The secret is 32 random bytes, kept in a file as one line of 64 hex
// digits (`pstrain keygen --out=FILE` writes one with mode 0600; under
// Kubernetes it is a Secret mounted into every replica). A task's key pair
// is a pure function of the secret and the task's name:
//
//   secret_key = BLAKE2b-256(key = secret, "pstrain/curve25519/v1/" + name)
//   public_key = X25519(secret_key, basepoint)
//
// with names "chief:0", "worker:1", "ps:0" (ClusterSpec task names) and
// "client" (tools that only read counters). So a ps knows every public key
// of its job from its own spec, and a worker knows every ps's, with nothing
// exchanged. Whoever holds the secret can derive every key of the job: the
// secret is the trust boundary
// (docs/decisions/0006-curve-keys-from-one-job-secret.md).

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

inline constexpr size_t kCurveKeyBytes = 32;
using CurveKey = std::array<uint8_t, kCurveKeyBytes>;

struct CurveKeyPair {
  CurveKey public_key;
  CurveKey secret_key;
};

// The identity name of tools (stats readers) that are not cluster tasks.
inline constexpr absl::string_view kClientIdentity = "client";

class JobSecret {
 public:
  // 32 fresh random bytes from the OS (libsodium's randombytes).
  static JobSecret Generate();

  // Reads a secret file. NotFound when missing; InvalidArgument naming the
  // file when it is not 64 hex digits (surrounding whitespace allowed).
  static absl::StatusOr<JobSecret> Load(const std::string& path);

  // Not a secret: BLAKE2b-256 of `label`, which anyone can compute. What
  // an --insecure job's tasks derive their Unix socket links' keys and
  // directory from (transport/local_route.h, LinkSecret), so that the
  // links work as a CURVE job's do; they then prove nothing, as --insecure's
  // TCP admits anyone who reaches it.
  static JobSecret Public(absl::string_view label);

  // Parses the file format (64 hex digits, whitespace around allowed).
  static absl::StatusOr<JobSecret> Parse(absl::string_view text, absl::string_view origin);

  // Writes the secret to a new file with mode 0600 (AlreadyExists when the
  // file exists: a secret is never overwritten by accident).
  absl::Status WriteNewFile(const std::string& path) const;

  // "0123...ef\n": the file's contents.
  std::string ToFileContents() const;

  // The CURVE key pair of the task (or tool) called `name`.
  CurveKeyPair KeyPairFor(absl::string_view name) const;

  // What the task `name` proves itself with on a ps's Unix socket
  // (transport/local_route.h): 64 hex digits of
  // BLAKE2b-256(key = secret, "pstrain/plain/v1/" + name).
  std::string LocalPassword(absl::string_view name) const;
  // The job's directory name under the user's private directory: 16 hex
  // digits of BLAKE2b-256(key = secret, "pstrain/ipc/v1").
  std::string LocalTag() const;

 private:
  explicit JobSecret(const std::array<uint8_t, 32>& bytes) : bytes_(bytes) {}
  // BLAKE2b-256(key = secret, label): every value derived from the secret.
  std::array<uint8_t, 32> Derive(absl::string_view label) const;

  std::array<uint8_t, 32> bytes_;
};

// True when a file is open to its group or others (a warning, not an
// error: Kubernetes mounts Secrets 0644 unless told otherwise), except
// read by its group when that group is this process's own (its effective
// or a supplementary group): Kubernetes makes a Secret volume 0440 in a
// pod with an fsGroup whatever its defaultMode, and the group is the
// pod's, which no manifest can avoid.
bool SecretFileIsShared(const std::string& path);

}  // namespace pstrain

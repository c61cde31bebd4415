#include "transport/job_secret.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr absl::string_view kDerivationLabel = "pstrain/curve25519/v1/";

// Whether `gid` is this process's effective group or one of its
// supplementary groups.
bool IsOwnGroup(gid_t gid) {
  if (gid == getegid()) return true;
  const int n = getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  const int got = getgroups(n, groups.data());
  return got > 0 && std::find(groups.begin(), groups.begin() + got, gid) != groups.begin() + got;
}

void InitSodium() {
  // Idempotent and thread-safe; fails only without a usable random source.
  CHECK_GE(sodium_init(), 0) << "libsodium cannot initialise (no random source?)";
}

bool IsHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isxdigit(c)) return false;
  }
  return true;
}

}  // namespace

JobSecret JobSecret::Generate() {
  InitSodium();
  std::array<uint8_t, 32> bytes;
  randombytes_buf(bytes.data(), bytes.size());
  return JobSecret(bytes);
}

JobSecret JobSecret::Public(absl::string_view label) {
  InitSodium();
  std::array<uint8_t, 32> bytes;
  crypto_generichash(bytes.data(), bytes.size(),
                     reinterpret_cast<const unsigned char*>(label.data()), label.size(), nullptr,
                     0);
  return JobSecret(bytes);
}

absl::StatusOr<JobSecret> JobSecret::Parse(absl::string_view text, absl::string_view origin) {
  const absl::string_view hex = absl::StripAsciiWhitespace(text);
  if (hex.size() != 64 || !IsHex(hex)) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": not a pstrain job secret (expected one line of 64 hex digits; make one with "
        "`pstrain keygen --out=FILE`)"));
  }
  const std::string raw = absl::HexStringToBytes(hex);
  std::array<uint8_t, 32> bytes;
  std::memcpy(bytes.data(), raw.data(), bytes.size());
  return JobSecret(bytes);
}

absl::StatusOr<JobSecret> JobSecret::Load(const std::string& path) {
  auto text = ReadFilePrefix(path, 4096);  // a secret is 65 bytes; /dev/zero is endless
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("--secret_file: ", text.status().message()));
  }
  if (text->size() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a pstrain job secret (more than 4096 bytes)"));
  }
  return Parse(*text, path);
}

std::string JobSecret::ToFileContents() const {
  return absl::StrCat(
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes_.data()),
                                               bytes_.size())),
      "\n");
}

absl::Status JobSecret::WriteNewFile(const std::string& path) const {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat(path, ": exists already; a secret is never overwritten (remove it first)"));
    }
    return absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(err)));
  }
  const std::string contents = ToFileContents();
  const ssize_t n = ::write(fd, contents.data(), contents.size());
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(contents.size()) || !synced) {
    ::unlink(path.c_str());
    return absl::InternalError(absl::StrCat(path, ": cannot write: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

std::array<uint8_t, 32> JobSecret::Derive(absl::string_view label) const {
  InitSodium();
  std::array<uint8_t, 32> out;
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(label.data()),
                     label.size(), bytes_.data(), bytes_.size());
  return out;
}

CurveKeyPair JobSecret::KeyPairFor(absl::string_view name) const {
  CurveKeyPair pair;
  pair.secret_key = Derive(absl::StrCat(kDerivationLabel, name));
  crypto_scalarmult_base(pair.public_key.data(), pair.secret_key.data());
  return pair;
}

std::string JobSecret::LocalPassword(absl::string_view name) const {
  const std::array<uint8_t, 32> out = Derive(absl::StrCat("pstrain/plain/v1/", name));
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(out.data()), out.size()));
}

std::string JobSecret::LocalTag() const {
  const std::array<uint8_t, 32> out = Derive("pstrain/ipc/v1");
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(out.data()), 8));
}

bool SecretFileIsShared(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  const mode_t open_to = st.st_mode & (S_IRWXG | S_IRWXO);
  return open_to != 0 && !(open_to == S_IRGRP && IsOwnGroup(st.st_gid));
}

}  // namespace pstrain

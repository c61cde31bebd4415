#include "transport/local_route.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace pstrain {
namespace {

constexpr absl::string_view kScheme = "unix://";

std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos || slash == 0 ? std::string("/") : path.substr(0, slash);
}

// `path` is a directory (not a link) of this user, open to nobody else.
absl::Status CheckPrivateDir(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot be read (", std::strerror(errno), ")"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a directory (a link?)"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": owned by uid ", st.st_uid, ", not this user (", ::geteuid(), ")"));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": open to its group or others (mode ",
                                                      absl::StrCat(absl::Hex(st.st_mode & 07777)),
                                                      "; it must be 700)"));
  }
  return absl::OkStatus();
}

// Nothing listens at Unix socket `path` (a connection is refused).
bool NobodyListens(const std::string& path) {
  const absl::StatusOr<sockaddr_un> address = UnixAddress(path);
  if (!address.ok()) return false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool refused =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0 &&
      errno == ECONNREFUSED;
  ::close(fd);
  return refused;
}

absl::Status MakePrivateDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make ", path, ": ", std::strerror(errno)));
  }
  return CheckPrivateDir(path);
}

}  // namespace

std::optional<JobSecret> LinkSecret(const std::optional<JobSecret>& job_secret,
                                    const ClusterSpec& cluster) {
  if (job_secret.has_value()) return job_secret;
  if (cluster.sparse()) return std::nullopt;
  return JobSecret::Public(absl::StrCat("pstrain/insecure-job/v1/", absl::Hex(cluster.JobId())));
}

std::string LocalDir(const JobSecret& secret, absl::string_view base) {
  return absl::StrCat(base, "/pstrain-", ::geteuid(), "/", secret.LocalTag());
}

absl::Status PrepareLocalDir(const std::string& dir) {
  if (absl::Status s = MakePrivateDir(Parent(dir)); !s.ok()) return s;
  return MakePrivateDir(dir);
}

absl::Status CheckLocalDir(const std::string& dir) {
  if (absl::Status s = CheckPrivateDir(Parent(dir)); !s.ok()) return s;
  return CheckPrivateDir(dir);
}

std::string LocalEndpoint(const std::string& dir, absl::string_view task_name, int port) {
  return absl::StrCat(kScheme, dir, "/", absl::StrReplaceAll(task_name, {{":", "-"}}), "-", port,
                      "-", ::getpid(), ".sock");
}

int RemoveStaleSockets(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, ".sock")) continue;
    const size_t dash = name.find_last_of('-');
    int64_t pid = 0;
    if (dash == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(name).substr(dash + 1, name.size() - dash - 6), &pid) ||
        pid <= 0) {
      continue;
    }
    // Gone from this pid namespace, and nobody listens (a ps of another
    // namespace sharing /tmp would).
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH &&
        NobodyListens(entry.path().string()) && ::unlink(entry.path().c_str()) == 0) {
      ++removed;
    }
  }
  return removed;
}

int RemoveStaleJobDirs(const std::string& own) {
  constexpr auto kQuiet = std::chrono::minutes(1);
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(Parent(own), ec)) {
    std::error_code entry_ec;
    if (entry.path() == std::filesystem::path(own) ||
        !std::filesystem::is_directory(entry.symlink_status(entry_ec))) {
      continue;
    }
    // Its last change before the stale sockets' removal makes one.
    const auto changed = std::filesystem::last_write_time(entry.path(), entry_ec);
    RemoveStaleSockets(entry.path().string());
    if (entry_ec || std::filesystem::file_time_type::clock::now() - changed < kQuiet) continue;
    if (::rmdir(entry.path().c_str()) == 0) ++removed;  // fails while anything is in it
  }
  return removed;
}

std::string LocalPath(const std::string& endpoint) {
  return absl::StartsWith(endpoint, kScheme) ? endpoint.substr(kScheme.size()) : endpoint;
}

absl::StatusOr<LocalFileId> LocalFileIdOf(const std::string& endpoint) {
  const std::string path = LocalPath(endpoint);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot be read (", std::strerror(errno), ")"));
  }
  return LocalFileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

absl::Status CheckLocalEndpoint(const std::string& endpoint, const std::string& dir,
                                const LocalFileId& file) {
  if (!absl::StartsWith(endpoint, kScheme)) {
    return absl::FailedPreconditionError(absl::StrCat(endpoint, ": not a unix:// endpoint"));
  }
  const std::string path = endpoint.substr(kScheme.size());
  const std::string prefix = dir + "/";
  if (!absl::StartsWith(path, prefix) || path.size() == prefix.size() ||
      path.find('/', prefix.size()) != std::string::npos) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not directly inside this job's private directory ", dir));
  }
  if (absl::Status s = CheckLocalDir(dir); !s.ok()) return s;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not here (", std::strerror(errno),
                                                      "): another host's, or another "
                                                      "container's file system"));
  }
  if (!S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a socket of this user"));
  }
  if (static_cast<uint64_t>(st.st_dev) != file.dev ||
      static_cast<uint64_t>(st.st_ino) != file.inode) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not the file the ps bound (another was put in its place)"));
  }
  return absl::OkStatus();
}

void RemoveLocalEndpoint(const std::string& endpoint) {
  if (!absl::StartsWith(endpoint, kScheme)) return;
  const std::string path = endpoint.substr(kScheme.size());
  ::unlink(path.c_str());
  ::rmdir(Parent(path).c_str());
}

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(path,
                                                   ": longer than a Unix socket's path may be (",
                                                   sizeof(address.sun_path) - 1, " bytes)"));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

bool SameHost(const HostPort& self, const HostPort& peer) {
  return IsLoopbackHost(peer.host) ||
         absl::AsciiStrToLower(self.host) == absl::AsciiStrToLower(peer.host);
}

}  // namespace pstrain

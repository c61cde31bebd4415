#include "common/free_ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// A socket bound to port 0 of the loopback interface of `host`'s family,
// and the port the OS chose.
struct ReservedPort {
  int fd = -1;
  int port = 0;
};

absl::StatusOr<ReservedPort> ReserveFreePort(const std::string& host) {
  const bool v6 = host.find(':') != std::string::npos;
  const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_storage storage = {};
  socklen_t len = v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&storage);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&storage);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  auto* addr = reinterpret_cast<sockaddr*>(&storage);
  if (bind(fd, addr, len) != 0 || getsockname(fd, addr, &len) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("cannot pick a free port for ", host, ": ", std::strerror(err)));
  }
  const uint16_t port = v6 ? reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port
                           : reinterpret_cast<sockaddr_in*>(&storage)->sin_port;
  return ReservedPort{fd, ntohs(port)};
}

}  // namespace

absl::StatusOr<ClusterSpec> WithFreePorts(const ClusterSpec& spec) {
  ClusterSpec copy = spec;
  std::vector<int> reserved;
  absl::Status status;
  for (const TaskId& id : spec.AllTasks()) {
    auto hp = ParseHostPort(spec.Address(id));
    if (!hp.ok() || !IsLoopbackHost(hp->host)) continue;
    auto port = ReserveFreePort(hp->host);
    if (!port.ok()) {
      status = port.status();
      break;
    }
    reserved.push_back(port->fd);
    hp->port = port->port;
    copy.set_address(id, hp->ToString());
  }
  for (int fd : reserved) close(fd);
  if (!status.ok()) return status;
  return ClusterSpec::FromJson(copy.ToJson(), "free-port spec");
}

absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int n, const std::set<int>& exclude) {
  std::vector<int> held;  // every socket reserved, excluded ports included
  std::vector<int> ports;
  absl::Status status;
  // The OS may hand out an excluded port: hold it and ask again, a bounded
  // number of times.
  for (int attempt = 0; static_cast<int>(ports.size()) < n && attempt < 4 * n + 16; ++attempt) {
    auto port = ReserveFreePort("127.0.0.1");
    if (!port.ok()) {
      status = port.status();
      break;
    }
    held.push_back(port->fd);
    if (exclude.count(port->port) == 0) ports.push_back(port->port);
  }
  for (int fd : held) close(fd);
  if (!status.ok()) return status;
  if (static_cast<int>(ports.size()) < n) {
    return absl::InternalError(absl::StrCat("cannot pick ", n, " free ports of 127.0.0.1"));
  }
  return ports;
}

}  // namespace pstrain

#pragma once

// A private network on this machine, for jobs that should see what a
// network does (`pstrain launch --isolate=netns`) and for the multi-host
// tests: a bridge in a network namespace of its own, and one namespace per
// host, each joined to the bridge by a veth pair, with its own address
// (10.77.0.2, .3, ...), its loopback, and names that resolve per namespace
// as Kubernetes service names do (`ip netns exec` mounts
// /etc/netns/<namespace>/hosts over /etc/hosts). Each host's link may be
// rate-limited (tc tbf on its egress; this kernel has no netem, so there is
// no delay or loss emulation). No route leads out: traffic stays on the
// bridge.
//
//   ASSIGN_OR_RETURN(auto net, NetnsHarness::Create({.link_rate = "1gbit"}));
//   ASSIGN_OR_RETURN(const NetnsHost ps0, net->AddHost("ps-0.pstrain.svc"));
//   ...
//   RETURN_IF_ERROR(net->WriteHosts());
//   spawn {"ip", "netns", "exec", ps0.netns, "ps_server", ...}
//
// Everything is removed by the destructor (namespaces, veths with them,
// /etc/netns/<namespace>/), also after a failure or Ctrl-C; a harness of a
// process that was SIGKILLed is removed by the next Create (RemoveStale).
// Root only: Create says so otherwise (tests skip with that reason).
//
// Thread safety: none.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

struct NetnsOptions {
  // Each host's egress rate, as tc writes rates ("1gbit", "100mbit"); "":
  // unlimited.
  std::string link_rate;
};

struct NetnsHost {
  std::string name;     // "ps-0.pstrain.svc": resolves in every namespace of the harness
  std::string netns;    // "pstn-1234-3": its network namespace
  std::string address;  // "10.77.0.4"
};

// Bytes per second of a tc rate ("1gbit", "100mbit", "500kbit", "8000bit"):
// what --link_rate takes. InvalidArgument naming the flag otherwise.
absl::StatusOr<double> RateBytesPerSecond(const std::string& rate);

class NetnsHarness {
 public:
  // The bridge's namespace. FailedPrecondition when not root or when `ip`
  // is missing; InvalidArgument for a link rate tc refuses.
  static absl::StatusOr<std::unique_ptr<NetnsHarness>> Create(const NetnsOptions& options);
  ~NetnsHarness();

  // A new namespace on the bridge, with the next address, named `name`.
  absl::StatusOr<NetnsHost> AddHost(const std::string& name);
  // Writes every namespace's hosts file: every host's name and address.
  // Call it after the last AddHost.
  absl::Status WriteHosts() const;
  const std::vector<NetnsHost>& hosts() const { return hosts_; }
  const std::string& bridge_netns() const { return bridge_netns_; }
  // {"/usr/sbin/ip", "netns", "exec", NETNS}: what runs a command in `host`.
  std::vector<std::string> ExecPrefix(const NetnsHost& host) const;
  // The `ip` binary.
  const std::string& ip() const { return ip_; }

  // Removes the namespaces (and hosts files) of harnesses whose process is
  // gone ("pstn-<pid>-..." with no such pid).
  static void RemoveStale();

 private:
  NetnsHarness() = default;
  absl::Status Ip(const std::vector<std::string>& args) const;
  absl::Status InNetns(const std::string& netns, const std::vector<std::string>& command) const;

  NetnsOptions options_;
  int number_ = 0;  // of this process's harnesses
  std::string ip_;
  std::string tc_;
  std::string prefix_;  // "pstn-<pid>-<n>"
  std::string bridge_netns_;
  std::vector<NetnsHost> hosts_;
  std::vector<std::string> created_;  // namespaces to delete
};

}  // namespace pstrain

#include "launcher/supervisor/netns_harness.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/child_process.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr char kPrefix[] = "pstn-";
constexpr double kCommandTimeoutS = 30;
constexpr int kMaxHosts = 250;

std::atomic<int> next_harness{0};

std::string Which(const std::string& name) {
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

}  // namespace

absl::StatusOr<double> RateBytesPerSecond(const std::string& rate) {
  const std::string r = absl::AsciiStrToLower(rate);
  for (const auto& [suffix, bits] : std::vector<std::pair<std::string, double>>{
           {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}}) {
    double value = 0;
    if (absl::EndsWith(r, suffix) &&
        absl::SimpleAtod(r.substr(0, r.size() - suffix.size()), &value) && value > 0) {
      return value * bits / 8;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--link_rate=", rate, ": a rate such as 1gbit, 10gbit, 100mbit or 500kbit"));
}


absl::StatusOr<std::unique_ptr<NetnsHarness>> NetnsHarness::Create(const NetnsOptions& options) {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "network namespaces need root (run as root, or without --isolate=netns)");
  }
  std::unique_ptr<NetnsHarness> h(new NetnsHarness());
  h->options_ = options;
  h->ip_ = Which("ip");
  h->tc_ = Which("tc");
  if (h->ip_.empty()) return absl::FailedPreconditionError("`ip` not found (apt-get install iproute2)");
  if (!options.link_rate.empty()) {
    RETURN_IF_ERROR(RateBytesPerSecond(options.link_rate).status());
    if (h->tc_.empty()) return absl::FailedPreconditionError("`tc` not found (apt-get install iproute2)");
  }
  RemoveStale();
  h->number_ = next_harness++;
  h->prefix_ = absl::StrCat(kPrefix, getpid(), "-", h->number_);
  h->bridge_netns_ = h->prefix_ + "-br";
  RETURN_IF_ERROR(h->Ip({"netns", "add", h->bridge_netns_}));
  h->created_.push_back(h->bridge_netns_);
  RETURN_IF_ERROR(h->InNetns(h->bridge_netns_, {h->ip_, "link", "add", "br0", "type", "bridge"}));
  RETURN_IF_ERROR(h->InNetns(h->bridge_netns_, {h->ip_, "link", "set", "br0", "up"}));
  return h;
}

NetnsHarness::~NetnsHarness() {
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    if (absl::Status s = Ip({"netns", "del", *it}); !s.ok()) LOG(WARNING) << s.message();
    std::error_code ec;
    std::filesystem::remove_all(absl::StrCat("/etc/netns/", *it), ec);
  }
}

absl::Status NetnsHarness::Ip(const std::vector<std::string>& args) const {
  ASSIGN_OR_RETURN(const CommandResult r, RunCommand({ip_, args, {}, {}}, kCommandTimeoutS));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("ip ", absl::StrJoin(args, " "), ": ",
                                            DescribeExit(r.exit_code), ": ",
                                            absl::StripTrailingAsciiWhitespace(r.output)));
  }
  return absl::OkStatus();
}

absl::Status NetnsHarness::InNetns(const std::string& netns,
                                   const std::vector<std::string>& command) const {
  std::vector<std::string> args = {"netns", "exec", netns};
  args.insert(args.end(), command.begin(), command.end());
  return Ip(args);
}

absl::StatusOr<NetnsHost> NetnsHarness::AddHost(const std::string& name) {
  const int index = static_cast<int>(hosts_.size());
  if (index >= kMaxHosts) return absl::ResourceExhaustedError("at most 250 hosts in one harness");
  NetnsHost host{name, absl::StrCat(prefix_, "-", index), absl::StrCat("10.77.0.", index + 2)};
  // veth names live briefly in this namespace: unique per process, harness
  // and host, at most 15 characters.
  const std::string veth =
      absl::StrFormat("p%06x%02x%02x", getpid() & 0xffffff, number_ & 0xff, index);
  RETURN_IF_ERROR(Ip({"netns", "add", host.netns}));
  created_.push_back(host.netns);
  RETURN_IF_ERROR(Ip({"link", "add", veth + "a", "type", "veth", "peer", "name", veth + "b"}));
  RETURN_IF_ERROR(Ip({"link", "set", veth + "a", "netns", host.netns}));
  RETURN_IF_ERROR(Ip({"link", "set", veth + "b", "netns", bridge_netns_}));
  RETURN_IF_ERROR(InNetns(bridge_netns_, {ip_, "link", "set", veth + "b", "master", "br0"}));
  RETURN_IF_ERROR(InNetns(bridge_netns_, {ip_, "link", "set", veth + "b", "up"}));
  RETURN_IF_ERROR(InNetns(host.netns, {ip_, "link", "set", veth + "a", "name", "eth0"}));
  RETURN_IF_ERROR(InNetns(host.netns, {ip_, "addr", "add", host.address + "/24", "dev", "eth0"}));
  RETURN_IF_ERROR(InNetns(host.netns, {ip_, "link", "set", "eth0", "up"}));
  RETURN_IF_ERROR(InNetns(host.netns, {ip_, "link", "set", "lo", "up"}));
  if (!options_.link_rate.empty()) {
    ASSIGN_OR_RETURN(const double bytes_per_s, RateBytesPerSecond(options_.link_rate));
    // A bucket of 10 ms at the rate (at least 64 KiB: a GSO segment) lets
    // the kernel's timer keep the rate up.
    const int64_t burst = std::max<int64_t>(64 * 1024, static_cast<int64_t>(bytes_per_s / 100));
    RETURN_IF_ERROR(InNetns(host.netns, {tc_, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
                                         options_.link_rate, "burst", absl::StrCat(burst),
                                         "latency", "100ms"}));
  }
  hosts_.push_back(host);
  return host;
}

absl::Status NetnsHarness::WriteHosts() const {
  std::string text = "127.0.0.1 localhost\n::1 localhost ip6-localhost\n";
  for (const NetnsHost& h : hosts_) absl::StrAppend(&text, h.address, " ", h.name, "\n");
  for (const NetnsHost& h : hosts_) {
    const std::string dir = absl::StrCat("/etc/netns/", h.netns);
    RETURN_IF_ERROR(MakeDirs(dir));
    RETURN_IF_ERROR(WriteFileAtomic(dir + "/hosts", text));
  }
  return absl::OkStatus();
}

std::vector<std::string> NetnsHarness::ExecPrefix(const NetnsHost& host) const {
  return {ip_, "netns", "exec", host.netns};
}

void NetnsHarness::RemoveStale() {
  const std::string ip = Which("ip");
  if (ip.empty()) return;
  auto list = RunCommand({ip, {"netns", "list"}, {}, {}}, kCommandTimeoutS);
  if (!list.ok()) return;
  for (absl::string_view line : absl::StrSplit(list->output, '\n', absl::SkipEmpty())) {
    const std::string name(line.substr(0, line.find(' ')));
    if (!absl::StartsWith(name, kPrefix)) continue;
    const std::vector<std::string> parts = absl::StrSplit(name, '-');
    int pid = 0;
    if (parts.size() < 3 || !absl::SimpleAtoi(parts[1], &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // its harness lives
    LOG(INFO) << "removing the network namespace " << name << " of a harness whose process is gone";
    (void)RunCommand({ip, {"netns", "del", name}, {}, {}}, kCommandTimeoutS);
    std::error_code ec;
    std::filesystem::remove_all(absl::StrCat("/etc/netns/", name), ec);
  }
}

}  // namespace pstrain

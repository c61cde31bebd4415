#include "benchmarks/wire_bench_driver.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/child_process.h"
#include "common/clock.h"
#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "common/status_macros.h"
#include "transport/job_secret.h"

namespace pstrain {
namespace {

constexpr size_t kTailLines = 30;

// One child process and what it printed: the lines the driver waits for
// (READY, WARM, RESULT, ENDPOINT) and the last others (its log, for errors).
struct Child {
  std::string name;
  ChildProcess process;
  std::string partial;
  std::vector<std::string> lines;
  std::deque<std::string> tail;

  bool Has(absl::string_view prefix) const { return !Line(prefix).empty(); }
  std::string Line(absl::string_view prefix) const {
    for (const std::string& l : lines) {
      if (absl::StartsWith(l, prefix)) return l;
    }
    return "";
  }
  std::string Describe() const {
    return absl::StrCat(name, " (",
                        process.exited() ? DescribeExit(process.exit_code()) : "running",
                        "), last lines:\n    ", absl::StrJoin(tail, "\n    "));
  }
};

// A measurement's processes. Whatever is still running when it goes is
// killed and reaped.
class Children {
 public:
  ~Children() {
    for (auto& c : children_) c->process.Signal(SIGKILL);
    for (auto& c : children_) {
      while (!c->process.Reap()) usleep(1000);
    }
  }

  absl::StatusOr<Child*> Spawn(const std::string& name, const std::string& binary,
                               std::vector<std::string> args) {
    ASSIGN_OR_RETURN(ChildProcess p, ChildProcess::Spawn({binary, std::move(args), {}, {}}));
    children_.push_back(std::make_unique<Child>(Child{name, std::move(p), "", {}, {}}));
    return children_.back().get();
  }

  // Reads the children's output until `done()`; DeadlineExceeded past
  // `deadline_us`, Aborted when a child's output ends (it exited) before
  // it printed its RESULT, unless `exits` (they all are to), each naming
  // `what` and the children's last lines.
  absl::Status WaitFor(const std::string& what, int64_t deadline_us,
                       const std::function<bool()>& done, bool exits = false) {
    while (!done()) {
      if (MonotonicMicros() > deadline_us) return Failed(absl::DeadlineExceededError(what));
      std::vector<pollfd> fds;
      std::vector<Child*> open;
      for (auto& c : children_) {
        if (c->process.output_fd() < 0) continue;
        fds.push_back({c->process.output_fd(), POLLIN, 0});
        open.push_back(c.get());
      }
      if (fds.empty()) return Failed(absl::AbortedError(what));
      if (poll(fds.data(), fds.size(), 50) <= 0) continue;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!Read(*open[i]) && !exits && !open[i]->Has("RESULT")) {
          return Failed(absl::AbortedError(absl::StrCat(what, ": ", open[i]->name, " exited")));
        }
      }
    }
    return absl::OkStatus();
  }

  // Waits for every child to exit by itself (output closed, reaped) and
  // checks that each exited 0.
  absl::Status WaitAllExited(int64_t deadline_us) {
    RETURN_IF_ERROR(WaitFor(
        "the processes to exit", deadline_us,
        [&] {
          return std::all_of(children_.begin(), children_.end(),
                             [](const auto& c) { return c->process.output_fd() < 0; });
        },
        /*exits=*/true));
    for (auto& c : children_) {
      while (!c->process.Reap()) {
        if (MonotonicMicros() > deadline_us) return Failed(absl::DeadlineExceededError("reaping"));
        usleep(1000);
      }
      if (c->process.exit_code() != 0) return Failed(absl::InternalError(c->name + " failed"));
    }
    return absl::OkStatus();
  }

 private:
  // Reads what `c` wrote; false once its output has closed.
  bool Read(Child& c) {
    char buf[65536];
    const ssize_t n = read(c.process.output_fd(), buf, sizeof(buf));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) return true;
      c.process.CloseOutput();
      (void)c.process.Reap();
      return false;
    }
    c.partial.append(buf, static_cast<size_t>(n));
    for (size_t eol; (eol = c.partial.find('\n')) != std::string::npos;) {
      std::string line = c.partial.substr(0, eol);
      c.partial.erase(0, eol + 1);
      if (absl::StartsWith(line, "READY") || absl::StartsWith(line, "WARM") ||
          absl::StartsWith(line, "RESULT") || absl::StartsWith(line, "ENDPOINT")) {
        c.lines.push_back(std::move(line));
      } else {
        c.tail.push_back(std::move(line));
        if (c.tail.size() > kTailLines) c.tail.pop_front();
      }
    }
    return true;
  }

  absl::Status Failed(const absl::Status& s) {
    std::vector<std::string> what;
    for (auto& c : children_) {
      (void)c->process.Reap();
      what.push_back(c->Describe());
    }
    return absl::Status(s.code(), absl::StrCat(s.message(), "\n  ", absl::StrJoin(what, "\n  ")));
  }

  std::vector<std::unique_ptr<Child>> children_;
};

struct Cell {
  std::string security;
  int64_t floats = 0;
  int workers = 0;
};

struct Measurement {
  double aggregate_bytes_per_s = 0;
  double round_trips_per_s_per_worker = 0;
  double p50_round_trip_us = 0;
  double p10_round_trip_us = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// From every client's "RESULT trips=T seconds=S p50_us=P p10_us=Q".
absl::StatusOr<Measurement> Collect(const std::vector<Child*>& clients, int64_t floats) {
  Measurement m;
  std::vector<double> p50s, p10s;
  for (const Child* c : clients) {
    long long trips = 0, p50 = 0, p10 = 0;
    double seconds = 0;
    const std::string line = c->Line("RESULT");
    if (std::sscanf(line.c_str(), "RESULT trips=%lld seconds=%lf p50_us=%lld p10_us=%lld", &trips,
                    &seconds, &p50, &p10) != 4 ||
        seconds <= 0) {
      return absl::InternalError(absl::StrCat(c->name, " said '", line, "'"));
    }
    const double rate = static_cast<double>(trips) / seconds;
    m.aggregate_bytes_per_s += rate * 2.0 * static_cast<double>(floats) * sizeof(float);
    m.round_trips_per_s_per_worker += rate / static_cast<double>(clients.size());
    p50s.push_back(static_cast<double>(p50));
    p10s.push_back(static_cast<double>(p10));
  }
  m.p50_round_trip_us = Median(p50s);
  m.p10_round_trip_us = Median(p10s);
  return m;
}

// Gives the clients their start signal and, once every one has warmed
// up (`warm_up`), the signal to start timing, so that they time the same
// seconds however long their warm-up trips took; waits for their results.
absl::StatusOr<Measurement> TimeClients(Children& children, const std::vector<Child*>& clients,
                                        const Cell& cell, bool warm_up, int64_t deadline) {
  const auto all = [&](absl::string_view line) {
    return std::all_of(clients.begin(), clients.end(), [&](Child* c) { return c->Has(line); });
  };
  RETURN_IF_ERROR(
      children.WaitFor("the clients' first round trips", deadline, [&] { return all("READY"); }));
  for (Child* c : clients) c->process.Signal(SIGUSR1);
  if (warm_up) {
    RETURN_IF_ERROR(
        children.WaitFor("the clients' warm-up", deadline, [&] { return all("WARM"); }));
    for (Child* c : clients) c->process.Signal(SIGUSR1);
  }
  RETURN_IF_ERROR(children.WaitFor("the clients' results", deadline, [&] {
    return std::all_of(clients.begin(), clients.end(), [](Child* c) { return c->Has("RESULT"); });
  }));
  return Collect(clients, cell.floats);
}

// The echo's: CURVE for "curve"; plaintext for the others, whose
// PUSH_PULL is not encrypted either ("plain", and the ps's Unix socket:
// "curve-local", "plain-local").
std::vector<std::string> SecurityArgs(const Cell& cell, const std::string& secret_file) {
  return {cell.security == "curve" ? "--secret_file=" + secret_file : "--secret_file="};
}

// Whether a cell's job has a secret (CURVE).
bool Curve(const Cell& cell) { return absl::StartsWith(cell.security, "curve"); }

// PUSH_PULL's clients': "*-local" reaches the ps over its Unix socket.
std::vector<std::string> ClientSecurityArgs(const Cell& cell, const std::string& secret_file) {
  return {Curve(cell) ? "--secret_file=" + secret_file : "--secret_file=",
          absl::StrCat("--colocated=", absl::EndsWith(cell.security, "-local") ? "true" : "false")};
}

absl::StatusOr<Measurement> MeasureEcho(const WireBenchOptions& o, const std::string& work,
                                        const Cell& cell, const std::string& dir,
                                        const std::string& secret_file) {
  const int64_t deadline = MonotonicMicros() + static_cast<int64_t>(o.timeout_s * 1e6);
  const std::string timeout = absl::StrCat("--timeout_s=", o.timeout_s);
  const std::string floats = absl::StrCat("--floats=", cell.floats);
  Children children;
  const std::string echo_work = "--echo_work=" + work;
  std::vector<std::string> args = {"--role=echo_server", floats, timeout, echo_work};
  // In the run's directory (removed at its end), so the path is short
  // enough for a Unix socket and its own.
  if (o.echo_transport != "tcp") args.push_back("--endpoint=ipc://" + dir + "/echo.sock");
  const std::string transport = "--echo_transport=" + o.echo_transport;
  args.push_back(transport);
  for (std::string& a : SecurityArgs(cell, secret_file)) args.push_back(a);
  ASSIGN_OR_RETURN(Child* const echo, children.Spawn("echo", o.self, args));
  RETURN_IF_ERROR(
      children.WaitFor("the echo's endpoint", deadline, [&] { return echo->Has("ENDPOINT"); }));
  const std::string endpoint = echo->Line("ENDPOINT").substr(9);
  std::vector<Child*> clients;
  for (int r = 0; r < cell.workers; ++r) {
    args = {"--role=echo_client",
            "--endpoint=" + endpoint,
            absl::StrCat("--rank=", r),
            floats,
            timeout,
            absl::StrCat("--seconds=", o.seconds),
            absl::StrCat("--warmup_s=", o.warmup_s),
            absl::StrCat("--gap_us=", o.gap_us),
            echo_work,
            transport};
    for (std::string& a : SecurityArgs(cell, secret_file)) args.push_back(a);
    ASSIGN_OR_RETURN(Child* const c, children.Spawn(absl::StrCat("echo client ", r), o.self, args));
    clients.push_back(c);
  }
  ASSIGN_OR_RETURN(const Measurement m,
                   TimeClients(children, clients, cell, o.warmup_s > 0, deadline));
  echo->process.Signal(SIGTERM);
  RETURN_IF_ERROR(children.WaitAllExited(deadline));
  return m;
}

absl::StatusOr<Measurement> MeasurePushPull(const WireBenchOptions& o, const std::string& ps_server,
                                            const std::vector<std::string>& ps_flags,
                                            const Cell& cell, const std::string& dir,
                                            const std::string& secret_file) {
  const int64_t deadline = MonotonicMicros() + static_cast<int64_t>(o.timeout_s * 1e6);
  const std::string timeout = absl::StrCat("--timeout_s=", o.timeout_s);
  ASSIGN_OR_RETURN(const ClusterSpec spec, WithFreePorts(ClusterSpec::Local(1, cell.workers, 1)));
  const std::string spec_file = dir + "/cluster.json";
  {
    std::ofstream f(spec_file);
    f << spec.ToJson();
    if (!f.good()) return absl::InternalError("cannot write " + spec_file);
  }
  Children children;
  std::vector<std::string> args = {"--cluster_spec=" + spec_file, "--task_type=ps",
                                   "--task_index=0",
                                   absl::StrCat("--register_timeout_s=", o.timeout_s),
                                   absl::StrCat("--peer_timeout_s=", o.timeout_s)};
  args.push_back(Curve(cell) ? "--secret_file=" + secret_file : "--insecure");
  args.insert(args.end(), ps_flags.begin(), ps_flags.end());
  RETURN_IF_ERROR(children.Spawn("ps_server", ps_server, args).status());
  std::vector<Child*> clients;
  for (int r = 0; r < cell.workers; ++r) {
    args = {o.embedding_dim > 0 ? "--role=rows_client" : "--role=push_pull_client",
            absl::StrCat("--embedding_dim=", o.embedding_dim),
            absl::StrCat("--rows_per_worker=", o.rows_per_worker),
            absl::StrCat("--rows_prefetch=", o.rows_prefetch ? "true" : "false"),
            "--cluster_spec=" + spec_file,
            absl::StrCat("--rank=", r),
            absl::StrCat("--floats=", cell.floats),
            timeout,
            absl::StrCat("--seconds=", o.seconds),
            absl::StrCat("--warmup_s=", o.warmup_s),
            absl::StrCat("--gap_us=", o.gap_us),
            "--mode=" + o.mode};
    for (std::string& a : ClientSecurityArgs(cell, secret_file)) args.push_back(a);
    ASSIGN_OR_RETURN(Child* const c, children.Spawn(absl::StrCat("worker ", r), o.self, args));
    clients.push_back(c);
  }
  ASSIGN_OR_RETURN(const Measurement m,
                   TimeClients(children, clients, cell, o.warmup_s > 0, deadline));
  clients[0]->process.Signal(SIGUSR1);  // the chief shuts the ps down
  RETURN_IF_ERROR(children.WaitAllExited(deadline));
  return m;
}

// What a measurement runs: the echo, or PUSH_PULL with ps_server given
// `ps_flags`, named `name` in RESULT lines and the table.
struct System {
  std::string name;
  bool echo = false;
  std::string echo_work;  // an echo's
  std::string ps_server;  // PUSH_PULL's binary
  std::vector<std::string> ps_flags;
};

std::vector<System> Systems(const WireBenchOptions& o) {
  std::vector<System> systems;
  for (const std::string& w : o.echo_works) {
    systems.push_back({w == "none" ? "echo" : absl::StrCat("echo[", w, "]"), true, w, "", {}});
  }
  for (const std::vector<std::string>& variant : o.ps_variants) {
    // "ps_server=PATH" in a variant names another binary (A/B of builds).
    System s{"", false, "", o.ps_server, {}};
    for (const std::string& v : variant) {
      if (absl::StartsWith(v, "ps_server=")) {
        s.ps_server = v.substr(10);
      } else {
        s.ps_flags.push_back(v);
      }
    }
    const std::string kind =
        o.embedding_dim > 0 ? (o.rows_prefetch ? "rows_prefetch" : "rows") : "push_pull";
    s.name =
        o.ps_variants.size() > 1 ? absl::StrCat(kind, "[", absl::StrJoin(variant, " "), "]") : kind;
    systems.push_back(std::move(s));
  }
  return systems;
}

void PrintResult(const System& system, const Cell& cell, int round, const Measurement& m) {
  std::printf(
      "RESULT bench=wire system=%s security=%s floats=%lld bytes_each_way=%lld workers=%d round=%d "
      "aggregate_bytes_per_s=%.0f round_trips_per_s_per_worker=%.1f p50_round_trip_us=%.0f "
      "p10_round_trip_us=%.0f\n",
      absl::StrReplaceAll(system.name, {{" ", ","}}).c_str(), cell.security.c_str(),
      static_cast<long long>(cell.floats), static_cast<long long>(cell.floats * 4), cell.workers,
      round, m.aggregate_bytes_per_s, m.round_trips_per_s_per_worker, m.p50_round_trip_us,
      m.p10_round_trip_us);
  std::fflush(stdout);
}

// MB/s of each round ("a / b / c"), or past three rounds their median and
// range ("b (a-c)").
std::string Rates(const std::vector<double>& v) {
  const auto mb = [](double x) { return absl::StrCat(static_cast<int64_t>(x / 1e6 + 0.5)); };
  if (v.size() > 3) {
    return absl::StrCat(mb(Median(v)), " (", mb(*std::min_element(v.begin(), v.end())), "-",
                        mb(*std::max_element(v.begin(), v.end())), ")");
  }
  std::vector<std::string> s;
  for (double x : v) s.push_back(mb(x));
  return s.empty() ? "-" : absl::StrJoin(s, " / ");
}

// One cell's measurements, by system: bytes/s and round trips/s per worker.
struct Figures {
  std::map<std::string, std::vector<double>> rates, trips;
};

// m[k], or none.
std::vector<double> Get(const std::map<std::string, std::vector<double>>& m, const std::string& k) {
  const auto it = m.find(k);
  return it == m.end() ? std::vector<double>() : it->second;
}

// The figures of every system but `base` (the first echo) beside base's.
void PrintAgainstBase(const std::vector<System>& systems,
                      const std::vector<std::pair<Cell, Figures>>& cells, const std::string& base) {
  std::printf(
      "\n| security | floats (bytes each way) | workers | system | %s MB/s | system MB/s "
      "| system / %s | round trips/s per worker, %s / system |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n",
      base.c_str(), base.c_str(), base.c_str());
  for (const auto& [cell, f] : cells) {
    for (const System& system : systems) {
      if (system.name == base) continue;
      const double e = Median(Get(f.rates, base)), p = Median(Get(f.rates, system.name));
      const std::string ratio = e > 0 && p > 0 ? absl::StrFormat("%.2f", p / e) : "-";
      std::printf("| %s | %lld (%lld) | %d | %s | %s | %s | %s | %.0f / %.0f |\n",
                  cell.security.c_str(), static_cast<long long>(cell.floats),
                  static_cast<long long>(cell.floats * 4), cell.workers, system.name.c_str(),
                  Rates(Get(f.rates, base)).c_str(), Rates(Get(f.rates, system.name)).c_str(),
                  ratio.c_str(), Median(Get(f.trips, base)), Median(Get(f.trips, system.name)));
    }
  }
}

// A row per cell and system but the first echo (the baseline): its figures
// beside the baseline's, and their ratio; without an echo (--echo=false),
// the system's alone.
void PrintTable(const std::vector<System>& systems,
                const std::vector<std::pair<Cell, Figures>>& cells) {
  const std::string base = !systems.empty() && systems.front().echo ? systems.front().name : "";
  if (base.empty()) {
    std::printf(
        "\n| security | floats (bytes each way) | workers | system | MB/s "
        "| round trips/s per worker |\n| --- | --- | --- | --- | --- | --- |\n");
    for (const auto& [cell, f] : cells) {
      for (const System& system : systems) {
        std::printf("| %s | %lld (%lld) | %d | %s | %s | %.0f |\n", cell.security.c_str(),
                    static_cast<long long>(cell.floats), static_cast<long long>(cell.floats * 4),
                    cell.workers, system.name.c_str(), Rates(Get(f.rates, system.name)).c_str(),
                    Median(Get(f.trips, system.name)));
      }
    }
  } else {
    PrintAgainstBase(systems, cells, base);
  }
  std::printf(
      "(MB/s: bytes out and back over every worker, 1e6 bytes: each round's figure, or past "
      "three rounds their median (range); the ratio of the medians)\n");
}

}  // namespace

absl::Status RunWireBench(const WireBenchOptions& o) {
  char dir_template[] = "/tmp/wire_bench.XXXXXX";
  if (mkdtemp(dir_template) == nullptr)
    return absl::InternalError("cannot make a temporary directory");
  const std::string dir = dir_template;
  const std::string secret_file = dir + "/job.secret";
  RETURN_IF_ERROR(JobSecret::Generate().WriteNewFile(secret_file));
  const std::vector<System> systems = Systems(o);
  std::printf(
      "# wire_bench: %u cores, %s ps, %.1f s per measurement after %.1f s untimed, %d rounds, "
      "%d us between round trips, the echo over %s, %s\n",
      std::thread::hardware_concurrency(), o.mode.c_str(), o.seconds, o.warmup_s, o.rounds,
      o.gap_us, o.echo_transport.c_str(), o.ps_server.c_str());
  std::vector<std::pair<Cell, Figures>> cells;  // in the order measured
  int failed = 0;
  for (const std::string& security : o.securities) {
    for (int64_t floats : o.sizes) {
      for (int workers : o.workers) {
        const Cell cell{security, floats, workers};
        cells.push_back({cell, {}});
        Figures& f = cells.back().second;
        for (int round = 1; round <= o.rounds; ++round) {
          for (const System& system : systems) {
            absl::StatusOr<Measurement> m =
                system.echo
                    ? MeasureEcho(o, system.echo_work, cell, dir, secret_file)
                    : MeasurePushPull(o, system.ps_server, system.ps_flags, cell, dir, secret_file);
            if (!m.ok()) {
              ++failed;
              std::printf(
                  "ERROR bench=wire system=%s security=%s floats=%lld workers=%d round=%d: %s\n",
                  system.name.c_str(), security.c_str(), static_cast<long long>(floats), workers,
                  round, std::string(m.status().message()).c_str());
              std::fflush(stdout);
              continue;
            }
            PrintResult(system, cell, round, *m);
            f.rates[system.name].push_back(m->aggregate_bytes_per_s);
            f.trips[system.name].push_back(m->round_trips_per_s_per_worker);
          }
        }
      }
    }
  }
  PrintTable(systems, cells);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (failed > 0)
    return absl::InternalError(absl::StrCat(failed, " measurements failed (ERROR lines)"));
  return absl::OkStatus();
}

}  // namespace pstrain

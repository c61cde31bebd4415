#pragma once

// Real processes for tests: start a pstrain binary, collect its output,
// wait for it with a bound, and never leave it running (the destructor
// kills what is still alive).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/child_process.h"

namespace pstrain::testing {

// Absolute path of a built binary ("worker", "ps_server", "pstrain").
std::string BinaryPath(const std::string& name);
// The repository root (for data/, cluster_specs/).
std::string SourcePath(const std::string& relative);
// The first executable `name` on PATH ("/usr/bin/node"); "" when none.
std::string FindProgram(const std::string& name);
// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& prefix);

// A job secret file made once per test process (every task a test starts
// shares it, as the tasks of one job do), and the flag that names it.
std::string TestSecretFile();
std::string SecretFlag();

class RunningProcess {
 public:
  // Starts `binary` with `args`; `tf_config` (if not empty) becomes TF_CONFIG.
  static std::unique_ptr<RunningProcess> Start(const std::string& binary,
                                               std::vector<std::string> args,
                                               const std::string& tf_config = "");
  ~RunningProcess();  // SIGKILL and reap if still running

  // Waits up to `timeout_s` for exit, reading output meanwhile. Returns the
  // exit code (-N for signal N), or DeadlineExceeded.
  absl::StatusOr<int> Wait(double timeout_s);
  // Waits until the output contains `text` or the process exits.
  bool WaitForOutput(const std::string& text, double timeout_s);
  void Signal(int signo) const { process_.Signal(signo); }
  pid_t pid() const { return process_.pid(); }
  const std::string& output() const { return output_; }

 private:
  explicit RunningProcess(ChildProcess process) : process_(std::move(process)) {}
  void ReadAvailable(int timeout_ms);

  ChildProcess process_;
  std::string output_;
};

// Writes a cluster spec with `num_ps` ps and `num_workers` workers on free
// localhost ports; returns its path.
std::string WriteLocalSpec(const std::string& dir, int num_ps, int num_workers);

// TF_CONFIG for one task of the spec at `spec_path`.
std::string TfConfigFor(const std::string& spec_path, const std::string& type, int index);

// True if no process with this pid exists any more (or it is a zombie).
bool ProcessGone(pid_t pid);

// The pids `pstrain launch` reported for its tasks ("pstrain: started ps:0
// (pid 12)"), by task name.
std::map<std::string, pid_t> TaskPids(const std::string& launcher_output);

// Expects every process of `pids` gone within `within_s` seconds.
void ExpectAllGone(const std::map<std::string, pid_t>& pids, double within_s);

}  // namespace pstrain::testing

namespace pstrain::testing {

struct ClusterRun {
  std::vector<int> exit_codes;      // ps tasks first, then workers
  std::vector<std::string> outputs;
  bool all_ok() const;
  std::string AllOutput() const;
};

// Starts `num_ps` ps_server and `num_workers` worker processes for the spec
// at `spec_path`, each with its TF_CONFIG, workers with `worker_flags`
// (worker w's followed by per_worker[w], when given: later flags win);
// waits up to `timeout_s` for all of them (killing stragglers after).
// Every task gets the test secret (CURVE), or --insecure when
// `worker_flags` holds it.
ClusterRun RunLocalCluster(const std::string& spec_path, int num_ps, int num_workers,
                           const std::vector<std::string>& worker_flags, double timeout_s,
                           const std::vector<std::vector<std::string>>& per_worker = {});

}  // namespace pstrain::testing

#include "tests/test_util/process_runner.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/cluster_spec.h"
#include "common/file_util.h"
#include "common/free_ports.h"
#include "gtest/gtest.h"
#include "transport/job_secret.h"

namespace pstrain::testing {

std::string BinaryPath(const std::string& name) { return absl::StrCat(PSTRAIN_BIN_DIR, "/", name); }

std::string SourcePath(const std::string& relative) {
  return absl::StrCat(PSTRAIN_SOURCE_DIR, "/", relative);
}

std::string FindProgram(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (const absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string MakeTempDir(const std::string& prefix) {
  std::string pattern = absl::StrCat(::testing::TempDir(), "/", prefix, "XXXXXX");
  char* dir = mkdtemp(pattern.data());
  return dir == nullptr ? ::testing::TempDir() : std::string(dir);
}

std::string TestSecretFile() {
  static const std::string path = [] {
    const std::string file = MakeTempDir("secret") + "/job.secret";
    const absl::Status s = JobSecret::Generate().WriteNewFile(file);
    if (!s.ok()) ADD_FAILURE() << s;
    return file;
  }();
  return path;
}

std::string SecretFlag() { return "--secret_file=" + TestSecretFile(); }

std::unique_ptr<RunningProcess> RunningProcess::Start(const std::string& binary,
                                                      std::vector<std::string> args,
                                                      const std::string& tf_config) {
  SpawnOptions options;
  options.binary = binary;
  options.args = std::move(args);
  if (!tf_config.empty()) options.extra_env.push_back("TF_CONFIG=" + tf_config);
  auto child = ChildProcess::Spawn(options);
  if (!child.ok()) {
    ADD_FAILURE() << "cannot start " << binary << ": " << child.status();
    return nullptr;
  }
  return std::unique_ptr<RunningProcess>(new RunningProcess(*std::move(child)));
}

RunningProcess::~RunningProcess() {
  if (!process_.Reap()) {
    process_.Signal(SIGKILL);
    (void)Wait(10.0);
  }
}

void RunningProcess::ReadAvailable(int timeout_ms) {
  if (process_.output_fd() < 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 20)));
    return;
  }
  pollfd fd = {process_.output_fd(), POLLIN, 0};
  if (poll(&fd, 1, timeout_ms) <= 0) return;
  char buf[8192];
  const ssize_t n = read(process_.output_fd(), buf, sizeof(buf));
  if (n > 0) {
    output_.append(buf, static_cast<size_t>(n));
  } else if (n == 0) {
    process_.CloseOutput();
  }
}

absl::StatusOr<int> RunningProcess::Wait(double timeout_s) {
  const int64_t start = MonotonicMicros();
  while (SecondsSince(start) < timeout_s) {
    ReadAvailable(50);
    if (process_.Reap()) {
      while (process_.output_fd() >= 0) ReadAvailable(50);
      return process_.exit_code();
    }
  }
  return absl::DeadlineExceededError(absl::StrCat("still running after ", timeout_s, " s"));
}

bool RunningProcess::WaitForOutput(const std::string& text, double timeout_s) {
  const int64_t start = MonotonicMicros();
  while (SecondsSince(start) < timeout_s) {
    if (output_.find(text) != std::string::npos) return true;
    if (process_.exited() && process_.output_fd() < 0) return false;
    ReadAvailable(50);
    process_.Reap();
  }
  return output_.find(text) != std::string::npos;
}

std::string WriteLocalSpec(const std::string& dir, int num_ps, int num_workers) {
  // Placeholder ports, replaced with free ones as `pstrain launch --free_ports` does.
  auto spec = WithFreePorts(ClusterSpec::Local(num_ps, num_workers, 1));
  EXPECT_TRUE(spec.ok()) << spec.status();
  const std::string path = absl::StrCat(dir, "/spec.json");
  std::ofstream(path) << (spec.ok() ? spec->ToJson() : "");
  return path;
}

std::string TfConfigFor(const std::string& spec_path, const std::string& type, int index) {
  auto text = ReadFileToString(spec_path);
  if (!text.ok()) return "";
  auto spec = ClusterSpec::FromJson(*text, spec_path);
  if (!spec.ok()) return "";
  return spec->ToTfConfig({*ParseTaskType(type), index});
}

bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string pid_str, comm, state;
  stat >> pid_str >> comm >> state;
  return state == "Z" || state == "X";
}

std::map<std::string, pid_t> TaskPids(const std::string& launcher_output) {
  std::map<std::string, pid_t> pids;
  const std::regex re(R"(pstrain: started (\S+) \(pid (\d+)\))");
  for (auto it = std::sregex_iterator(launcher_output.begin(), launcher_output.end(), re);
       it != std::sregex_iterator(); ++it) {
    pids[(*it)[1]] = static_cast<pid_t>(std::stoi((*it)[2]));
  }
  return pids;
}

void ExpectAllGone(const std::map<std::string, pid_t>& pids, double within_s) {
  const int64_t start = MonotonicMicros();
  for (const auto& [task, pid] : pids) {
    while (!ProcessGone(pid) && SecondsSince(start) < within_s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(ProcessGone(pid)) << task << " (pid " << pid << ") was left running";
  }
}

}  // namespace pstrain::testing

namespace pstrain::testing {

bool ClusterRun::all_ok() const {
  for (int c : exit_codes) {
    if (c != 0) return false;
  }
  return !exit_codes.empty();
}

std::string ClusterRun::AllOutput() const {
  std::string out;
  for (size_t i = 0; i < outputs.size(); ++i) {
    absl::StrAppend(&out, "---- task ", i, " (exit ", exit_codes[i], ")\n", outputs[i]);
  }
  return out;
}

ClusterRun RunLocalCluster(const std::string& spec_path, int num_ps, int num_workers,
                           const std::vector<std::string>& worker_flags, double timeout_s,
                           const std::vector<std::vector<std::string>>& per_worker) {
  const bool insecure =
      std::find(worker_flags.begin(), worker_flags.end(), "--insecure") != worker_flags.end();
  std::vector<std::unique_ptr<RunningProcess>> tasks;
  for (int k = 0; k < num_ps; ++k) {
    tasks.push_back(RunningProcess::Start(
        BinaryPath("ps_server"), {"--peer_timeout_s=30", insecure ? "--insecure" : SecretFlag()},
        TfConfigFor(spec_path, "ps", k)));
  }
  std::vector<std::string> flags = worker_flags;
  if (!insecure) flags.push_back(SecretFlag());
  for (int w = 0; w < num_workers; ++w) {
    std::vector<std::string> own = flags;
    if (w < static_cast<int>(per_worker.size())) own.insert(own.end(), per_worker[w].begin(), per_worker[w].end());
    tasks.push_back(RunningProcess::Start(BinaryPath("worker"), own,
                                          TfConfigFor(spec_path, "worker", w)));
  }
  ClusterRun run;
  const int64_t start = MonotonicMicros();
  for (auto& t : tasks) {
    if (t == nullptr) {
      run.exit_codes.push_back(-1);
      run.outputs.push_back("not started");
      continue;
    }
    auto code = t->Wait(std::max(1.0, timeout_s - SecondsSince(start)));
    run.exit_codes.push_back(code.ok() ? *code : -1000);
    run.outputs.push_back(code.ok() ? t->output() : t->output() + "\n[timed out]");
  }
  return run;
}

}  // namespace pstrain::testing

// `pstrain launch --echo=progress` as a person sees it: the launch runs in a
// tmux pane (a real terminal), and the test reads the screen with
// `tmux capture-pane` while it runs and after. On a terminal the progress
// is one line, redrawn in place, with the epoch and step, images/s, an ETA
// and the tasks' states; it ends as the run's result, followed by the
// summary.

#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using testing::RunningProcess;

// A tmux server of the test's own (-L), killed at the end whatever happens.
class Tmux {
 public:
  Tmux() : tmux_(testing::FindProgram("tmux")), socket_(absl::StrCat("pstrain-test-", getpid())) {}
  ~Tmux() {
    if (!tmux_.empty()) Run({"kill-server"});
  }
  bool found() const { return !tmux_.empty(); }

  // Runs tmux with `args`; its output.
  std::string Run(std::vector<std::string> args) const {
    args.insert(args.begin(), {"-L", socket_});
    auto p = RunningProcess::Start(tmux_, args);
    auto code = p->Wait(30);
    return code.ok() ? p->output() : "";
  }
  std::string Screen() const { return Run({"capture-pane", "-p", "-t", "run"}); }

 private:
  std::string tmux_;
  std::string socket_;
};

TEST(ProgressView, IsOneLineRedrawnInPlaceWithStepsEtaAndTaskStates) {
  Tmux tmux;
  ASSERT_TRUE(tmux.found()) << "tmux not found (apt-get install tmux; tools/setup.sh does)";
  const std::string dir = testing::MakeTempDir("progress_view");
  const std::string run_dir = dir + "/run";
  const std::string command = absl::StrCat(
      testing::BinaryPath("pstrain"), " launch --cluster_spec=",
      testing::SourcePath("cluster_specs/local_2ps_2w.json"), " --free_ports --run_dir=", run_dir,
      " --data_dir=", testing::SourcePath("data/mnist"),
      " --device=cpu --mode=async --max_steps=200 --log_every_steps=5 --echo=progress",
      "; echo EXIT=$?; sleep 600");
  tmux.Run({"new-session", "-d", "-s", "run", "-x", "220", "-y", "40", command});

  bool saw_step = false;
  std::string screen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (std::chrono::steady_clock::now() < deadline) {
    screen = tmux.Screen();
    for (const absl::string_view line : absl::StrSplit(screen, '\n')) {
      if (absl::StartsWith(line, run_dir + ": epoch 1/1, step ") && absl::StrContains(line, "img/s") &&
          absl::StrContains(line, "ETA") && absl::StrContains(line, "running")) {
        saw_step = true;
      }
    }
    if (absl::StrContains(screen, "EXIT=")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_THAT(screen, ::testing::HasSubstr("EXIT=0")) << screen;
  EXPECT_TRUE(saw_step) << "never saw a step line with img/s, ETA and task states; last screen:\n"
                        << screen;
  // One progress line, redrawn: the run's line appears once, as its result.
  int progress_lines = 0;
  for (const absl::string_view line : absl::StrSplit(screen, '\n')) {
    if (absl::StartsWith(line, run_dir + ": ")) {
      ++progress_lines;
      EXPECT_THAT(std::string(line), ::testing::HasSubstr("done, test acc 0.")) << line;
    }
  }
  EXPECT_EQ(progress_lines, 1) << screen;
  EXPECT_THAT(screen, ::testing::HasSubstr("== pstrain summary: " + run_dir));
}

}  // namespace
}  // namespace pstrain

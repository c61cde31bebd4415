// What each kind of failure exits with (README, "Exit codes").

#include "common/exit_codes.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(ExitCodeFor, OnlyWhatTheUserGaveIsTwo) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus(), false), 0);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("bad flag, spec or data file"), false), 2);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("missing data file"), false), 2);
}

TEST(ExitCodeFor, RunTimeFailuresAreOneDataLossIncluded) {
  EXPECT_EQ(ExitCodeFor(absl::DataLossError("corrupt reply from ps:0"), false), 1);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("ps:0 unreachable"), false), 1);
  EXPECT_EQ(ExitCodeFor(absl::AbortedError("worker:1 failed"), false), 1);
  EXPECT_EQ(ExitCodeFor(absl::FailedPreconditionError("other flags than the chief"), false), 1);
  EXPECT_EQ(ExitCodeFor(absl::ResourceExhaustedError("disk full"), false), 1);
}

TEST(ExitCodeFor, OneThirtyOnlyWhenASignalStoppedTheProcess) {
  EXPECT_EQ(ExitCodeFor(absl::CancelledError("interrupted"), true), 130);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("interrupted while connecting"), true), 130);
  // A peer's "the ps is shutting down" is not this process being stopped.
  EXPECT_EQ(ExitCodeFor(absl::CancelledError("ps:0: the ps is shutting down"), false), 1);
}

TEST(ExitWith, AProcessStoppedBySignalSaysSoWithoutAnError) {
  CancellationFlag running, stopped;
  stopped.Cancel("signal 15");
  testing::internal::CaptureStderr();
  EXPECT_EQ(ExitWith("ps_server", absl::CancelledError("ps:1 stopped by signal 15"), stopped), 130);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "ps_server: ps:1 stopped by signal 15\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(ExitWith("ps_server", absl::UnavailableError("port 2222 in use"), running), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "ps_server: error: port 2222 in use\n");
}

}  // namespace
}  // namespace pstrain

// PsServerOptions' command-line form, as `pstrain launch` hands it to each
// ps (ps_server's flags take their defaults from a default PsServerOptions).

#include "ps_server/ps_server_options.h"

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;

TEST(PsServerOptions, ToArgsRendersEveryFlagBackedField) {
  EXPECT_THAT(
      PsServerOptions().ToArgs(),
      ElementsAre("--peer_timeout_s=10", "--register_timeout_s=600", "--max_message_mb=1024",
                  "--bind=", "--checkpoint_dir=", "--metrics_port=0", "--metrics_host=0.0.0.0",
                  "--timeline_dir=", "--io_threads=0", "--update_threads=1", "--busy_poll_us=0"));
  PsServerOptions o;
  o.peer_timeout_s = 0.1 + 0.2;
  o.max_message_bytes = (int64_t{3} << 20) + 5;  // whole MiB, rounded down
  o.bind_endpoint = "tcp://0.0.0.0:2222";
  o.metrics_port = 9100;
  o.metrics_host = "127.0.0.1";
  o.timeline_dir = "runs/x/timeline";
  o.io_threads = 2;
  o.update_threads = 3;
  o.busy_poll_us = 250;
  EXPECT_THAT(o.ToArgs(),
              ElementsAre("--peer_timeout_s=0.30000000000000004", "--register_timeout_s=600",
                          "--max_message_mb=3", "--bind=tcp://0.0.0.0:2222",
                          "--checkpoint_dir=", "--metrics_port=9100", "--metrics_host=127.0.0.1",
                          "--timeline_dir=runs/x/timeline", "--io_threads=2", "--update_threads=3",
                          "--busy_poll_us=250"));
}

TEST(PsServerOptions, ValidationNamesTheFlags) {
  EXPECT_TRUE(ValidatePsServerOptions(PsServerOptions()).ok());
  PsServerOptions o;
  o.register_timeout_s = 0;
  const absl::Status s = ValidatePsServerOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("--register_timeout_s"));
  for (int threads : {-1, 17}) {
    PsServerOptions t;
    t.io_threads = threads;
    const absl::Status st = ValidatePsServerOptions(t);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << threads;
    EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("--io_threads"));
  }
  for (int threads : {0, 65}) {
    PsServerOptions t;
    t.update_threads = threads;
    const absl::Status st = ValidatePsServerOptions(t);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << threads;
    EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("--update_threads"));
  }
  for (int us : {-1, kMaxBusyPollUs + 1}) {
    PsServerOptions t;
    t.busy_poll_us = us;
    const absl::Status st = ValidatePsServerOptions(t);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << us;
    EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("--busy_poll_us"));
  }
}

TEST(PsServerOptions, IoThreadsFollowTheHostsCoresUnderCurveOnly) {
  // Given: that many.
  EXPECT_EQ(AutoIoThreads(3, 8, true, 16), 3);
  // Plaintext: one.
  EXPECT_EQ(AutoIoThreads(0, 8, false, 16), 1);
  // CURVE: one per worker, up to half the cores and 8.
  EXPECT_EQ(AutoIoThreads(0, 4, true, 16), 4);
  EXPECT_EQ(AutoIoThreads(0, 12, true, 16), 8);
  EXPECT_EQ(AutoIoThreads(0, 12, true, 6), 3);
  EXPECT_EQ(AutoIoThreads(0, 2, true, 2), 1);  // this repository's 2-core machines
  EXPECT_EQ(AutoIoThreads(0, 256, true, 64), 8);  // a sparse spec's rank slots
  EXPECT_EQ(AutoIoThreads(0, 8, true, 0), 1);  // the core count unknown
  EXPECT_TRUE(ValidatePsServerOptions(PsServerOptions()).ok());  // 0: decided by this
}

}  // namespace
}  // namespace pstrain

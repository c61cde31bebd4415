// The end-of-run lines `pstrain launch` prints (launcher/supervisor/summary_printer.h).

#include "launcher/supervisor/summary_printer.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Printed(const proto::RunSummary& summary) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  PrintSummary(summary, "runs/x", out);
  std::fclose(out);
  std::string result(text, size);
  std::free(text);
  return result;
}

proto::RunSummary Summary(int epochs, int steps_per_epoch, int steps_per_worker) {
  proto::RunSummary s;
  s.set_mode("sync");
  s.set_epochs(epochs);
  s.set_steps_per_epoch(steps_per_epoch);
  s.set_steps_per_worker(steps_per_worker);
  s.set_final_test_accuracy(0.9);
  return s;
}

TEST(SummaryPrinter, AFullRunSaysItsEpochs) {
  const std::string text = Printed(Summary(2, 469, 938));
  EXPECT_THAT(text, HasSubstr("after 2 epoch(s), 938 steps per worker"));
}

TEST(SummaryPrinter, ARunStoppedByMaxStepsSaysHowFarItGotNotTheEpochsAskedFor) {
  const std::string text = Printed(Summary(3, 469, 300));
  EXPECT_THAT(text, HasSubstr("after 300 steps per worker: 0.64 of the 3 epoch(s) asked for"));
  EXPECT_THAT(text, Not(HasSubstr("after 3 epoch(s)")));
}

TEST(SummaryPrinter, ASummaryWithoutStepsPerEpochKeepsTheOldLine) {
  const std::string text = Printed(Summary(1, 0, 50));
  EXPECT_THAT(text, HasSubstr("after 1 epoch(s), 50 steps per worker"));
}

TEST(SummaryPrinter, SaysWhenSyncPushesWereSummedOutOfRankOrder) {
  proto::RunSummary s = Summary(1, 10, 10);
  EXPECT_THAT(Printed(s), Not(HasSubstr("out of rank order")));
  s.set_unordered_sums(3);
  EXPECT_THAT(Printed(s), HasSubstr("3 sync push(es) summed out of rank order"));
}

}  // namespace
}  // namespace pstrain

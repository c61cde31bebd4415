// `pstrain compare`'s pieces without processes: the mode syntax, the
// figures a report derives from a run's CSVs, and the report's text.

#include "launcher/experiments/compare.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/experiments/experiment.h"
#include "launcher/experiments/report.h"
#include "launcher/reporting/run_record.h"
#include "launcher/supervisor/progress.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ModeSpec, ParsesEveryModeOfTheSpectrum) {
  auto modes = ParseModeList("sync, async,ssp:2,ssp:0,sync+backup:1,ssp:3+slr,async+slr");
  ASSERT_TRUE(modes.ok()) << modes.status();
  ASSERT_EQ(modes->size(), 7u);
  EXPECT_EQ((*modes)[2].mode, "ssp");
  EXPECT_EQ((*modes)[2].staleness, 2);
  EXPECT_EQ((*modes)[3].staleness, 0);
  EXPECT_EQ((*modes)[4].backup_workers, 1);
  EXPECT_EQ((*modes)[4].DirName(), "sync_backup-1");
  EXPECT_TRUE((*modes)[5].staleness_lr);
  EXPECT_EQ((*modes)[5].label, "ssp:3+slr");
}

TEST(ModeSpec, SetsTheModeOptionsAndNothingElse) {
  TrainOptions o;
  o.staleness = 5;
  o.staleness_lr = true;
  o.epochs = 3;
  ParseModeSpec("sync+backup:1")->ApplyTo(&o);
  EXPECT_EQ(o.mode, proto::SYNC);
  EXPECT_EQ(o.staleness, 0);
  EXPECT_EQ(o.backup_workers, 1);
  EXPECT_FALSE(o.staleness_lr);
  EXPECT_EQ(o.epochs, 3);
  ParseModeSpec("ssp:2+slr")->ApplyTo(&o);
  EXPECT_EQ(o.mode, proto::SSP);
  EXPECT_EQ(o.staleness, 2);
  EXPECT_EQ(o.backup_workers, 0);
  EXPECT_TRUE(o.staleness_lr);
}

TEST(ModeSpec, RejectsWhatNoModeMeans) {
  for (const char* bad : {"", "ssp", "ssp:", "ssp:-1", "ssp:x", "bsp", "async+backup:1", "sync+slr",
                          "sync+backup:0", "sync+fast", "sync,sync"}) {
    EXPECT_FALSE(ParseModeList(bad).ok()) << bad;
  }
  EXPECT_THAT(std::string(ParseModeList("ssp:x").status().message()), HasSubstr("ssp:x"));
}

TEST(ModeSpec, DescribesSspZeroAsBulkSynchronousWithoutAveraging) {
  const std::string d = ParseModeSpec("ssp:0")->Describe();
  EXPECT_THAT(d, HasSubstr("no worker starts step t before every worker finished step t-1"));
  EXPECT_THAT(d, HasSubstr("one by one"));
}

TEST(Experiment, ARunIsTheExperimentsOptionsInItsModeAndDirectory) {
  ExperimentOptions x;
  x.train.lr = 0.05;
  x.train.run_dir = "elsewhere";
  x.straggler_delay_ms["worker:1"] = 40;
  const ExperimentRun run = MakeRun(x, "ssp:2", "[1/1] ssp:2", "spec.json", "out/ssp-2",
                                    *ParseModeSpec("ssp:2"), 7);
  EXPECT_EQ(run.train.mode, proto::SSP);
  EXPECT_EQ(run.train.staleness, 2);
  EXPECT_EQ(run.train.lr, 0.05);
  EXPECT_EQ(run.train.run_dir, "out/ssp-2");
  EXPECT_EQ(run.train.eval_every_steps, 7);
  EXPECT_EQ(run.straggler_delay_ms.at("worker:1"), 40);
}

TEST(Experiment, EvaluatesAboutEvalPointsTimesPerRun) {
  ExperimentOptions o;
  o.train.epochs = 3;
  o.train.batch_size = 128;
  EXPECT_EQ(StepsPerWorker(o, 2), 3 * 235);  // ceil(60000 / 256) = 235
  EXPECT_EQ(EvalEverySteps(o, 705), 71);
  o.train.max_steps = 40;
  EXPECT_EQ(StepsPerWorker(o, 2), 40);
  o.train.eval_every_steps = 7;
  EXPECT_EQ(EvalEverySteps(o, 40), 7);  // given: kept
  o.train.eval_every_steps = 0;
  o.eval_points = 100;
  EXPECT_EQ(EvalEverySteps(o, 40), 1);
}

TEST(RunRecord, TimeToAccuracyIsTheFirstEvaluationAtOrAboveTheTarget) {
  const std::vector<EvalSample> evals = {{10, 1.0, 0.90, 0, 1.0}, {20, 2.0, 0.95, 0, 2.0},
                                         {30, 3.0, 0.94, 0, 3.0}, {40, 3.5, 0.971, 0, 4.0}};
  EXPECT_EQ(SecondsToAccuracy(evals, 0.95), 2.0);
  EXPECT_EQ(SecondsToAccuracy(evals, 0.97), 4.0);  // on the adjusted time axis
  EXPECT_FALSE(SecondsToAccuracy(evals, 0.98).has_value());
  EXPECT_EQ(SecondsOrNotReached(std::nullopt), "not reached");
  EXPECT_EQ(SecondsOrNotReached(12.34), "12.3 s");
}

TEST(RunRecord, MeanLossSkipsNonFiniteAndAveragesWorkers) {
  const double nan = std::nan("");
  const std::vector<std::vector<StepRow>> steps = {{{0, 0, 2.0, 128}, {1, 0, 1.0, 128}},
                                                   {{0, 0, 4.0, 128}, {1, 0, nan, 0}}};
  const std::vector<LossSample> loss = MeanLossByStep(steps);
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_DOUBLE_EQ(loss[0].loss, 3.0);
  EXPECT_DOUBLE_EQ(loss[1].loss, 1.0);
  const std::vector<LossSample> avg = MovingAverage({{0, 1}, {1, 3}, {2, 5}, {3, 7}}, 2);
  ASSERT_EQ(avg.size(), 4u);
  EXPECT_DOUBLE_EQ(avg[0].loss, 1);
  EXPECT_DOUBLE_EQ(avg[1].loss, 2);
  EXPECT_DOUBLE_EQ(avg[3].loss, 6);
}

// Two workers, 1 s steps of 100 images each; the chief evaluates for 2 s
// after its step 1. Worker 1 trains on through the pause (async).
TEST(RunRecord, ThroughputLeavesEvaluationPausesOutInEveryMode) {
  std::vector<std::vector<StepRow>> steps(2);
  steps[0] = {{0, 1.0, 1, 100, 1000, 0}, {1, 2.0, 1, 100, 1000, 0}, {2, 5.0, 1, 100, 1000, 0}};
  for (int i = 0; i < 5; ++i) steps[1].push_back({i, 1.0 + i, 1, 100, 1000, 0});
  std::vector<EvalSample> evals = {{2, 2.0, 0.5, 1, 0}, {3, 3.0, 0.6, 1, 0}};
  const Throughput t = MeasureThroughput(steps, evals);
  EXPECT_DOUBLE_EQ(t.pause_seconds, 2.0);  // from 2.0 (end of step 1) to 4.0 (start of step 2)
  EXPECT_EQ(t.gradients, 8);
  EXPECT_EQ(t.gradients_during_pauses, 2);  // worker 1's steps in [2, 3] and [3, 4]
  EXPECT_DOUBLE_EQ(t.train_seconds, 3.0);   // 0.0 .. 5.0 less the pause
  EXPECT_DOUBLE_EQ(t.images_per_sec, 600.0 / 3.0);
  EXPECT_DOUBLE_EQ(t.gradients_per_sec, 2.0);
  // The two free gradients cost 1 s at 2 gradients/s, from the evaluation
  // after the pause on; the pause's own evaluation is unchanged.
  AdjustForPauses(steps, t, &evals);
  EXPECT_DOUBLE_EQ(evals[0].seconds, 2.0);
  EXPECT_DOUBLE_EQ(evals[1].seconds, 4.0);
}

// Sync: worker 1 waits out the pause for the chief's gradient; nothing is
// free and the time axis is the chief's training seconds.
TEST(RunRecord, SyncGainsNothingFromPauses) {
  std::vector<std::vector<StepRow>> steps(2);
  steps[0] = {{0, 1.0, 1, 100, 1000, 0}, {1, 2.0, 1, 100, 1000, 0}, {2, 5.0, 1, 100, 1000, 0}};
  steps[1] = {{0, 1.0, 1, 100, 900, 100}, {1, 2.0, 1, 100, 900, 100}, {2, 5.0, 1, 100, 900, 2100}};
  std::vector<EvalSample> evals = {{2, 2.0, 0.5, 1, 0}, {3, 3.0, 0.6, 1, 0}};
  const Throughput t = MeasureThroughput(steps, evals);
  EXPECT_EQ(t.gradients_during_pauses, 0);
  EXPECT_DOUBLE_EQ(t.images_per_sec, 600.0 / 3.0);
  AdjustForPauses(steps, t, &evals);
  EXPECT_DOUBLE_EQ(evals[1].seconds, 3.0);
}

// Sync, two workers of 100 images a 1 s step, worker 1 a fifth of a
// second behind: each worker's rate counts its last round, which a window
// common to both would cut off worker 1's (192 images/s).
TEST(RunRecord, SteadyImagesPerSecondSumsEachWorkersOwnRate) {
  RunRecord r;
  r.steps.resize(2);
  for (int i = 0; i < 10; ++i) {
    r.steps[0].push_back({i, 10.0 + i, 1, 100, 900, 100});
    r.steps[1].push_back({i, 10.2 + i, 1, 100, 900, 100});
  }
  r.throughput.images_per_sec = -1;
  EXPECT_DOUBLE_EQ(SteadyImagesPerSecond(r), 200.0);
  // A 2 s evaluation pause of the chief after its step 4 (its step 5
  // starts 2 s later, and so do worker 1's) is left out of both.
  for (int rank = 0; rank < 2; ++rank) {
    for (int i = 5; i < 10; ++i) r.steps[rank][i].end_unix_s += 2;
  }
  r.evals = {{5, 5.0, 0.5, 1, 0}};
  EXPECT_NEAR(SteadyImagesPerSecond(r), 200.0, 1e-9);
  // Too few steps for a steady window: the whole run's figure.
  r.steps[1].resize(2);
  EXPECT_EQ(SteadyImagesPerSecond(r), -1);
}

RunRecord Finished(const std::string& label, double accuracy, double images_per_sec,
                   std::vector<EvalSample> evals) {
  RunRecord r;
  r.label = label;
  r.summary.set_final_test_accuracy(accuracy);
  r.summary.set_updates_applied(100);
  r.summary.set_late_gradients_dropped(7);
  r.summary.set_mean_staleness(1.234);
  r.summary.set_p99_staleness(4);
  r.summary.set_learning_rate(0.02);
  r.throughput.images_per_sec = images_per_sec;
  r.evals = std::move(evals);
  return r;
}

TEST(Report, CompareTableHasOneRowPerModeAndSaysNotReached) {
  RunRecord failed;
  failed.label = "ssp:2";
  failed.status = absl::AbortedError("worker:1 failed");
  const std::string table =
      CompareTable({Finished("sync", 0.9812, 12000.4,
                             {{10, 5.0, 0.96, 0, 5.0}, {20, 9.0, 0.9805, 0, 9.0}}),
                    failed},
                   ReportedTargets(0.97));
  const std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[0], HasSubstr("| mode | final test acc | time to 95% | time to 97% | time to 98% | "
                                  "time to 99% | train images/s"));
  EXPECT_EQ(lines[2],
            "| sync | 0.9812 | 5.0 s | 9.0 s | 9.0 s | not reached | 12000 | 100 | 0 | 7 | 1.23 | 4 | 0.02 |");
  EXPECT_THAT(lines[3], HasSubstr("| ssp:2 | failed |"));
}

TEST(Report, HighlightsNameTheBestOfEachColumn) {
  const std::vector<RunRecord> runs = {Finished("sync", 0.98, 10000, {{10, 8.0, 0.97, 0, 8.0}}),
                                       Finished("async", 0.97, 15000, {{10, 5.0, 0.97, 0, 6.0}})};
  EXPECT_THAT(CompareHighlights(runs, ReportedTargets(0.97)),
              ElementsAre("Highest final test accuracy: sync (0.9800).", "Fastest to 95%: async (6.0 s).",
                          "Fastest to 97%: async (6.0 s).", "No mode reached 98% test accuracy.",
                          "No mode reached 99% test accuracy.",
                          "Highest throughput: async (15000 images/s)."));
}

// A mode far below the best one lost the model: a finding, first. A target
// of the user's own has its column and its highlight.
TEST(Report, ALostModelIsAFindingAndTheTargetHasItsColumn) {
  std::vector<RunRecord> runs = {Finished("sync", 0.9077, 10000, {{10, 8.0, 0.90, 0, 8.0}}),
                                 Finished("async", 0.8600, 15000, {{10, 5.0, 0.86, 0, 6.0}}),
                                 Finished("ssp:2", 0.4380, 15000, {{10, 5.0, 0.43, 0, 6.0}})};
  runs[2].summary.set_learning_rate(0.08);
  runs[2].summary.set_mean_staleness(6.8);
  const std::vector<std::string> h = CompareHighlights(runs, ReportedTargets(0.9));
  ASSERT_GE(h.size(), 3u);
  EXPECT_EQ(h[0], "**Finding: ssp:2 lost the model**: it ended at 0.4380 test accuracy, 0.47 below sync "
                  "(0.9077). In async and ssp the usual cause is a step too large for the staleness (lr "
                  "0.08, mean staleness 6.8); docs/training.md says how the defaults set it.");
  EXPECT_EQ(h[1], "Highest final test accuracy: sync (0.9077).");  // async, 0.0477 below: no finding
  EXPECT_EQ(h[2], "Fastest to 90%: sync (8.0 s).");
  EXPECT_THAT(CompareTable(runs, ReportedTargets(0.9)), HasSubstr("| final test acc | time to 90% | time to 95% |"));
}

TEST(Report, MarkdownTableEscapesPipes) {
  EXPECT_EQ(MarkdownTable({"a", "b"}, {{"x|y", "z"}}), "| a | b |\n| --- | --- |\n| x\\|y | z |\n");
}

TEST(Report, PreambleStatesCommandAndMachine) {
  const std::string p = ReportPreamble("t", "pstrain compare --modes=sync", {"Xeon", 2}, {"Straggler: none"});
  EXPECT_THAT(p, HasSubstr("pstrain compare --modes=sync"));
  EXPECT_THAT(p, HasSubstr("- Machine: 2 cores (Xeon)"));
  EXPECT_THAT(p, HasSubstr("- Straggler: none"));
}

TEST(Progress, ParsesTheChiefsEpochAndStepLines) {
  ProgressEvent e = ParseProgressLine(
      "I 14:25:23.569 trainer.cc:339] epoch 2/3 done: test accuracy 0.9712, test loss 0.1");
  EXPECT_EQ(e.kind, ProgressEvent::Kind::kEpochDone);
  EXPECT_EQ(e.epoch, 2);
  EXPECT_EQ(e.epochs, 3);
  EXPECT_DOUBLE_EQ(e.accuracy, 0.9712);
  e = ParseProgressLine("I 14:25:23.569 trainer.cc:300] epoch 1/3 step 100/235 loss 0.5  100 img/s");
  EXPECT_EQ(e.kind, ProgressEvent::Kind::kStep);
  EXPECT_EQ(e.step, 100);
  EXPECT_EQ(e.steps, 235);
  EXPECT_DOUBLE_EQ(e.images_per_sec, 100);
  e = ParseProgressLine(
      "I 14:25:23.569 trainer.cc:300] epoch 1/3 step 7/235 loss 0.5000  9876 img/s (this worker)");
  EXPECT_DOUBLE_EQ(e.images_per_sec, 9876);
  EXPECT_EQ(ParseProgressLine("W 14:25:23.569 ps_server.cc:1] refused").kind, ProgressEvent::Kind::kNone);
}

// The line drawn in place: the step, images/s of all workers, an ETA, the
// last accuracy and the tasks' states (counts, and who is restarting).
TEST(Progress, RedrawsTheStepWithRateEtaAndTaskStates) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  ASSERT_NE(out, nullptr);
  {
    RunProgress p(out, /*rewrite=*/true, "[1/2] sync", /*workers=*/2);
    p.OnTaskState("ps:0", "running");
    p.OnTaskState("worker:0", "running");
    p.OnTaskState("worker:1", "running");
    p.OnChiefLine("I 1 trainer.cc:1] epoch 1/2 step 50/100 loss 0.5  5000 img/s (this worker)");
    p.OnTaskState("worker:1", "restarting");
    p.Finish(absl::OkStatus(), 0.95, 9000);
  }
  std::fclose(out);
  const std::string text(buffer, size);
  std::free(buffer);
  EXPECT_THAT(text, HasSubstr("[1/2] sync: epoch 1/2, step 50/100, 10000 img/s, ETA "));
  EXPECT_THAT(text, HasSubstr(", 3 running, "));
  EXPECT_THAT(text, HasSubstr(", 2 running, worker:1 restarting, "));
  EXPECT_THAT(text, HasSubstr("\r\033[K[1/2] sync: done, test acc 0.9500, 9000 images/s"));
}

}  // namespace
}  // namespace pstrain

// The timeline of a real run (`pstrain launch --timeline`): the merged
// RUN_DIR/timeline.json is Chrome Trace Event Format (an object with
// traceEvents; "X" spans with ts and dur, "M" names; pid per task, tid per
// thread), every step's "compute" and "push_pull" spans nest in its "step"
// span and add up to it exactly, each shard's reply span lies inside the
// step's push_pull, there is one step span per row of the worker's steps
// CSV, each layer's backward lies inside the step's compute and its forward
// there too or, run ahead, in the push_pull before, the
// chief's evaluations and checkpoints are there, and each ps's gather and
// apply of every version and its saves.

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/csv.h"
#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using testing::RunningProcess;

struct Span {
  std::string name;
  int pid = 0;
  int tid = 0;
  int64_t ts = 0;
  int64_t dur = 0;
};

class Timeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_dir_ = new std::string(testing::MakeTempDir("timeline"));
    auto p = RunningProcess::Start(
        testing::BinaryPath("pstrain"),
        {"launch", "--cluster_spec=" + testing::SourcePath("cluster_specs/local_2ps_2w.json"),
         "--free_ports", "--run_dir=" + *run_dir_,
         "--data_dir=" + testing::SourcePath("data/mnist"), "--device=cpu", "--mode=sync",
         "--seed=4", "--max_steps=30", "--eval_every_steps=15", "--checkpoint_every_steps=10",
         "--timeline", "--log_every_steps=0", "--echo=none"});
    auto code = p->Wait(300);
    ASSERT_TRUE(code.ok()) << p->output();
    ASSERT_EQ(*code, 0) << p->output();
    EXPECT_THAT(p->output(), ::testing::HasSubstr("timeline.json"));
  }
  static void TearDownTestSuite() { delete run_dir_; }

  // The merged file's events, checked against the format on the way.
  static std::vector<Span> Spans(std::vector<google::protobuf::Value>* metadata) {
    auto text = ReadFileToString(*run_dir_ + "/timeline.json");
    EXPECT_TRUE(text.ok()) << text.status();
    auto json = ParseJson(text.ok() ? *text : "{}", "timeline.json");
    EXPECT_TRUE(json.ok()) << json.status();
    std::vector<Span> spans;
    if (!json.ok()) return spans;
    const auto& top = json->struct_value().fields();
    EXPECT_EQ(top.at("displayTimeUnit").string_value(), "ms");
    for (const google::protobuf::Value& e : top.at("traceEvents").list_value().values()) {
      const auto& f = e.struct_value().fields();
      const std::string ph = f.at("ph").string_value();
      EXPECT_TRUE(ph == "X" || ph == "M") << ph;
      EXPECT_TRUE(f.at("pid").has_number_value());
      EXPECT_TRUE(f.at("tid").has_number_value());
      EXPECT_FALSE(f.at("name").string_value().empty());
      if (ph == "M") {
        metadata->push_back(e);
        continue;
      }
      Span s{f.at("name").string_value(), static_cast<int>(f.at("pid").number_value()),
             static_cast<int>(f.at("tid").number_value()),
             static_cast<int64_t>(f.at("ts").number_value()),
             static_cast<int64_t>(f.at("dur").number_value())};
      EXPECT_GE(s.dur, 0) << s.name;
      spans.push_back(s);
    }
    return spans;
  }

  static std::string* run_dir_;
};
std::string* Timeline::run_dir_ = nullptr;

TEST_F(Timeline, IsTraceEventFormatWithOneNamedProcessPerWorker) {
  std::vector<google::protobuf::Value> metadata;
  const std::vector<Span> spans = Spans(&metadata);
  std::set<int> named;
  std::set<std::tuple<int, int>> threads;
  for (const auto& m : metadata) {
    const auto& f = m.struct_value().fields();
    const int pid = static_cast<int>(f.at("pid").number_value());
    if (f.at("name").string_value() == "process_name") named.insert(pid);
    if (f.at("name").string_value() == "thread_name") {
      threads.insert({pid, static_cast<int>(f.at("tid").number_value())});
    }
  }
  EXPECT_EQ(named, (std::set<int>{1, 2, 1000, 1001}));  // workers rank + 1; ps 1000 + index
  for (const Span& s : spans) {
    EXPECT_TRUE(named.count(s.pid)) << s.name;
    EXPECT_TRUE(threads.count({s.pid, s.tid})) << s.name << " on an unnamed thread " << s.tid;
  }
  for (const char* file : {"/timeline/worker0.json", "/timeline/worker1.json",
                           "/timeline/ps0.json", "/timeline/ps1.json"}) {
    auto text = ReadFileToString(*run_dir_ + file);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_TRUE(ParseJson(*text, file).ok()) << file << " is not closed JSON";
  }
}

TEST_F(Timeline, EveryStepIsItsComputeAndPushPullExactlyWithEachShardInside) {
  std::vector<google::protobuf::Value> metadata;
  const std::vector<Span> spans = Spans(&metadata);
  std::map<std::tuple<int, std::string, int64_t>, Span> by_start;  // (pid, name, ts)
  std::map<int, int> steps;                                        // by pid
  for (const Span& s : spans) {
    if (s.tid == 1) by_start[{s.pid, s.name, s.ts}] = s;
    if (s.name == "step") ++steps[s.pid];
  }
  for (int rank : {0, 1}) {
    auto csv = ReadCsv(absl::StrCat(*run_dir_, "/steps_worker", rank, ".csv"));
    ASSERT_TRUE(csv.ok()) << csv.status();
    EXPECT_EQ(steps[rank + 1], static_cast<int>(csv->rows.size())) << "worker " << rank;
  }
  int checked = 0;
  for (const Span& step : spans) {
    if (step.name != "step") continue;
    const auto compute = by_start.find({step.pid, "compute", step.ts});
    ASSERT_NE(compute, by_start.end()) << "no compute span at " << step.ts;
    const int64_t pushed = step.ts + compute->second.dur;
    const auto push = by_start.find({step.pid, "push_pull", pushed});
    ASSERT_NE(push, by_start.end()) << "no push_pull span at " << pushed;
    EXPECT_EQ(compute->second.dur + push->second.dur, step.dur);
    int shards = 0;
    for (const Span& s : spans) {
      if (s.pid != step.pid || s.tid < 100 || s.ts != pushed) continue;
      EXPECT_LE(s.ts + s.dur, step.ts + step.dur) << s.name;
      ++shards;
    }
    EXPECT_EQ(shards, 2) << "one reply span per ps";
    ++checked;
  }
  EXPECT_EQ(checked, 60);  // 30 steps of each worker
}

// Each layer's forward and backward lie in their step: its compute holds
// every backward, and every forward unless the forward ran ahead
// (--forward_ahead, on with --overlap), inside the push_pull of the step
// before, while that step's parameters came in.
TEST_F(Timeline, EachStepsLayersLieInItsComputeOrAheadInThePushPullBefore) {
  std::vector<google::protobuf::Value> metadata;
  const std::vector<Span> spans = Spans(&metadata);
  std::set<std::string> layers;
  // How many layer spans of each kind lie in `outer` (and end inside it).
  auto count_inside = [&](const Span& outer, int* forward, int* backward) {
    *forward = *backward = 0;
    for (const Span& s : spans) {
      const bool fwd = s.name.rfind("forward ", 0) == 0, bwd = s.name.rfind("backward ", 0) == 0;
      if (s.pid != outer.pid || (!fwd && !bwd) || s.ts < outer.ts || s.ts >= outer.ts + outer.dur) {
        continue;
      }
      EXPECT_EQ(s.tid, outer.tid) << s.name;
      EXPECT_LE(s.ts + s.dur, outer.ts + outer.dur) << s.name << " ends after its " << outer.name;
      *forward += fwd;
      *backward += bwd;
      if (fwd) layers.insert(s.name.substr(8));
    }
  };
  std::map<int, int> computes, forwards_in_compute, forwards_ahead;  // by pid
  for (const Span& outer : spans) {
    if (outer.pid > 2 || outer.tid != 1 || (outer.name != "compute" && outer.name != "push_pull")) {
      continue;
    }
    int forward = 0, backward = 0;
    count_inside(outer, &forward, &backward);
    // mnist_cnn: conv1 pool1 relu1 conv2 conv2_drop pool2 relu2 fc1 relu3 fc1_drop fc2.
    EXPECT_TRUE(forward == 0 || forward == 11) << outer.name << ": " << forward << " forward";
    if (outer.name == "compute") {
      EXPECT_EQ(backward, 11);
      ++computes[outer.pid];
      forwards_in_compute[outer.pid] += forward > 0;
    } else {
      EXPECT_EQ(backward, 0);
      forwards_ahead[outer.pid] += forward > 0;
    }
  }
  for (int pid : {1, 2}) {
    EXPECT_EQ(computes[pid], 30) << "worker " << pid - 1;
    EXPECT_EQ(forwards_in_compute[pid] + forwards_ahead[pid], 30) << "worker " << pid - 1;
  }
  // Every step but the first ran its forward ahead, except, on the chief,
  // step 15, before which it evaluates.
  EXPECT_EQ(forwards_ahead[1], 28);
  EXPECT_EQ(forwards_ahead[2], 29);
  EXPECT_EQ(layers.size(), 11u) << absl::StrJoin(layers, " ");
  EXPECT_TRUE(layers.count("conv1") && layers.count("fc2")) << absl::StrJoin(layers, " ");
}

TEST_F(Timeline, EachPsGathersAndAppliesEveryVersionAndSaves) {
  std::vector<google::protobuf::Value> metadata;
  std::map<int, std::map<std::string, int>> by_ps;
  std::map<int, int64_t> last_apply_end;
  int chief_checkpoints = 0;
  for (const Span& s : Spans(&metadata)) {
    chief_checkpoints += s.pid == 1 && s.name == "checkpoint";
    if (s.pid < 1000) continue;
    ++by_ps[s.pid][s.name];
    if (s.name == "apply") {
      EXPECT_GE(s.ts, last_apply_end[s.pid]) << "applies overlap on ps pid " << s.pid;
      last_apply_end[s.pid] = s.ts + s.dur;
    }
  }
  ASSERT_EQ(by_ps.size(), 2u);
  for (auto& [pid, names] : by_ps) {
    EXPECT_EQ(names["apply"], 30) << "ps pid " << pid << ": one update per sync step";
    EXPECT_EQ(names["gather"], 30) << "ps pid " << pid;
    // The chief's checkpoint 0, right after INIT, is saved before its
    // timeline opens: the ps has one save more.
    EXPECT_EQ(names["save"], chief_checkpoints + 1) << "ps pid " << pid;
    EXPECT_GE(names["save"], 3) << "ps pid " << pid << ": checkpoints at steps 10, 20, 30";
  }
}

TEST_F(Timeline, HoldsTheChiefsEvaluationsAndCheckpoints) {
  std::vector<google::protobuf::Value> metadata;
  std::map<std::string, int> chief;
  for (const Span& s : Spans(&metadata)) {
    if (s.pid == 1) ++chief[s.name];
  }
  EXPECT_GE(chief["evaluate"], 2);    // step 15 and the final model
  EXPECT_GE(chief["checkpoint"], 3);  // steps 10, 20, 30
}

// `pstrain timeline RUN_DIR --steps=A:B --out=FILE.png` draws those steps
// with gnuplot: a PNG with one row per thread of each task (2 workers x
// (train + 2 ps) + 2 ps = 8 rows, 160 + 40 pixels each in height).
TEST_F(Timeline, DrawsChosenStepsAsAGanttChart) {
  const std::string out = testing::MakeTempDir("gantt") + "/steps.png";
  auto p = RunningProcess::Start(testing::BinaryPath("pstrain"),
                                 {"timeline", *run_dir_, "--steps=5:8", "--out=" + out});
  auto code = p->Wait(120);
  ASSERT_TRUE(code.ok());
  ASSERT_EQ(*code, 0) << p->output();
  auto png = ReadFileToString(out);
  ASSERT_TRUE(png.ok()) << png.status();
  ASSERT_GT(png->size(), 24u);
  EXPECT_EQ(png->substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>((*png)[at + i]);
    return v;
  };
  EXPECT_EQ(be32(16), 1400u);            // IHDR width
  EXPECT_EQ(be32(20), 160u + 40u * 8u);  // IHDR height: eight rows
  auto data = ReadFileToString(out.substr(0, out.size() - 4) + ".dat");
  ASSERT_TRUE(data.ok());
  EXPECT_THAT(*data, ::testing::HasSubstr("# compute"));
  EXPECT_THAT(*data, ::testing::HasSubstr("# ps reply"));
  EXPECT_THAT(*data, ::testing::HasSubstr("# forward"));
  EXPECT_THAT(*data, ::testing::HasSubstr("# apply"));

  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"timeline", *run_dir_, "--steps=500:600", "--out=" + out},
        std::vector<std::string>{"timeline", *run_dir_, "--steps=8:5", "--out=" + out},
        std::vector<std::string>{"timeline", *run_dir_ + "/none", "--steps=1:2", "--out=" + out}}) {
    auto b = RunningProcess::Start(testing::BinaryPath("pstrain"), bad);
    auto c = b->Wait(60);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(*c, 2) << bad[2] << ": " << b->output();
  }
}

}  // namespace
}  // namespace pstrain

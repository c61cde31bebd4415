// The training options' one set of defaults and their command-line form:
// the flags default to a default TrainOptions, and ToArgs() parses back to
// the options it came from (what `pstrain launch` relies on).

#include "worker/train_options.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/train_flags.h"

namespace pstrain {
namespace {

using ::testing::Contains;

// Parses `args` as this process's command line into TrainOptions. Flags
// not in `args` keep their current values, so each test passes all of them.
absl::StatusOr<TrainOptions> Parse(const std::vector<std::string>& args) {
  std::vector<char*> argv = {const_cast<char*>("train_options_test")};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  absl::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  return TrainOptionsFromFlags();
}

void ExpectSame(const TrainOptions& a, const TrainOptions& b) {
  EXPECT_EQ(a.ToArgs(), b.ToArgs());
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.lr, b.lr);  // exactly: doubles must round-trip
  EXPECT_EQ(a.momentum, b.momentum);
  EXPECT_EQ(a.run_dir, b.run_dir);
  EXPECT_EQ(a.clean_run_dir, b.clean_run_dir);
  EXPECT_EQ(a.straggler_delay_ms, b.straggler_delay_ms);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.lr_schedule, b.lr_schedule);
  EXPECT_EQ(a.warmup_steps, b.warmup_steps);
  EXPECT_EQ(a.lr_step_size, b.lr_step_size);
  EXPECT_EQ(a.lr_gamma, b.lr_gamma);
  EXPECT_EQ(a.min_lr, b.min_lr);
  EXPECT_EQ(a.optimizer, b.optimizer);
  EXPECT_EQ(a.beta1, b.beta1);
  EXPECT_EQ(a.beta2, b.beta2);
  EXPECT_EQ(a.eps, b.eps);
  EXPECT_EQ(a.adagrad_lr_decay, b.adagrad_lr_decay);
  EXPECT_EQ(a.adagrad_initial_accumulator, b.adagrad_initial_accumulator);
  EXPECT_EQ(a.wire, b.wire);
  EXPECT_EQ(a.overlap, b.overlap);
  EXPECT_EQ(a.forward_ahead, b.forward_ahead);
}

TEST(TrainOptions, EveryFieldIsAFlagWhoseDefaultIsTheFieldsDefault) {
  const std::vector<std::string> args = TrainOptions().ToArgs();
  EXPECT_EQ(args.size(), 56u);  // one per field
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq - 2);
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    ASSERT_NE(flag, nullptr) << name;
    EXPECT_EQ(flag->DefaultValue(), arg.substr(eq + 1)) << name;
  }
}

TEST(TrainOptions, EveryTrainingFlagIsAnOptionOfTheSameName) {
  std::vector<std::string> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), "train_flags.cc")) flags.emplace_back(name);
  }
  std::vector<std::string> names = TrainOptionNames();
  std::sort(flags.begin(), flags.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(flags, names);
}

TEST(TrainOptions, ArgsAreReadWithoutTheFlags) {
  auto o = TrainOptionsFromArgs({"--epochs=3", "--mode=async", "--staleness_lr=on"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->epochs, 3);
  EXPECT_EQ(o->mode, proto::ASYNC);
  EXPECT_TRUE(o->staleness_lr);
  EXPECT_EQ(o->batch_size, TrainOptions().batch_size);  // the rest: the defaults
  auto bad = TrainOptionsFromArgs({"--epochs=many"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("Illegal value 'many' specified for flag 'epochs'"));
  EXPECT_THAT(std::string(TrainOptionsFromArgs({"--no_such=1"}).status().message()),
              ::testing::HasSubstr("--no_such: not a training flag"));
  EXPECT_THAT(std::string(TrainOptionsFromArgs({"epochs=3"}).status().message()),
              ::testing::HasSubstr("not a training flag of the form --name=value"));
  EXPECT_THAT(std::string(TrainOptionsFromArgs({"--mode=fast"}).status().message()),
              ::testing::HasSubstr("fast"));
  EXPECT_EQ(TrainOptionsFromArgs({"--epochs=0"}).status().code(),
            absl::StatusCode::kInvalidArgument);  // validated
}

TEST(TrainOptions, ToArgsParsesBackToTheSameOptions) {
  TrainOptions o;
  o.mode = proto::SSP;
  o.staleness = 3;
  o.staleness_lr = true;
  o.epochs = 2;
  o.batch_size = 64;
  o.lr = 0.1 + 0.2;  // 0.30000000000000004: not what 6 digits would print
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 1e-4;
  o.max_steps = 40;
  o.seed = 18446744073709551615u;
  o.model = "mlp";
  o.device = "cpu";
  o.data_dir = "/data/a b";
  o.run_dir = "runs/x";
  o.clean_run_dir = false;
  o.shard_strategy = "tensor_aligned";
  o.eval_every_steps = 7;
  o.log_every_steps = 0;
  o.straggler_delay_ms = 12.5;
  o.connect_timeout_s = 3;
  o.peer_timeout_s = 9;
  o.heartbeat_interval_s = 0.25;
  o.rpc_timeout_s = 1.5;
  o.lr_schedule = "step";
  o.warmup_steps = 12;
  o.lr_step_size = 100;
  o.lr_gamma = 0.3;
  o.min_lr = 1e-5;
  o.wire = "topk:0.01";
  o.forward_ahead = false;
  ASSERT_TRUE(ValidateTrainOptions(o).ok());
  EXPECT_THAT(o.ToArgs(), Contains("--lr=0.30000000000000004"));
  auto parsed = Parse(o.ToArgs());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSame(*parsed, o);

  // And every optimizer's flags (what launch.json records for --resume).
  o.nesterov = false;
  o.momentum = kModeMomentum;  // SGD's alone
  o.optimizer = proto::ADAGRAD;
  o.eps = 1e-7 / 3;
  o.adagrad_lr_decay = 0.01;
  o.adagrad_initial_accumulator = 0.1;
  ASSERT_TRUE(ValidateTrainOptions(o).ok());
  EXPECT_THAT(o.ToArgs(), Contains("--optimizer=adagrad"));
  parsed = Parse(o.ToArgs());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSame(*parsed, o);
  o.optimizer = proto::ADAM;
  o.adagrad_lr_decay = o.adagrad_initial_accumulator = 0;
  o.beta1 = 0.8;
  o.beta2 = 0.99;
  ASSERT_TRUE(ValidateTrainOptions(o).ok());
  parsed = Parse(o.ToArgs());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSame(*parsed, o);
}

TEST(TrainOptions, BusyPollIsBounded) {
  for (int us : {-1, kMaxBusyPollUs + 1}) {
    TrainOptions o;
    o.busy_poll_us = us;
    const absl::Status s = ValidateTrainOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << us;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("--busy_poll_us")) << us;
  }
  auto parsed = TrainOptionsFromArgs({"--busy_poll_us=250"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->busy_poll_us, 250);
}

TEST(TrainOptions, OptimizerFlagsOutOfRangeOrForAnotherOptimizerAreRefusedNamingTheFlag) {
  struct Case {
    const char* flag;
    void (*edit)(TrainOptions*);
  };
  const Case cases[] = {
      {"--beta1",
       [](TrainOptions* o) {
         o->optimizer = proto::ADAM;
         o->beta1 = 1.0;
       }},
      {"--beta2",
       [](TrainOptions* o) {
         o->optimizer = proto::ADAMW;
         o->beta2 = -0.5;
       }},
      // Given to an optimizer that does not read them (the defaults are
      // apart from any value given).
      {"--beta1", [](TrainOptions* o) { o->beta1 = 0.8; }},
      {"--momentum",
       [](TrainOptions* o) {
         o->optimizer = proto::ADAM;
         o->momentum = 0.9;
       }},
      {"--eps", [](TrainOptions* o) { o->eps = -1e-8; }},
      {"--weight_decay", [](TrainOptions* o) { o->weight_decay = -0.1; }},
      {"--adagrad_lr_decay", [](TrainOptions* o) { o->adagrad_lr_decay = -1; }},
      {"--adagrad_initial_accumulator",
       [](TrainOptions* o) {
         o->optimizer = proto::ADAGRAD;
         o->adagrad_initial_accumulator = -1;
       }},
      {"--nesterov",
       [](TrainOptions* o) {
         o->optimizer = proto::ADAM;
         o->nesterov = true;
       }},
      {"--adagrad_lr_decay",
       [](TrainOptions* o) {
         o->optimizer = proto::ADAMW;
         o->adagrad_lr_decay = 0.1;
       }},
  };
  for (const Case& c : cases) {
    TrainOptions o;
    c.edit(&o);
    const absl::Status s = ValidateTrainOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(c.flag));
  }
  auto parsed = Parse({"--optimizer=rmsprop"});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), ::testing::HasSubstr("--optimizer"));
  ASSERT_TRUE(Parse(TrainOptions().ToArgs()).ok());  // the defaults again, for other tests
}

// lr and eps 0 mean PyTorch's defaults for the optimizer (SGD's lr: by
// mode, below); the JobConfig carries the optimizer's own fields, eps
// resolved.
TEST(TrainOptions, DefaultsFollowTheOptimizer) {
  TrainOptions o;
  EXPECT_DOUBLE_EQ(EffectiveLearningRate(o, 4), 0.04);
  proto::JobConfig job;
  SetJobOptimizer(o, 4, &job);
  EXPECT_EQ(job.optimizer(), proto::SGD);
  EXPECT_EQ(job.momentum(), 0.5);
  EXPECT_EQ(job.eps(), 0.0);  // not SGD's
  o.optimizer = proto::ADAMW;
  o.weight_decay = 0.01;
  EXPECT_DOUBLE_EQ(EffectiveLearningRate(o, 4), 1e-3);
  job.Clear();
  SetJobOptimizer(o, 4, &job);
  EXPECT_EQ(job.optimizer(), proto::ADAMW);
  EXPECT_EQ(job.eps(), 1e-8);
  EXPECT_EQ(job.beta1(), 0.9);
  EXPECT_EQ(job.beta2(), 0.999);
  EXPECT_EQ(job.weight_decay(), 0.01);
  EXPECT_EQ(job.momentum(), 0.0);  // not AdamW's
  o.optimizer = proto::ADAGRAD;
  EXPECT_DOUBLE_EQ(EffectiveLearningRate(o, 4), 1e-2);
  EXPECT_EQ(EffectiveEps(o), 1e-10);
  o.eps = 1e-6;
  EXPECT_EQ(EffectiveEps(o), 1e-6);
}

// SGD's defaults follow what an update applies: in sync the average of
// every worker's batch (0.01 x workers, momentum 0.5); in async and ssp one
// worker's batch (momentum 0 with several workers, one worker's step 0.02
// x (1 - momentum), scaled by min(N, 12 / (N - 1))); with one worker every
// mode is sync's. Given values win.
TEST(TrainOptions, SgdDefaultsFollowTheMode) {
  TrainOptions o;
  EXPECT_EQ(o.momentum, kModeMomentum);
  for (int n : {1, 2, 8, 64}) {
    EXPECT_DOUBLE_EQ(EffectiveLearningRate(o, n), 0.01 * n);
    EXPECT_EQ(EffectiveMomentum(o, n), 0.5);
  }
  EXPECT_DOUBLE_EQ(EffectiveLearningRate(o, 0), 0.01);  // not known: one worker's
  for (proto::UpdateMode mode : {proto::ASYNC, proto::SSP}) {
    o.mode = mode;
    EXPECT_DOUBLE_EQ(EffectiveLearningRate(o, 1), 0.01);
    EXPECT_EQ(EffectiveMomentum(o, 1), 0.5);
    for (const auto& [n, lr] : std::vector<std::pair<int, double>>{
             {0, 0.02}, {2, 0.04}, {4, 0.08}, {5, 0.06}, {8, 0.24 / 7}, {13, 0.02}, {16, 0.016}, {64, 0.24 / 63}}) {
      EXPECT_DOUBLE_EQ(EffectiveLearningRate(o, n), lr) << n;  // 0: a dynamic job
      EXPECT_EQ(EffectiveMomentum(o, n), 0.0) << n;
    }
    o.momentum = 0.9;  // given: the step is held
    EXPECT_DOUBLE_EQ(EffectiveLearningRate(o, 16), 0.0016);
    EXPECT_EQ(EffectiveMomentum(o, 16), 0.9);
    o.lr = 0.05;
    EXPECT_EQ(EffectiveLearningRate(o, 8), 0.05);
    o.momentum = kModeMomentum;
    o.lr = 0;
  }
  proto::JobConfig job;
  SetJobOptimizer(o, 8, &job);
  EXPECT_EQ(job.momentum(), 0.0);
  o.nesterov = true;  // needs a momentum, which the mode's default may not be
  const absl::Status bad = ValidateTrainOptions(o);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("--momentum"));
  o.momentum = 0.9;
  EXPECT_TRUE(ValidateTrainOptions(o).ok());
  o.momentum = -0.5;
  EXPECT_FALSE(ValidateTrainOptions(o).ok());
}

TEST(TrainOptions, WireTakesTheFourEncodingsAndRefusesOthersNamingTheFlag) {
  TrainOptions o;
  EXPECT_EQ(o.wire, "f32");
  for (const char* ok : {"f32", "bf16", "fp16", "topk:0.01", "topk:1"}) {
    o.wire = ok;
    EXPECT_TRUE(ValidateTrainOptions(o).ok()) << ok;
  }
  for (const char* bad : {"topk:0", "topk:1.01", "topk:", "f16", ""}) {
    o.wire = bad;
    const absl::Status s = ValidateTrainOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), ::testing::StartsWith("--wire: ")) << bad;
  }
  o.wire = "topk:0";
  EXPECT_THAT(std::string(ValidateTrainOptions(o).message()), ::testing::HasSubstr("0 < R <= 1"));
}

}  // namespace
}  // namespace pstrain

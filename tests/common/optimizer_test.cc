// The optimizers' configuration as a JobConfig carries it: what a ps may
// be asked to run (and what it refuses, naming the field), which
// hyperparameters each optimizer reads, and the state's layout. The update
// rules are tested in tests/ps_server/shard_store_test.cc.

#include "common/optimizer.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// An Adam job, edited by `edit`, through OptimizerFromJob.
absl::StatusOr<OptimizerConfig> FromJob(void (*edit)(proto::JobConfig*)) {
  proto::JobConfig job;
  job.set_optimizer(proto::ADAM);
  job.set_beta1(0.9);
  job.set_beta2(0.999);
  job.set_eps(1e-8);
  edit(&job);
  return OptimizerFromJob(job);
}

TEST(Optimizer, RefusesWhatItCannotRunNamingTheField) {
  struct Case {
    const char* field;
    void (*edit)(proto::JobConfig*);
  };
  const Case cases[] = {
      {"momentum",
       [](proto::JobConfig* j) {
         j->set_optimizer(proto::SGD);
         j->set_momentum(1.0);
       }},
      {"momentum",
       [](proto::JobConfig* j) {
         j->set_optimizer(proto::SGD);
         j->set_momentum(NAN);
       }},
      {"nesterov",
       [](proto::JobConfig* j) {
         j->set_optimizer(proto::SGD);
         j->set_nesterov(true);
       }},
      {"weight_decay", [](proto::JobConfig* j) { j->set_weight_decay(-1.0); }},
      {"weight_decay", [](proto::JobConfig* j) { j->set_weight_decay(INFINITY); }},
      {"beta1", [](proto::JobConfig* j) { j->set_beta1(1.0); }},
      {"beta2", [](proto::JobConfig* j) { j->set_beta2(-0.1); }},
      {"eps", [](proto::JobConfig* j) { j->set_eps(0.0); }},
      {"adagrad_lr_decay",
       [](proto::JobConfig* j) {
         j->set_optimizer(proto::ADAGRAD);
         j->set_adagrad_lr_decay(-1);
       }},
      {"adagrad_initial_accumulator",
       [](proto::JobConfig* j) {
         j->set_optimizer(proto::ADAGRAD);
         j->set_adagrad_initial_accumulator(INFINITY);
       }},
      {"optimizer 7",
       [](proto::JobConfig* j) { j->set_optimizer(static_cast<proto::Optimizer>(7)); }},
  };
  for (const Case& c : cases) {
    const absl::Status s = FromJob(c.edit).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.field));
  }
}

TEST(Optimizer, EachOptimizerReadsOnlyItsOwnFields) {
  // Adam does not read momentum, nor SGD the betas.
  auto adam = FromJob([](proto::JobConfig* j) { j->set_momentum(7.0); });
  ASSERT_TRUE(adam.ok()) << adam.status();
  EXPECT_EQ(DescribeOptimizer(*adam), "adam (betas 0.9, 0.999, eps 1e-08, weight decay 0)");
  auto sgd = FromJob([](proto::JobConfig* j) {
    j->set_optimizer(proto::SGD);
    j->set_momentum(0.5);
    j->set_beta1(7.0);
  });
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  EXPECT_EQ(DescribeOptimizer(*sgd), "sgd (momentum 0.5, weight decay 0)");
  // A JobConfig from before optimizers could be chosen is SGD.
  proto::JobConfig old;
  old.set_momentum(0.5);
  auto from_old = OptimizerFromJob(old);
  ASSERT_TRUE(from_old.ok());
  EXPECT_TRUE(SameOptimizer(*from_old, *sgd));
}

TEST(Optimizer, SameOptimizerComparesWhatTheOptimizerReads) {
  OptimizerConfig adam;
  adam.kind = proto::ADAM;
  OptimizerConfig other = adam;
  other.momentum = 0.5;  // not adam's
  EXPECT_TRUE(SameOptimizer(adam, other));
  other.beta2 = 0.99;
  EXPECT_FALSE(SameOptimizer(adam, other));
  other = adam;
  other.kind = proto::ADAMW;  // the same slots, another rule
  EXPECT_FALSE(SameOptimizer(adam, other));
  OptimizerConfig sgd;
  sgd.momentum = 0.5;
  other = sgd;
  other.momentum = 0.9;
  EXPECT_FALSE(SameOptimizer(sgd, other));
}

TEST(Optimizer, TheStateIsTheParametersThenTheSlotsAtTheirInitialValues) {
  const std::vector<float> params = {1.0f, -2.0f};
  OptimizerConfig c;
  EXPECT_EQ(NumSlots(c), 1);  // momentum_buffer
  EXPECT_EQ(InitialState(c, params), std::vector<float>({1.0f, -2.0f, 0.0f, 0.0f}));
  c.kind = proto::ADAMW;
  EXPECT_EQ(NumSlots(c), 2);  // exp_avg, exp_avg_sq
  EXPECT_EQ(InitialState(c, params), std::vector<float>({1.0f, -2.0f, 0, 0, 0, 0}));
  c.kind = proto::ADAGRAD;
  c.initial_accumulator = 0.25;
  EXPECT_EQ(NumSlots(c), 1);  // sum
  EXPECT_EQ(InitialState(c, params), std::vector<float>({1.0f, -2.0f, 0.25f, 0.25f}));
  EXPECT_EQ(StateFloats(c, 10), 20u);
}

TEST(Optimizer, NamesParseBackAndAnUnknownOneNamesTheFlag) {
  for (proto::Optimizer kind : {proto::SGD, proto::ADAM, proto::ADAMW, proto::ADAGRAD}) {
    auto parsed = ParseOptimizer(OptimizerName(kind));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kind);
  }
  const absl::Status s = ParseOptimizer("rmsprop").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--optimizer"));
}

}  // namespace
}  // namespace pstrain

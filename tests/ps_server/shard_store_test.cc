#include "ps_server/shard_store.h"

#include <cmath>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// torch.optim.SGD's step for one parameter, written out in double
// precision from PyTorch's documentation (dampening 0).
struct ReferenceSgd {
  double lr, mu, wd;
  bool nesterov;
  double p, buf = 0;
  int steps = 0;

  void Step(double grad) {
    double g = grad + wd * p;
    if (mu != 0) {
      buf = steps == 0 ? g : mu * buf + g;
      g = nesterov ? g + mu * buf : buf;
    }
    p -= lr * g;
    ++steps;
  }
};

struct Config {
  double mu, wd;
  bool nesterov;
};

class ShardStoreMatchesPyTorchSgd : public ::testing::TestWithParam<Config> {};

TEST_P(ShardStoreMatchesPyTorchSgd, OverManySteps) {
  const Config c = GetParam();
  const std::vector<float> init = {0.5f, -1.25f, 2.0f, 0.0f};
  ShardStore store(init, {c.mu, c.nesterov, c.wd});
  std::vector<ReferenceSgd> ref;
  for (float p : init) ref.push_back({0.05, c.mu, c.wd, c.nesterov, p});
  for (int step = 0; step < 50; ++step) {
    std::vector<float> grad(init.size());
    for (size_t i = 0; i < grad.size(); ++i) {
      grad[i] = static_cast<float>(std::sin(step * 0.7 + i));
      ref[i].Step(grad[i]);
    }
    ASSERT_TRUE(store.Apply(grad, 1.0f, 0.05f).ok());
  }
  for (size_t i = 0; i < init.size(); ++i) {
    EXPECT_NEAR(store.params()[i], ref[i].p, 1e-5) << "param " << i;
  }
  EXPECT_EQ(store.updates(), 50);
}

INSTANTIATE_TEST_SUITE_P(ShardStore, ShardStoreMatchesPyTorchSgd,
                         ::testing::Values(Config{0.0, 0.0, false}, Config{0.5, 0.0, false},
                                           Config{0.9, 0.0, true}, Config{0.5, 1e-2, false},
                                           Config{0.9, 1e-3, true}));

TEST(ShardStore, GradScaleAveragesASum) {
  ShardStore a({1.0f, 2.0f}, {0.5, false, 0.0});
  ShardStore b({1.0f, 2.0f}, {0.5, false, 0.0});
  ASSERT_TRUE(a.Apply(std::vector<float>{4.0f, 8.0f}, 0.25f, 0.1f).ok());
  ASSERT_TRUE(b.Apply(std::vector<float>{1.0f, 2.0f}, 1.0f, 0.1f).ok());
  EXPECT_FLOAT_EQ(a.params()[0], b.params()[0]);
  EXPECT_FLOAT_EQ(a.params()[1], b.params()[1]);
}

TEST(ShardStore, RejectsBadOptimizerConfig) {
  EXPECT_FALSE(ValidateOptimizerConfig({1.0, false, 0.0}).ok());
  EXPECT_FALSE(ValidateOptimizerConfig({-0.1, false, 0.0}).ok());
  EXPECT_FALSE(ValidateOptimizerConfig({0.5, false, -1.0}).ok());
  EXPECT_FALSE(ValidateOptimizerConfig({0.0, true, 0.0}).ok());
  EXPECT_FALSE(ValidateOptimizerConfig({std::nan(""), false, 0.0}).ok());
  EXPECT_TRUE(ValidateOptimizerConfig({0.9, true, 1e-4}).ok());
}

}  // namespace
}  // namespace pstrain

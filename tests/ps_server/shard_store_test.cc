// Each optimizer's update against PyTorch's definition (ps_server/
// shard_store.h writes them out): SGD against a double-precision loop over
// many steps, Adam, AdamW and Adagrad against values computed in Python's
// float64 from the same formulas (and checked once against torch.optim
// 1.13 in float64, which agreed to 2e-16), over three steps with a
// learning rate that changes each step (as a schedule's does) and a
// gradient scale. The state's layout, and that a refused update leaves no
// trace.

#include "ps_server/shard_store.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps_server/update_policy.h"

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

OptimizerConfig Sgd(double mu, bool nesterov = false, double wd = 0.0) {
  OptimizerConfig c;
  c.momentum = mu;
  c.nesterov = nesterov;
  c.weight_decay = wd;
  return c;
}

struct SgdCase {
  double mu, wd;
  bool nesterov;
};

class ShardStoreMatchesPyTorchSgd : public ::testing::TestWithParam<SgdCase> {};

TEST_P(ShardStoreMatchesPyTorchSgd, OverManySteps) {
  const SgdCase c = GetParam();
  const std::vector<float> init = {0.5f, -1.25f, 2.0f, 0.0f};
  ShardStore store(init, Sgd(c.mu, c.nesterov, c.wd));
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
    if (c.mu != 0) {
      EXPECT_NEAR(store.slot(0)[i], ref[i].buf, 1e-5) << "buffer " << i;
    }
  }
  EXPECT_EQ(store.updates(), 50);
}

INSTANTIATE_TEST_SUITE_P(ShardStore, ShardStoreMatchesPyTorchSgd,
                         ::testing::Values(SgdCase{0.0, 0.0, false}, SgdCase{0.5, 0.0, false},
                                           SgdCase{0.9, 0.0, true}, SgdCase{0.5, 1e-2, false},
                                           SgdCase{0.9, 1e-3, true}));

// Three steps on p0 = {0.5, -1.25, 2.0, 0.0}: gradient sums `kGrads[t]`
// scaled by kScales[t] (the sync average's 1/weight), at learning rate
// kLrs[t]. The last element's gradient is 0 until step 3, so its update is
// 0 / (0 + eps) = 0 until then.
const std::vector<float> kInit = {0.5f, -1.25f, 2.0f, 0.0f};
const std::vector<std::vector<float>> kGrads = {
    {0.2f, -0.4f, 0.6f, 0.0f}, {0.4f, 0.05f, -0.1f, 0.0f}, {-0.3f, 0.25f, 0.2f, 1e-3f}};
const float kScales[] = {0.5f, 1.0f, 1.0f};
const float kLrs[] = {0.1f, 0.05f, 0.02f};

struct HandCase {
  const char* name;
  OptimizerConfig config;
  std::vector<std::vector<double>> params;  // after each step
  std::vector<std::vector<double>> slots;   // after the last step, in slot order
};

OptimizerConfig Adam(proto::Optimizer kind, double wd, double beta1, double beta2, double eps) {
  OptimizerConfig c;
  c.kind = kind;
  c.weight_decay = wd;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.eps = eps;
  return c;
}

OptimizerConfig Adagrad(double wd, double lr_decay, double initial, double eps) {
  OptimizerConfig c;
  c.kind = proto::ADAGRAD;
  c.weight_decay = wd;
  c.lr_decay = lr_decay;
  c.initial_accumulator = initial;
  c.eps = eps;
  return c;
}

// Computed in Python (float64) from shard_store.h's formulas. By hand, adam
// step 1, element 0: g = 0.2 x 0.5 = 0.1; m = 0.1 g = 0.01; v = 0.001 g^2
// = 1e-5; step size 0.1 / (1 - 0.9) = 1; sqrt(v) / sqrt(1 - 0.999) = 0.1;
// p = 0.5 - 0.01 / (0.1 + 1e-8) = 0.40000000999999.
const HandCase kHandCases[] = {
    {"adam",
     Adam(proto::ADAM, 0.0, 0.9, 0.999, 1e-8),
     {{0.400000009999999, -1.1500000049999999, 1.9000000033333333, 0.0},
      {0.355781186987558, -1.1265265980502235, 1.8799890756307072, 0.0},
      {0.3522470209504651, -1.1317726394904213, 1.8679273463603188, -0.01277605081091368}},
     {{0.014100000000000001, 0.013299999999999994, 0.03529999999999999, 9.999999999999998e-05},
      {0.00025982001000000025, 0.00010491754000000009, 0.00013981009000000013,
       1.000000000000001e-09}}},
    // L2 weight decay: g = grad + 0.1 p, before the moments.
    {"adam_l2",
     Adam(proto::ADAM, 0.1, 0.9, 0.999, 1e-8),
     {{0.40000000666666624, -1.150000003076923, 1.900000002, 0.0},
      {0.3539758479603675, -1.109847955841787, 1.8604330149867216, 0.0},
      {0.34793274387527123, -1.103346687268364, 1.8429608398085342, -0.01277605081091368}},
     {{0.025289758539603673, -0.018273479586110176, 0.0872043301678672, 9.999999999999998e-05},
      {0.00028587586121785083, 0.0001289598577237327, 0.00040662158066795905,
       1.000000000000001e-09}}},
    // Decoupled: p *= 1 - lr x 0.1 first; the moments see the bare gradient.
    {"adamw",
     Adam(proto::ADAMW, 0.1, 0.8, 0.99, 1e-6),
     {{0.3950009999900001, -1.1375004999975, 1.8800003333322222, 0.0},
      {0.34739424766343513, -1.1108055789255262, 1.8531737061063616, 0.0},
      {0.3443642566066522, -1.1156740016183557, 1.8376078336951873, -0.014101908332109525}},
     {{0.01680000000000001, 0.03239999999999999, 0.06239999999999998, 0.00019999999999999996},
      {0.0025820100000000026, 0.001041790000000001, 0.0013810900000000013, 1.000000000000001e-08}}},
    // lr / (1 + (t - 1) 0.1), the sum starting at 0.5, L2 decay 0.01.
    {"adagrad",
     Adagrad(0.01, 0.1, 0.5, 1e-10),
     {{0.4853118118999566, -1.2212194932414353, 1.9587705542429061, 0.0},
      {0.46291196219342595, -1.2235427673972714, 1.9634547912732945, 0.0},
      {0.4685507931602817, -1.2286454130557216, 1.9589390207721966, -2.3570202466027572e-05}},
     {{0.7621750042259903, 0.6031161600652045, 0.6571054717367617, 0.500001}}},
    // PyTorch's defaults: the sum starts at 0, so a zero gradient divides 0 by eps.
    {"adagrad_defaults",
     Adagrad(0.0, 0.0, 0.0, kAdagradEps),
     {{0.4000000001, -1.15000000005, 1.9000000000333332, 0.0},
      {0.3514928751044981, -1.1621267812959342, 1.9158113883291752, 0.0},
      {0.36325984321048144, -1.1775571162873815, 1.9051209386555354, -0.0199999980000002}},
     {{0.26, 0.10500000000000001, 0.14, 1e-06}}},
};

// f32 arithmetic against float64: a few ulps, relative (the simulated f32
// run differs from the float64 one by at most 5e-7).
void ExpectClose(absl::Span<const float> actual, const std::vector<double>& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 2e-6 * std::fabs(expected[i]) + 1e-12)
        << what << " element " << i;
  }
}

class ShardStoreMatchesHandValues : public ::testing::TestWithParam<HandCase> {};

TEST_P(ShardStoreMatchesHandValues, OverThreeSteps) {
  const HandCase& c = GetParam();
  ShardStore store(kInit, c.config);
  ASSERT_EQ(store.num_slots(), static_cast<int>(c.slots.size()));
  for (int t = 0; t < 3; ++t) {
    ASSERT_TRUE(store.Apply(kGrads[t], kScales[t], kLrs[t]).ok());
    ExpectClose(store.params(), c.params[t], absl::StrCat(c.name, " params, step ", t + 1));
  }
  for (int k = 0; k < store.num_slots(); ++k) {
    ExpectClose(store.slot(k), c.slots[k], absl::StrCat(c.name, " slot ", k));
  }
  EXPECT_EQ(store.updates(), 3);
}

INSTANTIATE_TEST_SUITE_P(ShardStore, ShardStoreMatchesHandValues, ::testing::ValuesIn(kHandCases),
                         [](const ::testing::TestParamInfo<HandCase>& c) {
                           return std::string(c.param.name);
                         });

TEST(ShardStore, TheStateIsTheParametersThenTheSlots) {
  ShardStore adam(kInit, Adam(proto::ADAMW, 0.0, 0.9, 0.999, 1e-8));
  ASSERT_TRUE(adam.Apply(kGrads[0], 1.0f, 0.1f).ok());
  ASSERT_EQ(adam.state().size(), 3 * kInit.size());
  EXPECT_EQ(adam.state().subspan(0, 4), adam.params());
  EXPECT_EQ(adam.state().subspan(4, 4), adam.slot(0));  // exp_avg
  EXPECT_EQ(adam.state().subspan(8, 4), adam.slot(1));  // exp_avg_sq
  EXPECT_FLOAT_EQ(adam.slot(0)[0], 0.1f * 0.2f);
  EXPECT_FLOAT_EQ(adam.slot(1)[0], 0.001f * 0.2f * 0.2f);
  // Adagrad's sum starts at initial_accumulator.
  ShardStore adagrad(kInit, Adagrad(0, 0, 0.25, 1e-10));
  EXPECT_THAT(adagrad.slot(0), ::testing::Each(0.25f));
}

TEST(ShardStore, ARestoredStateContinuesExactly) {
  const OptimizerConfig config = Adam(proto::ADAM, 0.1, 0.9, 0.999, 1e-8);
  ShardStore straight(kInit, config);
  ASSERT_TRUE(straight.Apply(kGrads[0], kScales[0], kLrs[0]).ok());
  ShardStore restored({straight.state().begin(), straight.state().end()}, straight.updates(),
                      config);
  for (ShardStore* s : {&straight, &restored}) {
    ASSERT_TRUE(s->Apply(kGrads[1], kScales[1], kLrs[1]).ok());
  }
  EXPECT_EQ(std::vector<float>(restored.state().begin(), restored.state().end()),
            std::vector<float>(straight.state().begin(), straight.state().end()));
  EXPECT_EQ(restored.updates(), 2);  // the bias corrections' step went on too
}

TEST(ShardStore, SgdWithoutMomentumLeavesTheBufferAlone) {
  ShardStore store(kInit, Sgd(0.0));
  for (int t = 0; t < 3; ++t) ASSERT_TRUE(store.Apply(kGrads[t], 1.0f, 0.1f).ok());
  EXPECT_THAT(store.slot(0), ::testing::Each(0.0f));
  EXPECT_FLOAT_EQ(store.params()[0], 0.5f - 0.1f * (0.2f + 0.4f - 0.3f));
}

TEST(ShardStore, GradScaleAveragesASumForEveryOptimizer) {
  for (const OptimizerConfig& config :
       {Sgd(0.5), Adam(proto::ADAM, 0.01, 0.9, 0.999, 1e-8),
        Adam(proto::ADAMW, 0.01, 0.9, 0.999, 1e-8), Adagrad(0.01, 0.1, 0.1, 1e-10)}) {
    ShardStore a({1.0f, 2.0f}, config);
    ShardStore b({1.0f, 2.0f}, config);
    ASSERT_TRUE(a.Apply(std::vector<float>{4.0f, 8.0f}, 0.25f, 0.1f).ok());
    ASSERT_TRUE(b.Apply(std::vector<float>{1.0f, 2.0f}, 1.0f, 0.1f).ok());
    EXPECT_FLOAT_EQ(a.params()[0], b.params()[0]) << DescribeOptimizer(config);
    EXPECT_FLOAT_EQ(a.params()[1], b.params()[1]) << DescribeOptimizer(config);
  }
}

// A gradient whose square overflows f32 would make exp_avg_sq (or
// Adagrad's sum) infinite: refused, and the shard is as it was, its step
// count included, so the next update is the first one.
TEST(ShardStore, AnUpdateThatWouldMakeASlotNonFiniteLeavesNoTrace) {
  for (const HandCase& c : kHandCases) {
    ShardStore store(kInit, c.config);
    const std::vector<float> before(store.state().begin(), store.state().end());
    const absl::Status refused = store.Apply(std::vector<float>(4, 3e38f), 1.0f, 0.1f);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << c.name;
    EXPECT_EQ(std::vector<float>(store.state().begin(), store.state().end()), before) << c.name;
    EXPECT_EQ(store.updates(), 0) << c.name;
    ASSERT_TRUE(store.Apply(kGrads[0], kScales[0], kLrs[0]).ok());
    ExpectClose(store.params(), c.params[0], c.name);
  }
}

// The state before the last update stays in the buffer the next update
// writes into (a sync shard answers a pull for its previous version from
// it), for every optimizer. A reply still carrying that buffer keeps it
// as it was: the next update writes elsewhere. After a refused update the
// previous state is the current one.
TEST(ShardStore, KeepsTheStateBeforeItsLastUpdate) {
  auto data = [](const std::shared_ptr<PinnedFloats>& b) { return b->data(); };
  for (const HandCase& c : kHandCases) {
    ShardStore store(kInit, c.config);
    EXPECT_EQ(store.pinned_previous_state(), nullptr) << c.name;
    const std::vector<float> initial(store.state().begin(), store.state().end());
    ASSERT_TRUE(store.Apply(kGrads[0], kScales[0], kLrs[0]).ok());
    ASSERT_NE(store.pinned_previous_state(), nullptr) << c.name;
    EXPECT_EQ(data(store.pinned_previous_state()), initial) << c.name;
    // A reply of the previous version's parameters, still queued.
    const std::shared_ptr<PinnedFloats> sent = store.pinned_previous_state();
    const zmq::message_t frame = PinnedFloats::Frame(sent, 0, kInit.size());
    const std::vector<float> once(store.state().begin(), store.state().end());
    ASSERT_TRUE(store.Apply(kGrads[1], kScales[1], kLrs[1]).ok());
    EXPECT_EQ(data(store.pinned_previous_state()), once) << c.name;
    EXPECT_EQ(data(sent), initial) << c.name;
    ExpectClose(store.params(), c.params[1], c.name);
    ASSERT_FALSE(store.Apply(std::vector<float>(4, 3e38f), 1.0f, 0.1f).ok());
    EXPECT_EQ(store.pinned_previous_state(), store.pinned_state()) << c.name;
  }
}

// Replies of the last versions still going out as updates come (several
// workers, a large state): every reply keeps the values it was made with,
// the updates give what they give with no reply held, bit for bit, and
// the buffers the replies let go are written again rather than new ones
// made for each update. Replies held of 1 to 5 versions: up to three,
// the two kept spares and the state's two buffers are all there is; the
// spares are let go once updates stop needing them.
TEST(ShardStore, UpdatesUnderHeldRepliesWriteBuffersTheRepliesLetGo) {
  constexpr int kUpdates = 40;
  // Every optimizer: SGD without momentum writes only the parameters,
  // the others every array.
  std::vector<std::pair<std::string, OptimizerConfig>> configs = {
      {"sgd", Sgd(0.0)}, {"sgd_nesterov", Sgd(0.9, /*nesterov=*/true, 0.01)}};
  for (const HandCase& h : kHandCases) configs.emplace_back(h.name, h.config);
  for (const auto& [name, config] : configs) {
    for (size_t in_flight = 1; in_flight <= 5; ++in_flight) {
      ShardStore held(kInit, config);
      ShardStore alone(kInit, config);
      struct Reply {
        std::shared_ptr<PinnedFloats> buffer;
        zmq::message_t frame;
        std::vector<float> values;
      };
      std::vector<Reply> replies;
      for (int u = 0; u < kUpdates; ++u) {
        const size_t k = static_cast<size_t>(u) % 3;
        ASSERT_TRUE(held.Apply(kGrads[k], kScales[k], kLrs[k]).ok());
        ASSERT_TRUE(alone.Apply(kGrads[k], kScales[k], kLrs[k]).ok());
        ASSERT_EQ(std::vector<float>(held.state().begin(), held.state().end()),
                  std::vector<float>(alone.state().begin(), alone.state().end()))
            << name << " update " << u;
        const std::shared_ptr<PinnedFloats>& sent = held.pinned_state();
        replies.push_back({sent, PinnedFloats::Frame(sent, 0, sent->data().size()), sent->data()});
        if (replies.size() > in_flight) replies.erase(replies.begin());  // sent
        for (const Reply& r : replies) {
          ASSERT_EQ(r.buffer->data(), r.values) << name << " update " << u;
        }
      }
      // A buffer for each version whose replies are out and one to write.
      if (in_flight <= 3) {
        EXPECT_EQ(held.buffers_made(), static_cast<int64_t>(1 + in_flight))
            << name << ", " << in_flight << " replies in flight";
      }
      EXPECT_EQ(alone.buffers_made(), 2) << name;
      // The replies gone, a quiet spell lets the spares go; the updates
      // go on the same.
      replies.clear();
      for (int u = 0; u < 16; ++u) {
        const size_t k = static_cast<size_t>(u) % 3;
        ASSERT_TRUE(held.Apply(kGrads[k], kScales[k], kLrs[k]).ok());
        ASSERT_TRUE(alone.Apply(kGrads[k], kScales[k], kLrs[k]).ok());
      }
      EXPECT_EQ(held.spares(), 0u) << name << ", " << in_flight << " replies in flight";
      EXPECT_EQ(std::vector<float>(held.state().begin(), held.state().end()),
                std::vector<float>(alone.state().begin(), alone.state().end()))
          << name;
    }
  }
}

TEST(ShardStore, IsFiniteStateChecksEachArrayOnItsOwn) {
  EXPECT_TRUE(IsFiniteState(std::vector<float>{1.0f, 2.0f, 0.0f, 0.0f}, 2));
  EXPECT_FALSE(IsFiniteState(std::vector<float>{1.0f, 2.0f, 0.0f, NAN}, 2));
  // 2e19^2 overflows f32 in one array; split over two arrays each is fine.
  EXPECT_FALSE(IsFiniteState(std::vector<float>{2e19f, 0.0f}, 2));
  EXPECT_TRUE(IsFiniteState(std::vector<float>{1.3e19f, 1.3e19f}, 1));
}

// The squares are summed in float runs, then in double: over a million
// values (245 runs, the last one short) the verdict is the exact sum's
// 1e-4 either side of FLT_MAX (3.4e38), whether the sum is spread evenly or
// sits in a few values at the ends of runs, and a NaN or an infinity
// anywhere is caught.
TEST(ShardStore, IsFiniteInF32JudgesTheSumOfSquaresOfLongArrays) {
  constexpr size_t kN = 1'000'003;
  const double max = FLT_MAX;
  auto even = [&](double share) {
    return std::vector<float>(kN, static_cast<float>(std::sqrt(share * max / kN)));
  };
  EXPECT_TRUE(IsFiniteInF32(even(0.9999)));
  EXPECT_FALSE(IsFiniteInF32(even(1.0001)));
  // Four large values, in the tails of two runs and of the array (where
  // the float lanes take the leftovers), the rest ones.
  auto few = [&](double share) {
    std::vector<float> values(kN, 1.0f);
    const float big = static_cast<float>(std::sqrt((share * max - (kN - 4)) / 4));
    for (const size_t at : {size_t{4095}, size_t{8190}, kN - 2, kN - 1}) values[at] = big;
    return values;
  };
  EXPECT_TRUE(IsFiniteInF32(few(0.9999)));
  EXPECT_FALSE(IsFiniteInF32(few(1.0001)));
  for (const float bad : {NAN, INFINITY, -INFINITY, 2e19f}) {
    for (const size_t at : {size_t{0}, size_t{4095}, size_t{4096}, kN - 1}) {
      std::vector<float> values(kN, 1.0f);
      values[at] = bad;
      EXPECT_FALSE(IsFiniteInF32(values)) << bad << " at " << at;
    }
  }
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// Values in about [-2.1, 2.1], from a linear congruential generator: the
// same test data on every machine.
class TestFloats {
 public:
  explicit TestFloats(uint32_t seed) : x_(seed) {}
  float Next() {
    x_ = x_ * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int32_t>(x_)) * 1e-9f;
  }

 private:
  uint32_t x_;
};

// A sync version of two workers: the shard's sum of their weighted
// gradients must not depend on which arrived first, bit for bit (a sync
// run is deterministic for a seed whatever the timing). The second push is
// summed inside the optimizer's pass (ApplySum); a fused multiply-add there
// (x + w * g rounded once) would make the order matter.
// A sync version's average is one process's gradient where it can be:
// one worker's push is applied as it is, whatever its examples (a batch
// of 10 or 100: examples x gradient / examples rounds), and two workers'
// of the same examples as (g1 + g2) x 0.5, DDP's average over two. The
// reference is a store applying that gradient itself.
TEST(SyncPolicy, TheAverageOfEqualBatchesIsTheSumOverTheWorkers) {
  constexpr int kN = 4099;
  std::vector<float> params(kN), g1(kN), g2(kN);
  TestFloats random(4242);
  for (int i = 0; i < kN; ++i) {
    params[i] = random.Next();
    g1[i] = random.Next() * (1 + i % 7);
    g2[i] = random.Next() * 1e-3f;
  }
  std::vector<float> half_sum(kN);
  for (int i = 0; i < kN; ++i) half_sum[i] = (g1[i] + g2[i]) * 0.5f;
  proto::JobConfig job;
  job.set_mode(proto::SYNC);
  job.set_learning_rate(0.1);
  job.set_momentum(0.5);
  for (const int examples : {7, 10, 100, 64}) {
    for (const int workers : {1, 2}) {
      job.set_num_workers(workers);
      auto config = OptimizerFromJob(job);
      ASSERT_TRUE(config.ok());
      auto policy = CreateUpdatePolicy(job, std::make_unique<ShardStore>(params, *config));
      ASSERT_TRUE(policy.ok());
      ShardStore reference(params, *config);
      for (int version = 0; version < 3; ++version) {
        // Rank 1 first too: the sum is the same either way.
        for (int k = 0; k < workers; ++k) {
          const int rank = workers == 2 && version == 1 ? 1 - k : k;
          ASSERT_TRUE((*policy)->Push(rank, version, version, rank == 0 ? g1 : g2, examples).ok());
        }
        ASSERT_TRUE(reference.Apply(workers == 1 ? g1 : half_sum, 1.0f, 0.1f).ok());
      }
      const absl::Span<const float> got = (*policy)->store().state();
      const absl::Span<const float> want = reference.state();
      int differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
      EXPECT_EQ(differ, 0) << workers << " workers of " << examples << " examples";
    }
  }
}

TEST(SyncPolicy, TwoWorkersGradientsSumTheSameInEitherOrder) {
  constexpr int kN = 4099;  // not a multiple of the vector width or of the blocks
  std::vector<float> params(kN), g1(kN), g2(kN);
  TestFloats random(12345);
  for (int i = 0; i < kN; ++i) {
    params[i] = random.Next();
    g1[i] = random.Next() * (1 + i % 7);
    g2[i] = random.Next() * 1e-3f;
  }
  proto::JobConfig job;
  job.set_mode(proto::SYNC);
  job.set_num_workers(2);
  job.set_learning_rate(0.1);
  job.set_momentum(0.5);
  auto run = [&](bool first_is_one) {
    auto config = OptimizerFromJob(job);
    EXPECT_TRUE(config.ok());
    auto policy = CreateUpdatePolicy(job, std::make_unique<ShardStore>(params, *config));
    EXPECT_TRUE(policy.ok());
    for (int version = 0; version < 2; ++version) {
      const int a = first_is_one ? 0 : 1;
      EXPECT_TRUE((*policy)->Push(a, version, version, a == 0 ? g1 : g2, a == 0 ? 48 : 80).ok());
      EXPECT_TRUE(
          (*policy)->Push(1 - a, version, version, a == 0 ? g2 : g1, a == 0 ? 80 : 48).ok());
    }
    EXPECT_EQ((*policy)->version(), 2);
    const absl::Span<const float> s = (*policy)->store().state();
    return std::vector<float>(s.begin(), s.end());
  };
  const std::vector<float> one_first = run(true);
  const std::vector<float> two_first = run(false);
  ASSERT_EQ(one_first.size(), two_first.size());
  for (size_t i = 0; i < one_first.size(); ++i) {
    ASSERT_EQ(one_first[i], two_first[i]) << "element " << i;
  }
}

// With 3 or more workers the order of a sum changes its rounding: the ps
// sums a sync version in rank order whatever order the pushes arrive in,
// so a sync run repeats bit for bit with any number of workers. Checked
// against the sum formed here by hand in rank order ((g0 + w1 g1) +
// w2 g2 ..., each weight relative to the first's, each product rounded
// on its own: this file is compiled without contracted multiply-adds),
// applied as one averaged gradient (the first's weight over all), for
// every arrival order of 3 and 4 workers over 3 versions.
class RankOrderedSum : public ::testing::Test {
 protected:
  static constexpr int kN = 4099;

  void SetUp() override {
    TestFloats random(777);
    params_.resize(kN);
    for (float& p : params_) p = random.Next();
    grads_.assign(4, std::vector<float>(kN));
    for (int r = 0; r < 4; ++r) {
      // Magnitudes 1e3 apart, so the order of the sum shows in its rounding.
      const float scale = r % 2 == 0 ? 1.0f : 1e-3f;
      for (float& g : grads_[r]) g = random.Next() * scale;
    }
    job_.set_mode(proto::SYNC);
    job_.set_learning_rate(0.1);
    job_.set_momentum(0.5);
  }

  std::unique_ptr<UpdatePolicy> MakePolicy(int workers) {
    job_.set_num_workers(workers);
    auto config = OptimizerFromJob(job_);
    EXPECT_TRUE(config.ok());
    auto policy = CreateUpdatePolicy(job_, std::make_unique<ShardStore>(params_, *config));
    EXPECT_TRUE(policy.ok()) << policy.status();
    return std::move(*policy);
  }

  // The state after `versions` versions whose gradients are summed in
  // rank order over `ranks`, by hand.
  std::vector<float> Expected(const std::vector<int>& ranks, int workers, int versions) {
    job_.set_num_workers(workers);
    auto config = OptimizerFromJob(job_);
    EXPECT_TRUE(config.ok());
    ShardStore store(params_, *config);
    for (int v = 0; v < versions; ++v) {
      std::vector<float> sum(kN, 0.0f);
      int64_t weight = 0;
      bool first = true;
      const auto ref = static_cast<float>(kWeights[ranks.front()]);
      for (int r : ranks) {
        const float w = static_cast<float>(kWeights[r]) / ref;
        for (int i = 0; i < kN; ++i) {
          const float product = w * grads_[r][i];
          sum[i] = first ? product + 0.0f : sum[i] + product;
        }
        first = false;
        weight += kWeights[r];
      }
      const auto scale = static_cast<float>(static_cast<double>(ref) / static_cast<double>(weight));
      EXPECT_TRUE(store.Apply(sum, scale, 0.1f).ok());
    }
    const absl::Span<const float> s = store.state();
    return std::vector<float>(s.begin(), s.end());
  }

  static std::vector<float> State(const UpdatePolicy& policy) {
    const absl::Span<const float> s = policy.store().state();
    return std::vector<float>(s.begin(), s.end());
  }

  static constexpr int kWeights[4] = {48, 37, 80, 51};  // inexact products
  std::vector<float> params_;
  std::vector<std::vector<float>> grads_;
  proto::JobConfig job_;
};

TEST_F(RankOrderedSum, EveryArrivalOrderOfThreeAndFourWorkersGivesTheSameBits) {
  for (int workers : {3, 4}) {
    std::vector<int> order(workers);
    std::iota(order.begin(), order.end(), 0);
    const std::vector<float> expected = Expected(order, workers, 3);
    int orders = 0;
    do {
      std::unique_ptr<UpdatePolicy> policy = MakePolicy(workers);
      for (int v = 0; v < 3; ++v) {
        for (int k = 0; k < workers; ++k) {
          const int r = order[(k + v) % workers];  // another order each version
          auto outcome = policy->Push(r, v, v, grads_[r], kWeights[r]);
          ASSERT_TRUE(outcome.ok()) << outcome.status();
          EXPECT_EQ(outcome->result,
                    k + 1 == workers ? PushResult::kApplied : PushResult::kAccumulated);
        }
      }
      ASSERT_EQ(State(*policy), expected)
          << workers << " workers, arrival order starting " << absl::StrJoin(order, ",");
      ++orders;
    } while (std::next_permutation(order.begin(), order.end()));
    EXPECT_EQ(orders, workers == 3 ? 6 : 24);
  }
}

// A sum in arrival order would differ: the test above can tell.
TEST_F(RankOrderedSum, TheOrderOfTheSumShowsInItsBits) {
  EXPECT_NE(Expected({0, 1, 2}, 3, 1), Expected({2, 1, 0}, 3, 1));
}

// A rank declared dead is passed over: the others' sum keeps rank order
// whether the dead rank's absence is known before the pushes or is what
// completes the version.
TEST_F(RankOrderedSum, ADeadRankIsPassedOver) {
  const std::vector<float> expected = Expected({0, 2, 3}, 4, 1);
  bool refused = false;
  for (const std::vector<int>& order :
       std::vector<std::vector<int>>{{3, 2, 0}, {2, 0, 3}, {0, 3, 2}}) {
    // Dead before the version.
    std::unique_ptr<UpdatePolicy> before = MakePolicy(4);
    EXPECT_FALSE(before->SetActive(1, false, &refused));
    for (int r : order) ASSERT_TRUE(before->Push(r, 0, 0, grads_[r], kWeights[r]).ok());
    EXPECT_EQ(before->version(), 1);
    EXPECT_EQ(State(*before), expected) << absl::StrJoin(order, ",");
    // Declared dead once the others are in: that completes the version.
    std::unique_ptr<UpdatePolicy> after = MakePolicy(4);
    for (int r : order) ASSERT_TRUE(after->Push(r, 0, 0, grads_[r], kWeights[r]).ok());
    EXPECT_EQ(after->version(), 0);
    EXPECT_TRUE(after->SetActive(1, false, &refused));
    EXPECT_FALSE(refused);
    EXPECT_EQ(after->version(), 1);
    EXPECT_EQ(State(*after), expected) << absl::StrJoin(order, ",");
  }
}

// A dead rank that comes back before anything after it was summed is
// waited for again, in its place.
TEST_F(RankOrderedSum, ARankThatComesBackIsSummedInItsPlace) {
  bool refused = false;
  std::unique_ptr<UpdatePolicy> policy = MakePolicy(4);
  EXPECT_FALSE(policy->SetActive(1, false, &refused));
  ASSERT_TRUE(policy->Push(0, 0, 0, grads_[0], kWeights[0]).ok());  // then 1 is passed over
  ASSERT_TRUE(policy->Push(3, 0, 0, grads_[3], kWeights[3]).ok());  // kept: 2 is missing
  EXPECT_FALSE(policy->SetActive(1, true, &refused));
  ASSERT_TRUE(policy->Push(1, 0, 0, grads_[1], kWeights[1]).ok());
  EXPECT_EQ(policy->version(), 0);
  ASSERT_TRUE(policy->Push(2, 0, 0, grads_[2], kWeights[2]).ok());
  EXPECT_EQ(policy->version(), 1);
  EXPECT_EQ(State(*policy), Expected({0, 1, 2, 3}, 4, 1));
  EXPECT_EQ(policy->unordered_sums(), 0);
}

// One that comes back after a higher rank was summed is added on arrival,
// and counted (ShardStats.unordered_sums): that version repeats only to
// rounding.
TEST_F(RankOrderedSum, ARankBackTooLateIsSummedOnArrivalAndCounted) {
  bool refused = false;
  std::unique_ptr<UpdatePolicy> policy = MakePolicy(4);
  EXPECT_FALSE(policy->SetActive(1, false, &refused));
  ASSERT_TRUE(policy->Push(0, 0, 0, grads_[0], kWeights[0]).ok());
  ASSERT_TRUE(policy->Push(2, 0, 0, grads_[2], kWeights[2]).ok());  // summed: 1 is passed over
  EXPECT_FALSE(policy->SetActive(1, true, &refused));
  ASSERT_TRUE(policy->Push(1, 0, 0, grads_[1], kWeights[1]).ok());
  EXPECT_EQ(policy->unordered_sums(), 1);
  ASSERT_TRUE(policy->Push(3, 0, 0, grads_[3], kWeights[3]).ok());
  EXPECT_EQ(policy->version(), 1);
  EXPECT_EQ(policy->unordered_sums(), 1);
  EXPECT_EQ(State(*policy), Expected({0, 2, 1, 3}, 4, 1));
}

// A restarted worker whose predecessor died between its pushes to two
// shards repeats the step: this shard, which had the first gradient and
// went on to the next version, counts the repeat once and holds the
// version's parameters for it to compute on. A rank whose gradient the
// version did not have (declared dead) is stale as before, and so is a
// push two versions behind. The last version of the job too: a duplicate.
TEST_F(RankOrderedSum, ARepeatOfTheVersionJustAppliedIsADuplicate) {
  job_.set_total_steps(2);
  std::unique_ptr<UpdatePolicy> policy = MakePolicy(3);
  EXPECT_FALSE(policy->HoldsPreviousVersion());
  bool refused = false;
  EXPECT_FALSE(policy->SetActive(2, false, &refused));
  for (int r : {1, 0}) ASSERT_TRUE(policy->Push(r, 0, 0, grads_[r], kWeights[r]).ok());
  ASSERT_EQ(policy->version(), 1);
  ASSERT_TRUE(policy->HoldsPreviousVersion());
  const std::vector<float>& previous = policy->store().pinned_previous_state()->data();
  EXPECT_EQ(std::vector<float>(previous.begin(), previous.begin() + kN), params_);
  const std::vector<float> after = State(*policy);
  auto repeat = policy->Push(1, 0, 0, grads_[1], kWeights[1]);
  ASSERT_TRUE(repeat.ok()) << repeat.status();
  EXPECT_EQ(repeat->result, PushResult::kDuplicate);
  EXPECT_EQ(State(*policy), after);
  auto dead = policy->Push(2, 0, 0, grads_[2], kWeights[2]);
  ASSERT_TRUE(dead.ok());
  EXPECT_EQ(dead->result, PushResult::kStale);
  EXPECT_EQ(policy->version(), 1);
  EXPECT_EQ(State(*policy), Expected({0, 1}, 3, 1));
  for (int r : {0, 1}) ASSERT_TRUE(policy->Push(r, 1, 1, grads_[r], kWeights[r]).ok());
  ASSERT_EQ(policy->version(), 2);  // the last
  EXPECT_EQ(policy->Push(0, 1, 1, grads_[0], kWeights[0])->result, PushResult::kDuplicate);
  EXPECT_EQ(policy->Push(0, 0, 0, grads_[0], kWeights[0])->result, PushResult::kLate);
  EXPECT_EQ(State(*policy), Expected({0, 1}, 3, 2));
}

// With backup workers a version is its first arrivals (that is what they
// are), summed in rank order; the completing push may be any rank.
TEST_F(RankOrderedSum, BackupWorkersFirstArrivalsAreSummedInRankOrder) {
  job_.set_backup_workers(1);
  for (const std::vector<int>& order :
       std::vector<std::vector<int>>{{2, 0, 3}, {3, 0, 2}, {0, 3, 2}, {3, 1, 2}, {2, 3, 1}}) {
    std::unique_ptr<UpdatePolicy> policy = MakePolicy(4);
    for (int r : order) ASSERT_TRUE(policy->Push(r, 0, 0, grads_[r], kWeights[r]).ok());
    EXPECT_EQ(policy->version(), 1);
    std::vector<int> ranks = order;
    std::sort(ranks.begin(), ranks.end());
    EXPECT_EQ(State(*policy), Expected(ranks, 4, 1)) << absl::StrJoin(order, ",");
  }
}

// An update shared out to a ChunkPool's helpers (chunks of 64Ki floats):
// for every optimizer, the state after several updates (scaled, summed
// with a sync partial, with the learning rate changing) is the same, bit
// for bit, as on one thread; so is the verdict on a gradient and on an
// update that would overflow, which leaves no trace.
TEST(ShardStore, AnUpdateSharedWithHelpersIsTheSameBitForBit) {
  constexpr size_t kN = 300'007;  // five chunks, the last one short
  ChunkPool pool(2);
  TestFloats floats(11);
  std::vector<float> init(kN), grad(kN), partial(kN);
  for (size_t i = 0; i < kN; ++i) {
    init[i] = floats.Next();
    grad[i] = floats.Next();
    partial[i] = floats.Next();
  }
  for (const OptimizerConfig& config :
       {Sgd(0.0), Sgd(0.9, /*nesterov=*/true, 0.01), Adam(proto::ADAM, 0.01, 0.9, 0.999, 1e-8),
        Adam(proto::ADAMW, 0.01, 0.9, 0.999, 1e-8), Adagrad(0.01, 0.1, 0.1, 1e-10)}) {
    ShardStore alone(init, config);
    ShardStore shared(init, config, &pool);
    for (int step = 0; step < 3; ++step) {
      const float lr = 0.1f / static_cast<float>(step + 1);
      ASSERT_TRUE(alone.Apply(grad, 0.5f, lr).ok());
      ASSERT_TRUE(shared.Apply(grad, 0.5f, lr).ok());
      ASSERT_TRUE(alone.ApplySum(partial, grad, 2.0f, 1.0f / 3.0f, lr).ok());
      ASSERT_TRUE(shared.ApplySum(partial, grad, 2.0f, 1.0f / 3.0f, lr).ok());
    }
    ASSERT_EQ(std::vector<float>(shared.state().begin(), shared.state().end()),
              std::vector<float>(alone.state().begin(), alone.state().end()))
        << DescribeOptimizer(config);
    std::vector<float> huge = grad;
    huge[kN - 1] = 3e38f;  // its square overflows: every optimizer refuses
    const std::vector<float> before(shared.state().begin(), shared.state().end());
    EXPECT_EQ(shared.Apply(huge, 1.0f, 0.1f).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(std::vector<float>(shared.state().begin(), shared.state().end()), before);
    EXPECT_EQ(shared.updates(), alone.updates());
    EXPECT_FALSE(IsFiniteInF32(huge, &pool));
    EXPECT_TRUE(IsFiniteInF32(grad, &pool));
  }
}

// Apply's check of the gradient in its own pass gives IsFiniteInF32's
// verdict, alone and with helpers, at the edge of FLT_MAX and for a NaN or
// an infinity anywhere; a refused gradient leaves no trace (InvalidArgument,
// the state and the update count as they were; the previous state is the
// current one, as after any refused update), and a finite one whose update
// would overflow is still refused as before.
TEST(ShardStore, ApplyChecksTheGradientInItsPassAsIsFiniteInF32Does) {
  constexpr size_t kN = 1'000'003;
  ChunkPool pool(2);
  const OptimizerConfig sgd = Sgd(0.0);
  for (ChunkPool* helpers : {static_cast<ChunkPool*>(nullptr), &pool}) {
    std::vector<std::vector<float>> grads;
    for (const double share : {0.99999, 0.999999, 1.0, 1.000001, 1.00001}) {
      grads.emplace_back(kN, static_cast<float>(std::sqrt(share * FLT_MAX / kN)));
    }
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      for (const size_t at : {size_t{0}, size_t{4095}, size_t{4096}, kN - 1}) {
        grads.emplace_back(kN, 1e-3f);
        grads.back()[at] = bad;
      }
    }
    for (const std::vector<float>& grad : grads) {
      ShardStore store(std::vector<float>(kN, 0.5f), sgd, helpers);
      ASSERT_TRUE(store.Apply(std::vector<float>(kN, 1.0f), 1.0f, 0.1f, true).ok());
      const std::vector<float> before(store.state().begin(), store.state().end());
      const auto previous = store.pinned_previous_state();
      // A learning rate small enough that a finite gradient's update is.
      const absl::Status s = store.Apply(grad, 1.0f, 1e-30f, /*check_grad=*/true);
      if (IsFiniteInF32(grad)) {
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_EQ(store.updates(), 2);
        continue;
      }
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_EQ(std::vector<float>(store.state().begin(), store.state().end()), before);
      EXPECT_EQ(store.updates(), 1);
      EXPECT_EQ(store.pinned_previous_state(), store.pinned_state());
      EXPECT_NE(previous, store.pinned_state());
    }
    // A finite gradient whose update is not: the update's own refusal.
    ShardStore store(std::vector<float>(kN, 0.5f), sgd, helpers);
    const std::vector<float> small(kN, 1e-3f);
    ASSERT_TRUE(IsFiniteInF32(small));
    EXPECT_EQ(store.Apply(small, 1.0f, 1e38f, /*check_grad=*/true).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(store.updates(), 0);
  }
}

// Async and SSP refuse a gradient that is not finite themselves, on every
// path (applied, late, empty, from the future), and nothing of it stays:
// not the parameters, the version or the rank's clock (SSP's bound reads
// it). Sync leaves the check to its caller.
TEST(AsyncPolicy, RefusesAGradientThatIsNotFiniteLeavingNoTrace) {
  for (const proto::UpdateMode mode : {proto::ASYNC, proto::SSP}) {
    proto::JobConfig job;
    job.set_mode(mode);
    job.set_num_workers(2);
    job.set_learning_rate(0.1);
    job.set_staleness(1);
    const std::vector<float> params(5000, 1.0f), grad(5000, 0.5f);
    std::vector<float> nan = grad;
    nan[4321] = NAN;
    auto policy = CreateUpdatePolicy(job, std::make_unique<ShardStore>(params, *OptimizerFromJob(job)));
    ASSERT_TRUE(policy.ok());
    UpdatePolicy& p = **policy;
    EXPECT_TRUE(p.ChecksGradient());
    ASSERT_EQ(p.Push(0, 0, 0, grad, 10)->result, PushResult::kApplied);
    const std::vector<int64_t> clocks = p.Clocks();
    const std::vector<float> state(p.store().state().begin(), p.store().state().end());
    for (const auto& [version, examples] : {std::pair<int64_t, int>{1, 10}, {0, 10}, {1, 0}, {5, 10}}) {
      auto outcome = p.Push(1, 7, version, nan, examples);
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      EXPECT_EQ(outcome->result, PushResult::kNonFiniteGradient) << version << " " << examples;
    }
    EXPECT_EQ(p.Clocks(), clocks);
    EXPECT_EQ(p.version(), 1);
    EXPECT_EQ(std::vector<float>(p.store().state().begin(), p.store().state().end()), state);
    EXPECT_EQ(p.Push(1, 7, 5, grad, 10).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(p.Push(1, 1, 1, grad, 10)->result, PushResult::kApplied);
  }
  proto::JobConfig sync;
  sync.set_mode(proto::SYNC);
  sync.set_num_workers(1);
  sync.set_learning_rate(0.1);
  auto policy = CreateUpdatePolicy(
      sync, std::make_unique<ShardStore>(std::vector<float>(8, 1.0f), *OptimizerFromJob(sync)));
  ASSERT_TRUE(policy.ok());
  EXPECT_FALSE((*policy)->ChecksGradient());
}

// Async and SSP: a worker that rejoined after a ps loss computes its step
// in flight again and pushes it to every shard; a shard that applied it
// before the loss counts the repeat as a duplicate and changes nothing,
// and steps past the rank's clock (however far: the worker's own count)
// are applied. A dynamic job's ranks are slots: what a new process of
// the slot pushes is applied.
TEST(AsyncPolicy, AStepOfTheRankThatIsInAlreadyIsADuplicate) {
  for (const proto::UpdateMode mode : {proto::ASYNC, proto::SSP}) {
    proto::JobConfig job;
    job.set_mode(mode);
    job.set_num_workers(2);
    job.set_learning_rate(0.1);
    job.set_staleness(3);
    const std::vector<float> params(64, 1.0f), grad(64, 0.5f);
    auto policy =
        CreateUpdatePolicy(job, std::make_unique<ShardStore>(params, *OptimizerFromJob(job)));
    ASSERT_TRUE(policy.ok());
    UpdatePolicy& p = **policy;
    ASSERT_EQ(p.Push(0, 0, 0, grad, 10)->result, PushResult::kApplied);
    ASSERT_EQ(p.Push(1, 0, 0, grad, 10)->result, PushResult::kApplied);
    ASSERT_EQ(p.Push(0, 1, 1, grad, 10)->result, PushResult::kApplied);
    const std::vector<float> state(p.store().state().begin(), p.store().state().end());
    for (const auto& [rank, step] : {std::pair<int, int64_t>{0, 1}, {0, 0}, {1, 0}}) {
      auto repeat = p.Push(rank, step, 2, grad, 10);
      ASSERT_TRUE(repeat.ok()) << repeat.status();
      EXPECT_EQ(repeat->result, PushResult::kDuplicate) << "rank " << rank << " step " << step;
    }
    EXPECT_EQ(p.version(), 3);
    EXPECT_EQ(p.Clocks(), (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(std::vector<float>(p.store().state().begin(), p.store().state().end()), state);
    EXPECT_EQ(p.Push(1, 1, 3, grad, 10)->result, PushResult::kApplied);
    EXPECT_EQ(p.Push(0, 3, 4, grad, 10)->result, PushResult::kApplied);
    EXPECT_EQ(p.Clocks(), (std::vector<int64_t>{4, 2}));

    job.set_dynamic_workers(true);
    job.set_total_steps(100);
    auto dynamic =
        CreateUpdatePolicy(job, std::make_unique<ShardStore>(params, *OptimizerFromJob(job)));
    ASSERT_TRUE(dynamic.ok());
    ASSERT_EQ((*dynamic)->Push(0, 5, 0, grad, 10)->result, PushResult::kApplied);
    EXPECT_EQ((*dynamic)->Push(0, 2, 1, grad, 10)->result, PushResult::kApplied);
  }
}

// The verdict of IsFiniteInF32 with helpers is the one-thread verdict at
// the edge of FLT_MAX too: the runs' sums are added in run order.
TEST(ShardStore, IsFiniteInF32WithHelpersJudgesAsAlone) {
  constexpr size_t kN = 1'000'003;
  ChunkPool pool(3);
  for (const double share : {0.99999, 0.999999, 1.0, 1.000001, 1.00001}) {
    const std::vector<float> values(kN, static_cast<float>(std::sqrt(share * FLT_MAX / kN)));
    EXPECT_EQ(IsFiniteInF32(values, &pool), IsFiniteInF32(values)) << share;
  }
  std::vector<float> values(kN, 1.0f);
  values[700'001] = NAN;
  EXPECT_FALSE(IsFiniteInF32(values, &pool));
}

}  // namespace
}  // namespace pstrain

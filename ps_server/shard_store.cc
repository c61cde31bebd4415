#include "ps_server/shard_store.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>

#include "Eigen/Core"
#include "glog/logging.h"

namespace pstrain {
namespace {

using shard_store_internal::AdagradScalars;
using shard_store_internal::AdamScalars;
using shard_store_internal::MomentumScalars;
using shard_store_internal::SegmentPlan;

// The update kernels: one loop each, reading the gradient and the current
// state and writing the next state, run block by block (kBlockFloats) so
// that the finiteness check of what a block wrote reads it from the cache
// (FiniteSums): every input is read once from memory, every output
// written once. `__restrict` (the states are distinct buffers, the
// gradient a third) lets the compiler vectorise them without run-time
// alias checks, and this file is built with -fno-math-errno so that sqrt
// vectorises too. The scalars and the gradient's pointers come by value:
// by reference, a store through next_p might have changed them (a float
// of the struct), so they were loaded again on every iteration.

// How an update's gradient is formed, element by element (GradientAt):
//  - kScaled: a pushed gradient times `scale` (async; a sync version
//    whose sum was accumulated already);
//  - kFirstOfVersion: a sync version's only gradient, weight x grad, times
//    scale = 1 / weight (as its accumulation would give: 0 + weight x g);
//  - kSumOfVersion: the gradients accumulated before (`partial`) plus the
//    one that completes the version, weight x grad, times 1 / the total
//    weight: the version's example-weighted average, summed here instead
//    of into the accumulator and read back.
enum class Gradient { kScaled, kFirstOfVersion, kSumOfVersion };

template <Gradient kKind>
struct GradientAt {
  const float* __restrict grad;
  const float* __restrict partial;  // kSumOfVersion
  float weight;                     // kFirstOfVersion, kSumOfVersion
  float scale;
  float operator()(int64_t i) const {
    if constexpr (kKind == Gradient::kScaled) return grad[i] * scale;
    if constexpr (kKind == Gradient::kFirstOfVersion) return (weight * grad[i] + 0.0f) * scale;
    return (partial[i] + weight * grad[i]) * scale;
  }
};

constexpr int64_t kBlockFloats = 4096;  // 16 KiB per array: an L1 cache's share

// SGD without momentum: PyTorch keeps no buffer, and the step is g.
// Where PyTorch adds with an alpha (`d_p.add(param, alpha=weight_decay)`,
// `param.add_(d_p, alpha=-lr)`), its CPU kernels compute one fused
// multiply-add (Vectorized::fmadd): so does std::fma here, which makes an
// update the same as torch.optim's bit for bit (tests/python:
// torch_idioms, one worker against one process). With -march=native it is
// an FMA instruction the loop vectorises; without FMA hardware, a slower
// library call with the same result.
template <typename G>
[[gnu::noinline]] void PlainSgd(int64_t begin, int64_t end, const G grad, float wd, float lr,
                                const float* __restrict p, float* __restrict next_p) {
  for (int64_t i = begin; i < end; ++i)
    next_p[i] = std::fma(std::fma(p[i], wd, grad(i)), -lr, p[i]);
}

template <typename G>
[[gnu::noinline]] void MomentumSgd(const MomentumScalars c, int64_t begin, int64_t end,
                                   const G grad, const float* __restrict p,
                                   const float* __restrict buf, float* __restrict next_p,
                                   float* __restrict next_buf) {
  // torch.optim.SGD: d_p = d_p.add(param, alpha=wd) (fused);
  // buf.mul_(mu).add_(d_p) (a product, then a sum); nesterov: d_p.add(buf,
  // alpha=mu) (fused); param.add_(d_p, alpha=-lr) (fused).
  for (int64_t i = begin; i < end; ++i) {
    const float g = std::fma(p[i], c.wd, grad(i));
    const float b = c.keep * buf[i] + g;
    next_buf[i] = b;
    next_p[i] = std::fma(c.nesterov ? std::fma(b, c.mu, g) : b, -c.lr, p[i]);
  }
}

template <typename G>
[[gnu::noinline]] void Adam(const AdamScalars c, int64_t begin, int64_t end, const G grad,
                            const float* __restrict p, const float* __restrict m,
                            const float* __restrict v, float* __restrict next_p,
                            float* __restrict next_m, float* __restrict next_v) {
  // torch.optim.Adam(W): grad.add(param, alpha=wd) and
  // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1) fused as PyTorch's CPU
  // kernels fuse them; exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=
  // 1 - beta2) as (value x grad) x grad fused into the sum; the update
  // param.addcdiv_(exp_avg, denom, value=-step_size) as (step_size x
  // exp_avg) / denom. Bit for bit torch.optim's on the CPU.
  for (int64_t i = begin; i < end; ++i) {
    const float g = std::fma(p[i], c.l2, grad(i));
    const float mi = std::fma(g, c.one_minus_beta1, c.beta1 * m[i]);
    const float vi = std::fma(c.one_minus_beta2 * g, g, c.beta2 * v[i]);
    next_m[i] = mi;
    next_v[i] = vi;
    next_p[i] = p[i] * c.decay - c.step_size * mi / (std::sqrt(vi) / c.bc2_sqrt + c.eps);
  }
}

template <typename G>
[[gnu::noinline]] void Adagrad(const AdagradScalars c, int64_t begin, int64_t end, const G grad,
                               const float* __restrict p, const float* __restrict sum,
                               float* __restrict next_p, float* __restrict next_sum) {
  // torch.optim.Adagrad: grad.add(param, alpha=wd) and
  // state_sum.addcmul_(grad, grad) fused, as PyTorch's CPU kernels do.
  for (int64_t i = begin; i < end; ++i) {
    const float g = std::fma(p[i], c.wd, grad(i));
    const float s = std::fma(g, g, sum[i]);
    next_sum[i] = s;
    next_p[i] = p[i] - c.clr * g / (std::sqrt(s) + c.eps);
  }
}

// The scalars come from a learning rate in double, as PyTorch's do from a
// Python float: a script's lr (0.01 x a scheduler's factor) rounded to f32
// before the bias correction divides it would differ from torch.optim's
// step size in the last bit.
MomentumScalars MomentumScalarsFor(const OptimizerConfig& o, int64_t updates, double lr) {
  const float mu = static_cast<float>(o.momentum);
  return {static_cast<float>(o.weight_decay), static_cast<float>(lr), mu, updates == 0 ? 0.0f : mu,
          o.nesterov};
}

AdamScalars AdamScalarsFor(const OptimizerConfig& o, int64_t updates, double lr) {
  const double t = static_cast<double>(updates + 1);
  const bool adamw = o.kind == proto::ADAMW;
  AdamScalars c;
  c.l2 = adamw ? 0.0f : static_cast<float>(o.weight_decay);
  c.decay = adamw ? static_cast<float>(1.0 - lr * o.weight_decay) : 1.0f;
  c.beta1 = static_cast<float>(o.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  c.step_size = static_cast<float>(lr / (1.0 - std::pow(o.beta1, t)));
  c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, t)));
  c.eps = static_cast<float>(o.eps);
  return c;
}

AdagradScalars AdagradScalarsFor(const OptimizerConfig& o, int64_t updates, double lr) {
  const double t = static_cast<double>(updates + 1);
  return {static_cast<float>(o.weight_decay),
          static_cast<float>(lr / (1.0 + (t - 1.0) * o.lr_decay)), static_cast<float>(o.eps)};
}

// The segment's step under optimizer `o` at `lr`, its `updates`-th.
SegmentPlan PlanFor(const OptimizerConfig& o, int64_t updates, double lr) {
  SegmentPlan plan;
  switch (o.kind) {
    case proto::SGD:
      if (o.momentum == 0.0) {
        plan.kind = SegmentPlan::Kind::kPlainSgd;
        plan.wd = static_cast<float>(o.weight_decay);
        plan.lr = static_cast<float>(lr);
      } else {
        plan.kind = SegmentPlan::Kind::kMomentumSgd;
        plan.momentum = MomentumScalarsFor(o, updates, lr);
      }
      return plan;
    case proto::ADAM:
    case proto::ADAMW:
      plan.kind = SegmentPlan::Kind::kAdam;
      plan.adam = AdamScalarsFor(o, updates, lr);
      return plan;
    default:  // validated: adagrad
      plan.kind = SegmentPlan::Kind::kAdagrad;
      plan.adagrad = AdagradScalarsFor(o, updates, lr);
      return plan;
  }
}

// Runs `plan`'s kernel over [begin, end) of the state `s` into `next`
// (parameters then slots, `n` floats each); returns how many of those
// arrays, from the first, it wrote.
template <typename G>
int RunPlan(const SegmentPlan& plan, int64_t begin, int64_t end, const G& grad, int64_t n,
            const float* s, float* next) {
  switch (plan.kind) {
    case SegmentPlan::Kind::kSkip:
      return 0;
    case SegmentPlan::Kind::kPlainSgd:
      PlainSgd(begin, end, grad, plan.wd, plan.lr, s, next);
      return 1;
    case SegmentPlan::Kind::kMomentumSgd:
      MomentumSgd(plan.momentum, begin, end, grad, s, s + n, next, next + n);
      return 2;
    case SegmentPlan::Kind::kAdam:
      Adam(plan.adam, begin, end, grad, s, s + n, s + 2 * n, next, next + n, next + 2 * n);
      return 3;
    case SegmentPlan::Kind::kAdagrad:
      Adagrad(plan.adagrad, begin, end, grad, s, s + n, next, next + n);
      return 2;
  }
  return 0;
}

// Sums of squares: in float, in 32 lanes the compiler keeps in vector
// registers, over runs of at most kRun elements, each run's lanes then
// added into lanes of double. A float lane sums at most 159 squares (its
// 128, and lane 0 a run's last 31), so its rounding is within 1e-5
// relative: the verdict "sum < FLT_MAX" can differ from an exact sum's only
// within 1e-5 of FLT_MAX. A square that overflows is +inf, and so is the
// sum (the exact one is above FLT_MAX too); NaN propagates. (Squares of
// values below 1.1e-19, such as an Adam moment decaying on a dead unit,
// are subnormal floats, which some CPUs multiply slowly; not measured
// here, an AMD EPYC.) Converting every square to double and summing in 8
// lanes makes each addition wait for the one before in its register, and
// the conversions take their own port: the check then takes half of an SGD
// update (BM_ShardStoreApply; benchmarks/log/ps_bench.md).
struct SquareSums {
  static constexpr size_t kLanes = 32;
  static constexpr size_t kRun = 4096;
  using Lanes = std::array<float, kLanes>;
  double lanes[kLanes] = {};

  void Add(const float* x, size_t n) {
    for (size_t run = 0; run < n; run += kRun) AddLanes(RunLanes(x + run, std::min(kRun, n - run)));
  }
  // The squares of one run (n <= kRun), summed in float lanes: computed
  // anywhere (a helper thread), added in run order by AddLanes, they give
  // the sums Add gives.
  static Lanes RunLanes(const float* x, size_t n) {
    Lanes acc = {};  // a local the compiler may keep in registers
    size_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) acc[j] += x[i + j] * x[i + j];
    }
    for (; i < n; ++i) acc[0] += x[i] * x[i];
    return acc;
  }
  void AddLanes(const Lanes& acc) {
    for (size_t j = 0; j < kLanes; ++j) lanes[j] += acc[j];
  }
  bool Finite() const {
    double sum = 0;
    for (double lane : lanes) sum += lane;
    return sum < static_cast<double>(FLT_MAX);
  }
};

static_assert(SquareSums::kRun == kBlockFloats, "an update's block is one run of its sums");

// Blocks per chunk of work a ChunkPool shares out: 256 KiB of each array,
// so that a helper's wake-up (tens of microseconds on a busy VM) buys a
// chunk worth it, and shards below two chunks are updated on one thread.
constexpr int64_t kBlocksPerChunk = 16;

int64_t Blocks(int64_t n) { return (n + kBlockFloats - 1) / kBlockFloats; }
int Chunks(int64_t blocks) {
  return static_cast<int>((blocks + kBlocksPerChunk - 1) / kBlocksPerChunk);
}

// Runs fn(begin_block, end_block) over [0, blocks), chunk by chunk, on
// `pool`'s threads and the caller's.
template <typename Fn>
void ForChunks(ChunkPool& pool, int64_t blocks, const Fn& fn) {
  pool.Run(Chunks(blocks), [&](int c) {
    const int64_t begin = c * kBlocksPerChunk;
    fn(begin, std::min(blocks, begin + kBlocksPerChunk));
  });
}

}  // namespace

bool IsFiniteInF32(absl::Span<const float> values, ChunkPool* pool) {
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t blocks = Blocks(n);
  SquareSums sums;
  if (pool == nullptr || pool->helpers() == 0 || Chunks(blocks) < 2) {
    sums.Add(values.data(), values.size());
    return sums.Finite();
  }
  std::vector<SquareSums::Lanes> runs(static_cast<size_t>(blocks));
  ForChunks(*pool, blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kBlockFloats;
      const int64_t end = std::min(n, begin + kBlockFloats);
      runs[static_cast<size_t>(b)] =
          SquareSums::RunLanes(values.data() + begin, static_cast<size_t>(end - begin));
    }
  });
  for (const SquareSums::Lanes& lanes : runs) sums.AddLanes(lanes);
  return sums.Finite();
}

bool IsFiniteState(absl::Span<const float> state, int64_t num_params) {
  CHECK_GT(num_params, 0);
  CHECK_EQ(state.size() % static_cast<size_t>(num_params), 0u);
  for (size_t at = 0; at < state.size(); at += static_cast<size_t>(num_params)) {
    if (!IsFiniteInF32(state.subspan(at, static_cast<size_t>(num_params)))) return false;
  }
  return true;
}

ShardStore::ShardStore(absl::Span<const float> params, const OptimizerConfig& config,
                       ChunkPool* pool, std::vector<TensorSegment> segments)
    : ShardStore(InitialState(config, params), 0, config, pool, std::move(segments)) {}

ShardStore::ShardStore(std::vector<float> state, int64_t updates, const OptimizerConfig& config,
                       ChunkPool* pool, std::vector<TensorSegment> segments,
                       std::vector<int64_t> segment_updates)
    : config_(config),
      pool_(pool),
      num_slots_(NumSlots(config)),
      size_(static_cast<int64_t>(state.size()) / (1 + num_slots_)),
      state_(std::make_shared<PinnedFloats>(std::move(state))),
      next_state_(std::make_shared<PinnedFloats>(state_->data())),
      updates_(updates),
      segments_(std::move(segments)),
      segment_updates_(std::move(segment_updates)) {
  CHECK(ValidateOptimizerConfig(config).ok());
  CHECK_GT(size_, 0);
  CHECK_EQ(state_->data().size(), StateFloats(config_, static_cast<uint64_t>(size_)));
  CHECK_GE(updates, 0);
  if (segments_.empty()) segments_.push_back({0, size_, -1, 0});
  CHECK_EQ(segments_.front().begin, 0);
  CHECK_EQ(segments_.back().end, size_);
  for (size_t i = 1; i < segments_.size(); ++i) CHECK_EQ(segments_[i].begin, segments_[i - 1].end);
  if (segment_updates_.empty()) segment_updates_.assign(segments_.size(), updates_);
  CHECK_EQ(segment_updates_.size(), segments_.size());
  for (int64_t u : segment_updates_) {
    CHECK(u >= 0 && u <= updates_) << u;
    if (u != updates_) uniform_ = false;
  }
  segment_plan_.resize(segments_.size());
}

absl::Span<const float> ShardStore::slot(int k) const {
  CHECK(k >= 0 && k < num_slots_) << k;
  return state().subspan(Index((k + 1) * size_), Index(size_));
}

absl::Status ShardStore::Apply(absl::Span<const float> grad, float grad_scale, float lr,
                               bool check_grad, const StepOptions* step) {
  CHECK_EQ(static_cast<int64_t>(grad.size()), size_);
  return Update(GradientAt<Gradient::kScaled>{grad.data(), nullptr, 0.0f, grad_scale}, lr,
                check_grad ? grad.data() : nullptr, step);
}

absl::Status ShardStore::ApplySum(absl::Span<const float> partial, absl::Span<const float> grad,
                                  float weight, float grad_scale, float lr,
                                  const StepOptions* step) {
  CHECK_EQ(static_cast<int64_t>(grad.size()), size_);
  if (partial.empty()) {
    return Update(GradientAt<Gradient::kFirstOfVersion>{grad.data(), nullptr, weight, grad_scale},
                  lr, nullptr, step);
  }
  CHECK_EQ(static_cast<int64_t>(partial.size()), size_);
  return Update(
      GradientAt<Gradient::kSumOfVersion>{grad.data(), partial.data(), weight, grad_scale}, lr,
      nullptr, step);
}

void ShardStore::PlanSegments(const StepOptions* step, float lr) {
  for (size_t i = 0; i < segments_.size(); ++i) {
    const TensorSegment& seg = segments_[i];
    if (step == nullptr) {
      segment_plan_[i] = PlanFor(config_, segment_updates_[i], lr);
    } else if (seg.tensor >= 0 && step->Absent(seg.tensor)) {
      segment_plan_[i] = SegmentPlan();  // kSkip
    } else {
      const auto g = static_cast<size_t>(seg.group);
      segment_plan_[i] = PlanFor(step->groups[g], segment_updates_[i], step->lrs[g]);
    }
  }
}

// One function of 80 lines, not several: the update, its blocks' sums of
// squares and the verdict on them are one pass over the shard (each block
// summed right after its update, from the cache), serial or on the pool;
// cut apart, the lambdas they share would become parameters of each.
template <typename G>
absl::Status ShardStore::Update(const G& grad, float lr, const float* check,
                                const StepOptions* step) {
  // The job's optimizer over the whole shard, the step count shared
  // (one plan), unless a step's settings or segments' own counts ask for
  // one segment at a time (UpdateSegments).
  const bool by_segment = step != nullptr || !uniform_;
  const SegmentPlan plan = by_segment ? SegmentPlan() : PlanFor(config_, updates_, lr);
  if (by_segment) PlanSegments(step, lr);
  // Replies may still carry the buffer the last update replaced (they
  // were sent from it, PinnedFloats): this update is then written into
  // another one, never under a message. With one worker ZeroMQ has
  // almost always sent them by now (the worker had them before it pushed
  // this gradient); with several, a large state's replies are often
  // still going out.
  if (next_state_->held()) {
    TakeUnheldBuffer();
    quiet_updates_ = 0;
  } else if (!spares_.empty() && ++quiet_updates_ >= kQuietUpdates) {
    spares_.clear();
  }
  const float* s = state_->data().data();
  float* next = next_state_->data().data();
  // The arrays this update writes, each checked on its own (by segment:
  // every array, a segment that does not change one copying it). The
  // parameters alone: the slots are state_'s already, or copied.
  const bool params_only = !by_segment && plan.kind == SegmentPlan::Kind::kPlainSgd;
  const bool copy_slots = params_only && next_slots_ != slots_version_;
  const int written = params_only ? 1 : 1 + num_slots_;
  const auto update_block = [&](int64_t begin, int64_t end) {
    if (by_segment) {
      UpdateSegments(grad, begin, end, s, next);
    } else {
      RunPlan(plan, begin, end, grad, size_, s, next);
    }
    for (int k = 1; copy_slots && k <= num_slots_; ++k) {
      std::copy(s + k * size_ + begin, s + k * size_ + end, next + k * size_ + begin);
    }
  };
  // What next_state_'s slots hold from here on, whatever the verdict.
  if (copy_slots) {
    next_slots_ = slots_version_;
  } else if (!params_only) {
    next_slots_ = kSlotsUnknown;
  }
  // The arrays summed: those written, then the checked gradient, read
  // again from the cache right after its block's update read it (the
  // blocks are IsFiniteInF32's runs, so its verdict is the same).
  const int summed = written + (check != nullptr ? 1 : 0);
  const auto array = [&](int k) { return k < written ? next + k * size_ : check; };
  const int64_t blocks = Blocks(size_);
  SquareSums sums[4];
  if (pool_ == nullptr || pool_->helpers() == 0 || Chunks(blocks) < 2) {
    for (int64_t begin = 0; begin < size_; begin += kBlockFloats) {
      const int64_t end = std::min(size_, begin + kBlockFloats);
      update_block(begin, end);
      for (int k = 0; k < summed; ++k) {
        sums[k].Add(array(k) + begin, static_cast<size_t>(end - begin));
      }
    }
  } else {
    // Each block's sums of squares, by block and array: the chunks are
    // updated on several threads, and the sums added in block order after,
    // as the loop above adds them.
    block_lanes_.resize(static_cast<size_t>(blocks * summed));
    ForChunks(*pool_, blocks, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t begin = b * kBlockFloats;
        const int64_t end = std::min(size_, begin + kBlockFloats);
        update_block(begin, end);
        for (int k = 0; k < summed; ++k) {
          block_lanes_[static_cast<size_t>(b * summed + k)] =
              SquareSums::RunLanes(array(k) + begin, static_cast<size_t>(end - begin));
        }
      }
    });
    for (int64_t b = 0; b < blocks; ++b) {
      for (int k = 0; k < summed; ++k) {
        sums[k].AddLanes(block_lanes_[static_cast<size_t>(b * summed + k)]);
      }
    }
  }
  if (check != nullptr && !sums[written].Finite()) {
    previous_ = state_;  // unchanged by this update
    return absl::InvalidArgumentError(
        "the gradient is not finite in f32 (a NaN or infinity, or a norm that overflows)");
  }
  for (int k = 0; k < written; ++k) {
    if (!sums[k].Finite()) {
      previous_ = state_;  // unchanged by this update
      return absl::FailedPreconditionError(
          "the update would make the shard non-finite in f32; not applied");
    }
  }
  state_.swap(next_state_);
  previous_ = next_state_;  // the state this update read, written by the next one
  next_slots_ = slots_version_;
  if (!params_only) ++slots_version_;
  ++updates_;
  uniform_ = true;
  for (size_t i = 0; i < segments_.size(); ++i) {
    if (!by_segment || segment_plan_[i].kind != SegmentPlan::Kind::kSkip) ++segment_updates_[i];
    if (segment_updates_[i] != updates_) uniform_ = false;
  }
  return absl::OkStatus();
}

void ShardStore::TakeUnheldBuffer() {
  spares_.push_back({std::move(next_state_), next_slots_});
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (it->buffer->held()) continue;
    next_state_ = std::move(it->buffer);
    next_slots_ = it->slots;
    spares_.erase(it);
    return;
  }
  // Every one held: the oldest is let go (freed with its last reply).
  if (spares_.size() > kMaxSpares) spares_.erase(spares_.begin());
  ++buffers_made_;
  next_state_ = std::make_shared<PinnedFloats>(state_->data());
  next_slots_ = slots_version_;
}

template <typename G>
void ShardStore::UpdateSegments(const G& grad, int64_t begin, int64_t end, const float* s,
                                float* next) const {
  // The first segment that ends after `begin`.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), begin,
                             [](int64_t at, const TensorSegment& seg) { return at < seg.end; });
  const int64_t n = size_;
  for (; it != segments_.end() && it->begin < end; ++it) {
    const int64_t b = std::max(begin, it->begin);
    const int64_t e = std::min(end, it->end);
    const SegmentPlan& plan = segment_plan_[static_cast<size_t>(it - segments_.begin())];
    // The arrays this segment's kernel leaves alone keep their values.
    const int wrote = RunPlan(plan, b, e, grad, n, s, next);
    for (int k = wrote; k < 1 + num_slots_; ++k) {
      std::copy(s + k * n + b, s + k * n + e, next + k * n + b);
    }
  }
}

}  // namespace pstrain

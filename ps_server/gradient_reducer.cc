#include "ps_server/gradient_reducer.h"

#include <algorithm>

#include "Eigen/Core"
#include "glog/logging.h"
#include "ps_server/relative_weights.h"

namespace pstrain {
namespace {

Eigen::Map<const Eigen::VectorXf> View(absl::Span<const float> x) {
  return {x.data(), static_cast<Eigen::Index>(x.size())};
}

}  // namespace

GradientReducer::GradientReducer(int num_workers, int64_t size)
    : size_(size),
      active_(static_cast<size_t>(num_workers), true),
      pushed_(static_cast<size_t>(num_workers), -1),
      in_(static_cast<size_t>(num_workers), false),
      examples_(static_cast<size_t>(num_workers), 0),
      held_(static_cast<size_t>(num_workers)),
      is_held_(static_cast<size_t>(num_workers), false),
      absent_of_(static_cast<size_t>(num_workers)),
      waiting_(static_cast<size_t>(num_workers)) {
  CHECK_GT(num_workers, 0);
  CHECK_GT(size, 0);
}

void GradientReducer::StartRound(int64_t version, uint32_t round) {
  // Answers still waiting for an earlier round were overtaken: the job is
  // past it, so they are stale (TakeOvertaken).
  for (std::optional<Parked>& w : waiting_) {
    if (!w.has_value()) continue;
    overtaken_.push_back(std::move(*w));
    w.reset();
  }
  version_ = version;
  round_ = round;
  complete_ = false;
  std::fill(in_.begin(), in_.end(), false);
  std::fill(is_held_.begin(), is_held_.end(), false);
  arrival_sum_used_ = false;
  average_ = nullptr;
  absent_.clear();
}

GradientReducer::Added GradientReducer::Add(int rank, int64_t version, uint32_t round,
                                            absl::Span<const float> grad, int num_examples,
                                            absl::Span<const int32_t> absent, Parked reply) {
  const auto r = static_cast<size_t>(rank);
  CHECK_LT(r, in_.size());
  CHECK_EQ(static_cast<int64_t>(grad.size()), size_);
  if (version < version_ || (version == version_ && round < round_)) return Added::kStale;
  // A worker's rounds of a step go 0, 1, 2, ..., each sent once it has the
  // answers of the one before from every ps (a worker whose step is voided
  // computes it again from round 0). So a version's first round here is 0,
  // and its next round comes once this one is complete: anything else is
  // out of order, and stale, so that no worker can overtake the round the
  // others wait in (voiding their averages) with a round of its choosing.
  if (version == version_ ? round > round_ + 1 || (round == round_ + 1 && !complete_)
                          : round != 0) {
    return Added::kStale;
  }
  if (version > version_ || round > round_) StartRound(version, round);
  waiting_[r] = std::move(reply);
  if (complete_) return Added::kComplete;  // a repeat: the average is made
  if (in_[r] && !is_held_[r]) {
    // A repeat of a contribution summed on arrival: the first stays.
    return CheckComplete() ? Added::kComplete : Added::kWaiting;
  }
  const float weight = static_cast<float>(num_examples);
  if (num_examples == 0) {
    // Nothing to add (and 0 x an inf the buffer may hold is a NaN); a
    // repeat of 0 examples leaves nothing of an earlier one held.
    is_held_[r] = false;
  } else if (!in_[r] &&
             held_floats_ - static_cast<int64_t>(held_[r].capacity()) + size_ > kMaxHeldFloats) {
    if (!arrival_sum_used_) arrival_sum_.assign(static_cast<size_t>(size_), 0.0f);
    Eigen::Map<Eigen::VectorXf>(arrival_sum_.data(), size_) += weight * View(grad);
    arrival_sum_used_ = true;
    LOG_EVERY_N(WARNING, 100) << "REDUCE: more gradients than are kept for a sum in rank "
                                 "order; summed as they arrived (repeats only to rounding)";
  } else {
    std::vector<float>& kept = held_[r];
    held_floats_ -= static_cast<int64_t>(kept.capacity());
    kept.resize(static_cast<size_t>(size_));
    held_floats_ += static_cast<int64_t>(kept.capacity());
    std::copy(grad.begin(), grad.end(), kept.begin());  // weighted in Finish
    is_held_[r] = true;
  }
  in_[r] = true;
  examples_[r] = num_examples;
  absent_of_[r].assign(absent.begin(), absent.end());
  if (!CheckComplete()) return Added::kWaiting;
  Finish();
  return Added::kComplete;
}

bool GradientReducer::CheckComplete() {
  bool any = false;
  for (size_t r = 0; r < in_.size(); ++r) {
    if (active_[r] && !in_[r] && pushed_[r] < version_) return false;
    any = any || in_[r];
  }
  return any;
}

void GradientReducer::Finish() {
  // Weighed in rank order (RelativeWeights); beside a sum formed on
  // arrival, with its absolute weights.
  RelativeWeights weights;
  if (arrival_sum_used_) weights.Absolute();
  std::vector<float> sum;
  int64_t weight = 0;
  for (size_t r = 0; r < in_.size(); ++r) {
    if (!in_[r]) continue;
    weight += examples_[r];
    if (!is_held_[r]) continue;
    const float relative = weights.Of(static_cast<float>(examples_[r]));
    if (sum.empty()) {
      // + 0: a -0 becomes +0, as a sum from zero gives.
      sum.resize(static_cast<size_t>(size_));
      Eigen::Map<Eigen::VectorXf>(sum.data(), size_) =
          ((relative * View(held_[r])).array() + 0.0f).matrix();
    } else {
      Eigen::Map<Eigen::VectorXf>(sum.data(), size_) += relative * View(held_[r]);
    }
  }
  if (sum.empty()) sum.assign(static_cast<size_t>(size_), 0.0f);
  if (arrival_sum_used_) Eigen::Map<Eigen::VectorXf>(sum.data(), size_) += View(arrival_sum_);
  Eigen::Map<Eigen::VectorXf>(sum.data(), size_) *= weights.Scale(weight);
  average_ = std::make_shared<const std::vector<float>>(std::move(sum));
  // Absent from the average: absent from every contribution of examples
  // (one of none had no gradient, and says nothing of the tensors), or of
  // every contribution where none has examples.
  const bool counted = weight > 0;
  absent_.clear();
  bool first = true;
  for (size_t r = 0; r < in_.size(); ++r) {
    if (!in_[r] || (counted && examples_[r] == 0)) continue;
    if (first) {
      absent_ = absent_of_[r];
      first = false;
      continue;
    }
    std::vector<int32_t> both;
    std::set_intersection(absent_.begin(), absent_.end(), absent_of_[r].begin(),
                          absent_of_[r].end(), std::back_inserter(both));
    absent_.swap(both);
  }
  complete_ = true;
}

bool GradientReducer::SetActive(int rank, bool active) {
  CHECK_LT(static_cast<size_t>(rank), active_.size());
  active_[static_cast<size_t>(rank)] = active;
  if (complete_ || version_ < 0 || active || !CheckComplete()) return false;
  Finish();
  return true;
}

bool GradientReducer::Pushed(int rank, int64_t version) {
  CHECK_LT(static_cast<size_t>(rank), pushed_.size());
  const auto r = static_cast<size_t>(rank);
  pushed_[r] = std::max(pushed_[r], version);
  if (complete_ || version_ < 0 || version != version_ || in_[r] || !CheckComplete()) return false;
  Finish();
  return true;
}

std::vector<Parked> GradientReducer::TakeAnswers() {
  std::vector<Parked> answers;
  if (!complete_) return answers;
  for (std::optional<Parked>& w : waiting_) {
    if (!w.has_value()) continue;
    answers.push_back(std::move(*w));
    w.reset();
  }
  return answers;
}

std::vector<Parked> GradientReducer::TakeOvertaken() {
  std::vector<Parked> out;
  out.swap(overtaken_);
  return out;
}

void GradientReducer::Forget(int rank) {
  CHECK_LT(static_cast<size_t>(rank), waiting_.size());
  waiting_[static_cast<size_t>(rank)].reset();
}

std::vector<Parked> GradientReducer::TakeAll() {
  std::vector<Parked> all = TakeAnswers();
  StartRound(-1, 0);  // what waits is overtaken
  std::fill(pushed_.begin(), pushed_.end(), -1);  // versions may go back (a rollback)
  for (Parked& p : TakeOvertaken()) all.push_back(std::move(p));
  return all;
}

}  // namespace pstrain

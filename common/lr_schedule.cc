#include "common/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr int64_t kMaxUpdates = int64_t{1} << 40;
constexpr double kPi = 3.14159265358979323846;

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("learning-rate schedule: ", field, " ", what));
}

}  // namespace

absl::StatusOr<LrSchedule::Kind> ParseLrScheduleKind(const std::string& name) {
  if (name.empty() || name == "constant") return LrSchedule::Kind::kConstant;
  if (name == "step") return LrSchedule::Kind::kStep;
  if (name == "cosine") return LrSchedule::Kind::kCosine;
  return absl::InvalidArgumentError(
      absl::StrCat("--lr_schedule=", name, ": expected constant, step or cosine"));
}

absl::StatusOr<LrSchedule> LrSchedule::FromJob(const proto::JobConfig& job) {
  LrSchedule s;
  ASSIGN_OR_RETURN(s.kind_, ParseLrScheduleKind(job.lr_schedule()));
  s.lr_ = job.learning_rate();
  if (!(s.lr_ > 0) || !std::isfinite(s.lr_)) return Bad("learning_rate", "must be > 0");
  s.warmup_ = job.warmup_steps();
  if (s.warmup_ < 0 || s.warmup_ > kMaxUpdates) return Bad("warmup_steps", "out of range");
  if (s.kind_ == Kind::kStep) {
    s.step_size_ = job.lr_step_size();
    s.gamma_ = job.lr_gamma();
    if (s.step_size_ < 1 || s.step_size_ > kMaxUpdates) {
      return Bad("lr_step_size", "must be >= 1 for the step schedule");
    }
    if (!(s.gamma_ > 0) || !std::isfinite(s.gamma_)) return Bad("lr_gamma", "must be > 0");
  }
  if (s.kind_ == Kind::kCosine) {
    s.min_lr_ = job.min_lr();
    s.total_ = job.schedule_updates();
    if (!(s.min_lr_ >= 0) || s.min_lr_ > s.lr_) return Bad("min_lr", "must be in [0, lr]");
    if (s.total_ < 1 || s.total_ > kMaxUpdates) {
      return Bad("schedule_updates", "must be >= 1 for the cosine schedule");
    }
  }
  return s;
}

double LrSchedule::At(int64_t t) const {
  t = std::max<int64_t>(t, 0);
  if (t < warmup_) return lr_ * static_cast<double>(t + 1) / static_cast<double>(warmup_);
  const int64_t u = t - warmup_;
  switch (kind_) {
    case Kind::kConstant:
      return lr_;
    case Kind::kStep:
      return lr_ * std::pow(gamma_, static_cast<double>(u / step_size_));
    case Kind::kCosine: {
      const int64_t span = std::max<int64_t>(1, total_ - warmup_);
      const double x = static_cast<double>(std::min(u, span)) / static_cast<double>(span);
      return min_lr_ + (lr_ - min_lr_) * (1 + std::cos(kPi * x)) / 2;
    }
  }
  return lr_;
}

std::string LrSchedule::Describe() const {
  std::string s;
  switch (kind_) {
    case Kind::kConstant:
      s = "constant";
      break;
    case Kind::kStep:
      s = absl::StrCat("step (x", gamma_, " every ", step_size_, " updates)");
      break;
    case Kind::kCosine:
      s = absl::StrCat("cosine (to ", min_lr_, " at update ", total_, ")");
      break;
  }
  if (warmup_ > 0) absl::StrAppend(&s, ", warm-up ", warmup_, " updates");
  return s;
}

}  // namespace pstrain

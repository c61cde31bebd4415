#include "common/param_groups.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pstrain {

std::vector<TensorSegment> SegmentsOf(const proto::JobConfig& job, const ShardRange& range) {
  std::vector<TensorSegment> segments;
  int64_t at = 0;  // the tensor's first float in the flat vector
  for (int t = 0; t < job.layout_size() && at < range.end; ++t) {
    const proto::TensorLayout& tensor = job.layout(t);
    const int64_t begin = std::max(at, range.begin);
    const int64_t end = std::min(at + tensor.size(), range.end);
    if (begin < end) {
      segments.push_back({begin - range.begin, end - range.begin, t, tensor.group()});
    }
    at += tensor.size();
  }
  // No layout (or one short of the range, which INIT refuses): the rest is
  // one segment of the first group.
  const int64_t covered = segments.empty() ? 0 : segments.back().end;
  if (covered < range.size()) segments.push_back({covered, range.size(), -1, 0});
  return segments;
}

int NumGroups(const proto::JobConfig& job) {
  int groups = 1;
  for (const proto::TensorLayout& t : job.layout()) groups = std::max(groups, t.group() + 1);
  return groups;
}

absl::Status ValidateLayoutGroups(const proto::JobConfig& job) {
  for (const proto::TensorLayout& t : job.layout()) {
    if (t.group() < 0 || t.group() >= kMaxGroups) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name(), ": group ", t.group(),
                                                     " is outside [0, ", kMaxGroups, ")"));
    }
    if (t.size() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name(), ": size ", t.size(), " is not positive"));
    }
  }
  return absl::OkStatus();
}

bool StepOptions::Absent(int tensor) const {
  return std::binary_search(absent.begin(), absent.end(), tensor);
}

std::string SettingsDifference(const StepOptions& a, const StepOptions& b) {
  for (size_t g = 0; g < a.groups.size() && g < b.groups.size(); ++g) {
    const auto differ = [&](const char* name, double x, double y) {
      return x == y ? std::string()
                    : absl::StrCat("group ", g, "'s ", name, " ", x, " against ", y);
    };
    const OptimizerConfig& x = a.groups[g];
    const OptimizerConfig& y = b.groups[g];
    for (std::string d :
         {differ("lr", g < a.lrs.size() ? a.lrs[g] : 0, g < b.lrs.size() ? b.lrs[g] : 0),
          differ("momentum", x.momentum, y.momentum),
          differ("nesterov", x.nesterov ? 1 : 0, y.nesterov ? 1 : 0),
          differ("weight_decay", x.weight_decay, y.weight_decay), differ("beta1", x.beta1, y.beta1),
          differ("beta2", x.beta2, y.beta2), differ("eps", x.eps, y.eps),
          differ("lr_decay", x.lr_decay, y.lr_decay),
          differ("initial_accumulator_value", x.initial_accumulator, y.initial_accumulator)}) {
      if (!d.empty()) return d;
    }
  }
  return "";
}

absl::StatusOr<StepOptions> StepOptionsFrom(const proto::StepSettings& settings,
                                            const proto::JobConfig& job,
                                            const OptimizerConfig& job_optimizer) {
  const int groups = NumGroups(job);
  if (settings.groups_size() != groups) {
    return absl::InvalidArgumentError(absl::StrCat("step settings for ", settings.groups_size(),
                                                   " parameter groups; the job has ", groups));
  }
  StepOptions options;
  for (int g = 0; g < groups; ++g) {
    const proto::GroupSettings& s = settings.groups(g);
    if (!(s.lr() >= 0) || !std::isfinite(s.lr())) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter group ", g, ": lr ", s.lr(), " is not a finite value >= 0"));
    }
    OptimizerConfig c = job_optimizer;
    c.weight_decay = s.weight_decay();
    c.momentum = s.momentum();
    c.nesterov = s.nesterov();
    c.beta1 = s.beta1();
    c.beta2 = s.beta2();
    c.eps = s.eps();
    c.lr_decay = s.lr_decay();
    if (absl::Status v = ValidateOptimizerConfig(c); !v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("parameter group ", g, ": ", v.message()));
    }
    options.groups.push_back(c);
    options.lrs.push_back(s.lr());
  }
  absl::StatusOr<std::vector<int32_t>> absent = AbsentTensors(settings, job);
  if (!absent.ok()) return absent.status();
  options.absent = *std::move(absent);
  return options;
}

absl::StatusOr<std::vector<int32_t>> AbsentTensors(const proto::StepSettings& settings,
                                                   const proto::JobConfig& job) {
  std::vector<int32_t> absent;
  int previous = -1;
  for (int32_t t : settings.absent()) {
    if (t <= previous || t >= job.layout_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step settings: absent tensor ", t, " is out of order or not in the layout"));
    }
    previous = t;
    absent.push_back(t);
  }
  return absent;
}

}  // namespace pstrain

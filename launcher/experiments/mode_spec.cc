#include "launcher/experiments/mode_spec.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr int kMaxBound = 1000000;

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "mode \"", text, "\": ", why,
      " (expected sync, sync+backup:B, async, ssp:S, with +slr for async and ssp)"));
}

// "2" -> 2; false for anything but a number in [0, kMaxBound].
bool ParseCount(absl::string_view text, int* out) {
  return absl::SimpleAtoi(text, out) && *out >= 0 && *out <= kMaxBound;
}

// Applies one "+..." modifier to `spec`.
absl::Status ApplyModifier(absl::string_view text, absl::string_view modifier, ModeSpec* spec) {
  if (modifier == "slr") {
    if (spec->mode == "sync") return Bad(text, "+slr applies to async and ssp only");
    spec->staleness_lr = true;
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&modifier, "backup:")) {
    if (spec->mode != "sync") return Bad(text, "+backup applies to sync only");
    if (!ParseCount(modifier, &spec->backup_workers) || spec->backup_workers == 0) {
      return Bad(text, "backup:B needs a count B >= 1");
    }
    return absl::OkStatus();
  }
  return Bad(text, absl::StrCat("unknown modifier \"+", modifier, "\""));
}

}  // namespace

std::string ModeSpec::DirName() const {
  return absl::StrReplaceAll(label, {{":", "-"}, {"+", "_"}});
}

void ModeSpec::ApplyTo(TrainOptions* options) const {
  absl::StatusOr<proto::UpdateMode> parsed = ParseUpdateMode(mode);
  CHECK(parsed.ok()) << "ModeSpec not made by ParseModeSpec: " << parsed.status();
  options->mode = *parsed;
  options->staleness = staleness;
  options->backup_workers = backup_workers;
  options->staleness_lr = staleness_lr;
}

std::string ModeSpec::Describe() const {
  std::string out;
  if (mode == "sync" && backup_workers == 0) {
    out = "each version averages the gradients of all workers (one update per step)";
  } else if (mode == "sync") {
    out = absl::StrCat("each version averages the first N-", backup_workers,
                       " gradients to arrive; the late ones are dropped");
  } else if (mode == "async") {
    out = "every gradient is applied on arrival; nobody waits";
  } else if (staleness == 0) {
    out = "no worker starts step t before every worker finished step t-1, but gradients are "
          "applied one by one as they arrive (not averaged)";
  } else {
    out = absl::StrCat("gradients applied on arrival; a worker waits when it is more than ",
                       staleness, " steps ahead of the slowest");
  }
  if (staleness_lr) out += "; the step is divided by the gradient's staleness";
  return absl::StrCat(label, ": ", out);
}

absl::StatusOr<ModeSpec> ParseModeSpec(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '+');
  ModeSpec spec;
  absl::string_view base = parts[0];
  if (base == "sync" || base == "async") {
    spec.mode = std::string(base);
  } else if (absl::ConsumePrefix(&base, "ssp:")) {
    spec.mode = "ssp";
    if (!ParseCount(base, &spec.staleness)) return Bad(text, "ssp:S needs a bound S >= 0");
  } else if (base == "ssp") {
    return Bad(text, "ssp needs its bound, as ssp:S");
  } else {
    return Bad(text, "unknown mode");
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    if (absl::Status s = ApplyModifier(text, parts[i], &spec); !s.ok()) return s;
  }
  spec.label = spec.mode == "ssp" ? absl::StrCat("ssp:", spec.staleness) : spec.mode;
  if (spec.backup_workers > 0) absl::StrAppend(&spec.label, "+backup:", spec.backup_workers);
  if (spec.staleness_lr) absl::StrAppend(&spec.label, "+slr");
  return spec;
}

absl::StatusOr<std::vector<ModeSpec>> ParseModeList(absl::string_view text) {
  std::vector<ModeSpec> modes;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    absl::StatusOr<ModeSpec> spec = ParseModeSpec(absl::StripAsciiWhitespace(item));
    if (!spec.ok()) return spec.status();
    if (!seen.insert(spec->label).second) {
      return absl::InvalidArgumentError(absl::StrCat("--modes: ", spec->label, " given twice"));
    }
    modes.push_back(*std::move(spec));
  }
  if (modes.empty()) return absl::InvalidArgumentError("--modes: no mode given (e.g. sync,async,ssp:2)");
  return modes;
}

}  // namespace pstrain

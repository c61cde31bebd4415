#pragma once

// Named sets of training flags (--preset=NAME): a model, its optimizer and
// schedule, the batch and the epochs that go together, so that a user gets
// a known result with one flag. Every flag given on the command line wins
// over the preset's value for it.
//
//   pstrain launch --cluster_spec=cluster_specs/local_1ps_2w.json --preset=mnist_99
//
// The preset is expanded into the flags before anything reads them, so a
// run records the values it used (launch.json), not the preset's name.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace pstrain {

struct Preset {
  std::string name;
  std::string what;  // one line: what it is for and what it reaches
  std::vector<std::pair<std::string, std::string>> flags;  // name, value
};

// Every preset, in the order `--preset=help` lists them.
const std::vector<Preset>& Presets();

// Sets the flags of the preset that --preset names (nothing when empty)
// that `given` (the flags on the command line) does not name.
// InvalidArgument for an unknown preset, listing the known ones.
absl::Status ApplyPresetFlag(const std::set<std::string>& given);

}  // namespace pstrain

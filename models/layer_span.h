#pragma once

// A layer's timed pass, as the timeline shows it: the one type of a model's
// that the worker runtime and its metrics see (models/model.h makes them).

#include <cstdint>
#include <string>

namespace pstrain::models {

// One layer's forward or backward pass in training, timed on the Unix clock
// (the timeline's, common/trace_writer.h).
struct LayerSpan {
  const std::string* layer = nullptr;  // the layer's name ("conv1"); owned by whoever timed it
  bool backward = false;
  bool ahead = false;  // a forward of ForwardAhead: run while the step before waited
  int64_t start_unix_us = 0;
  int64_t duration_us = 0;
};

}  // namespace pstrain::models

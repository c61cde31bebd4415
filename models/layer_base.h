#pragma once

// The state every backend's layers share: a name, the input and output
// shapes of one example, and the largest batch the layer's scratch holds.
// models/cpu/cpu_layer.h and models/cuda/cuda_layer.h derive from it.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "models/layer.h"

namespace pstrain::models {

class LayerBase : public Layer {
 public:
  const std::string& name() const override { return name_; }
  Shape input_shape() const override { return input_; }
  Shape output_shape() const override { return output_; }
  std::vector<ParamSpec> params() const override { return {}; }
  int max_batch() const { return max_batch_; }

 protected:
  // REQUIRES: max_batch >= 1; input and output have positive sizes.
  LayerBase(std::string name, Shape input, Shape output, int max_batch);

  // InvalidArgument (naming the layer) unless 0 < ctx.n <= max_batch().
  absl::Status CheckBatch(const BatchContext& ctx) const;

 private:
  std::string name_;
  Shape input_;
  Shape output_;
  int max_batch_;
};

}  // namespace pstrain::models

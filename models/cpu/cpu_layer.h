#pragma once

// Plumbing shared by the CPU layers: the name, the shapes, the largest batch
// and the check every Forward/Backward starts with. Also the Eigen views the
// layers use over flat float buffers.
//
// Every CPU layer sizes its scratch for `max_batch` examples at construction
// and never allocates inside Forward/Backward. A layer is not thread-safe;
// one thread drives it.

#include <cstdint>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "models/layer.h"

namespace pstrain::models::cpu {

// Column-major views over flat buffers. A row-major [rows, cols] tensor is a
// column-major [cols, rows] matrix: the layers use that to avoid copies.
using MatrixMap = Eigen::Map<Eigen::MatrixXf>;
using ConstMatrixMap = Eigen::Map<const Eigen::MatrixXf>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;
using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// Sum of v[0, size) in an order fixed by the indices alone (16 interleaved
// partial sums, then added in order), so the result does not depend on v's
// alignment as Eigen's vectorised reductions do, yet still vectorises.
float DeterministicSum(const float* v, int64_t size);

class CpuLayer : public Layer {
 public:
  const std::string& name() const override { return name_; }
  Shape input_shape() const override { return input_; }
  Shape output_shape() const override { return output_; }
  std::vector<ParamSpec> params() const override { return {}; }
  int max_batch() const { return max_batch_; }

 protected:
  // REQUIRES: max_batch >= 1; input and output have positive sizes.
  CpuLayer(std::string name, Shape input, Shape output, int max_batch);

  // InvalidArgument (naming the layer) unless 0 < ctx.n <= max_batch().
  absl::Status CheckBatch(const BatchContext& ctx) const;

 private:
  std::string name_;
  Shape input_;
  Shape output_;
  int max_batch_;
};

}  // namespace pstrain::models::cpu

#pragma once

// What the CPU layers share beyond models::LayerBase (models/layer_base.h,
// which holds every backend's name, shapes, largest batch and the batch
// check each Forward/Backward starts with): the Eigen views they use over
// flat float buffers, and a sum whose order does not depend on alignment.
//
// Every CPU layer sizes its scratch for `max_batch` examples at construction
// and never allocates inside Forward/Backward. A layer is not thread-safe;
// one thread drives it.

#include <cstdint>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "models/layer_base.h"

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

// The base of the CPU layers (host pointers throughout).
class CpuLayer : public LayerBase {
 protected:
  using LayerBase::LayerBase;
};

}  // namespace pstrain::models::cpu

#pragma once

// The layer contract every backend implements (models/cpu/, models/cuda/).
//
// Layout: activations are NCHW float32, one example after another; a vector
// activation is C x 1 x 1. Pointers passed to a layer live in the backend's
// memory (host for cpu, device for cuda). A layer owns its scratch space
// (im2col columns, pooling argmax, dropout masks), sized once for
// `max_batch` at construction: no allocation inside Forward/Backward.
//
// Parameters: a layer reads its parameters from, and writes its parameter
// gradients to, its own slice of the model's flat buffers, in the order of
// params() (e.g. weight then bias).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pstrain::models {

// Shape of one example's activation.
struct Shape {
  int c = 1;
  int h = 1;
  int w = 1;
  int64_t size() const { return int64_t{c} * h * w; }
  friend bool operator==(const Shape& a, const Shape& b) {
    return a.c == b.c && a.h == b.h && a.w == b.w;
  }
};

// A named parameter tensor and where it sits in the flat buffer.
struct ParamSpec {
  std::string name;           // "conv1.weight"
  std::vector<int> dims;      // PyTorch order: conv [out, in, kh, kw]; linear [out, in]; bias [out]
  int64_t offset = 0;         // first float in the model's flat buffer
  int64_t size = 0;           // product of dims
  int fan_in = 1;             // for PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
};

// What a step tells every layer about the batch.
struct BatchContext {
  int n = 0;                              // examples in this batch (<= max_batch)
  bool training = false;                  // dropout is active only when training
  uint64_t seed = 0;                      // run seed, mixed into dropout keys
  // [n] per-example keys in the backend's memory: a dropout mask is a pure
  // function of (seed, layer index, key, element), so it does not depend on
  // how a global batch is split across workers or on the backend.
  const uint64_t* example_keys = nullptr;
};

class Layer {
 public:
  virtual ~Layer() = default;

  virtual const std::string& name() const = 0;
  virtual Shape input_shape() const = 0;
  virtual Shape output_shape() const = 0;
  // This layer's parameter tensors with offsets relative to its own slice
  // (empty for parameter-free layers).
  virtual std::vector<ParamSpec> params() const = 0;
  int64_t num_params() const;

  // y[n, output_shape] = f(x[n, input_shape]). `params` is this layer's
  // slice. May keep what Backward needs (masks, argmax) in its scratch.
  virtual absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                               float* y) = 0;

  // Given dy = dL/dy, writes dL/dparams into `dparams` (this layer's slice,
  // overwritten, not accumulated) and dL/dx into `dx` unless dx is null (the
  // first layer needs no input gradient). x and y are the tensors of the
  // preceding Forward with the same ctx.
  virtual absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                                const float* y, const float* dy, float* dx, float* dparams) = 0;
};

inline int64_t Layer::num_params() const {
  int64_t total = 0;
  for (const ParamSpec& p : params()) total += p.size;
  return total;
}

}  // namespace pstrain::models

#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/cuda/cuda_status.h"
#include "models/cuda/launch.h"
#include "models/cuda/max_pool2d.h"

namespace pstrain::models::cuda {
namespace {

Shape PoolOutput(Shape in, int kernel) { return {in.c, in.h / kernel, in.w / kernel}; }

// Geometry of one pooling plane, passed to the kernels by value.
struct PoolGeometry {
  int h, w;    // input plane
  int k;       // kernel = stride
  int oh, ow;  // output plane
};

// One thread per output element (plane, p, q). The window starts as its
// top-left element; the other offsets (u, v) are folded in row-major order
// with a strict `>` (the first of equal maxima stays) or isnan (a NaN
// wins), exactly as models/cpu/max_pool2d.cc's PoolPlane.
template <typename Index>
__global__ void MaxPoolForwardKernel(const float* x, Index outputs, PoolGeometry g, float* y,
                                     int32_t* argmax) {
  const Index out_plane = static_cast<Index>(g.oh) * g.ow, in_plane = static_cast<Index>(g.h) * g.w;
  for (Index o = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs;
       o += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index plane = o / out_plane;
    const int r = static_cast<int>(o - plane * out_plane);
    const int p = r / g.ow, q = r % g.ow;
    const float* src = x + plane * in_plane;
    int32_t best_at = p * g.k * g.w + q * g.k;
    float best = src[best_at];
    for (int u = 0; u < g.k; ++u) {
      for (int v = (u == 0 ? 1 : 0); v < g.k; ++v) {
        const int32_t at = (p * g.k + u) * g.w + q * g.k + v;
        const float value = src[at];
        if (value > best || isnan(value)) {
          best = value;
          best_at = at;
        }
      }
    }
    y[o] = best;
    argmax[o] = best_at;
  }
}

// One thread per input element (plane, s, t): it receives dy of its window
// when it is that window's argmax, else 0. Windows do not overlap, so every
// dx element is written exactly once and no zero-fill pass is needed.
template <typename Index>
__global__ void MaxPoolBackwardKernel(const float* dy, const int32_t* argmax, Index inputs,
                                      PoolGeometry g, float* dx) {
  const Index out_plane = static_cast<Index>(g.oh) * g.ow, in_plane = static_cast<Index>(g.h) * g.w;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < inputs;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index plane = i / in_plane;
    const int at = static_cast<int>(i - plane * in_plane);
    const int p = (at / g.w) / g.k, q = (at % g.w) / g.k;
    float grad = 0.0f;
    if (p < g.oh && q < g.ow) {
      const Index o = plane * out_plane + p * g.ow + q;
      if (argmax[o] == at) grad = dy[o];
    }
    dx[i] = grad;
  }
}

// Both kernels index in 32 bits when the count allows (a 64-bit division
// per element made the backward kernel ~0.2 ms of a batch-4096 step on an
// H200), else in 64. Below 2^31, so that an index plus the grid's stride
// (at most 2^24) cannot wrap.
bool Fits32Bits(int64_t count) { return count < (int64_t{1} << 31); }

}  // namespace

absl::StatusOr<std::unique_ptr<MaxPool2d>> MaxPool2d::Create(CudaContext& context, std::string name,
                                                             Shape input, int kernel,
                                                             int max_batch) {
  std::unique_ptr<MaxPool2d> layer(
      new MaxPool2d(context, std::move(name), input, kernel, max_batch));
  RETURN_IF_ERROR(context.Activate());
  ASSIGN_OR_RETURN(layer->argmax_,
                   DeviceArray<int32_t>::Create(layer->name() + ".argmax",
                                                layer->output_shape().size() * max_batch));
  return layer;
}

MaxPool2d::MaxPool2d(CudaContext& context, std::string name, Shape input, int kernel, int max_batch)
    : CudaLayer(context, std::move(name), input, PoolOutput(input, kernel), max_batch),
      kernel_(kernel) {
  CHECK(kernel >= 1 && kernel <= input.h && kernel <= input.w)
      << this->name() << ": pool " << kernel << " on " << input.h << "x" << input.w;
}

absl::Status MaxPool2d::Forward(const BatchContext& ctx, const float* params, const float* x,
                                float* y) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  const Shape in = input_shape(), out = output_shape();
  const PoolGeometry g{in.h, in.w, kernel_, out.h, out.w};
  const int64_t outputs = ctx.n * out.size();
  const unsigned int blocks = BlocksFor(outputs);
  return LaunchKernel("MaxPoolForwardKernel", [&] {
    // The kernel indexes x too, which has more elements than y.
    if (Fits32Bits(std::max(outputs, ctx.n * in.size()))) {
      MaxPoolForwardKernel<<<blocks, kThreadsPerBlock, 0, stream()>>>(
          x, static_cast<uint32_t>(outputs), g, y, argmax_.data());
    } else {
      MaxPoolForwardKernel<<<blocks, kThreadsPerBlock, 0, stream()>>>(x, outputs, g, y,
                                                                      argmax_.data());
    }
  });
}

absl::Status MaxPool2d::Backward(const BatchContext& ctx, const float* params, const float* x,
                                 const float* y, const float* dy, float* dx, float* dparams) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  if (dx == nullptr) return absl::OkStatus();
  const Shape in = input_shape(), out = output_shape();
  const PoolGeometry g{in.h, in.w, kernel_, out.h, out.w};
  const int64_t inputs = ctx.n * in.size();
  const unsigned int blocks = BlocksFor(inputs);
  return LaunchKernel("MaxPoolBackwardKernel", [&] {
    if (Fits32Bits(inputs)) {
      MaxPoolBackwardKernel<<<blocks, kThreadsPerBlock, 0, stream()>>>(
          dy, argmax_.data(), static_cast<uint32_t>(inputs), g, dx);
    } else {
      MaxPoolBackwardKernel<<<blocks, kThreadsPerBlock, 0, stream()>>>(dy, argmax_.data(), inputs,
                                                                       g, dx);
    }
  });
}

}  // namespace pstrain::models::cuda

#pragma once

// The inner loops of Conv2d (models/cpu/conv2d.h): products of small
// register blocks (a few output channels or taps by a few vectors of
// simd::kLanes outputs) that read the input in place. There is no im2col
// matrix and no transpose: the forward pass writes NCHW directly.
//
// Terms, for an input [C, H, W], a k x k kernel and an output [O, Ho, Wo]
// with Wo >= kLanes (KernelsApply; Conv2d takes scalar loops otherwise):
//  - tap t = (c, u, v), t < K = C*k*k, in the weight's order [O, C, k, k];
//    its offset in an input image is c*H*W + u*W + v.
//  - each output row is covered by ceil(Wo / kLanes) vectors of kLanes
//    outputs, starting at columns 0, kLanes, 2*kLanes, ... and, when kLanes
//    does not divide Wo, a last one at Wo - kLanes that overlaps the one
//    before: no vector reaches past its row, so nothing outside a tensor is
//    read or written. Vector r < R covers row p of its index. Overlapped
//    lanes are computed twice (the forward pass stores the same value
//    twice) and masked out of every sum.
//  - the columns layout of a tap gradient is [K, R*kLanes].
//
// Every sum runs in an order fixed by the indices alone (taps, vectors,
// lanes, images), so results do not depend on buffer alignment.

#include <cstdint>
#include <vector>

#include "models/layer.h"

namespace pstrain::models::cpu {

struct ConvGeometry {
  // REQUIRES: 1 <= kernel_size <= min(input.h, input.w), out_channels >= 1.
  ConvGeometry(Shape input, int out_channels, int kernel_size);

  // Whether the kernels take this geometry: output rows of kLanes or more.
  bool KernelsApply() const;

  Shape in, out;
  int kernel;
  int taps;                             // K
  int vectors;                          // R
  std::vector<int32_t> tap_offsets;     // [K] c*H*W + u*W + v
  std::vector<int32_t> input_bases;     // [R] p*W + q0
  std::vector<int32_t> output_bases;    // [R] p*Wo + q0
  std::vector<int32_t> column_bases;    // [R] r*kLanes
  std::vector<int32_t> channel_planes;  // [O] o*Ho*Wo
  std::vector<uint8_t> overlaps;        // [R] whether vector r overlaps the one before
  std::vector<float> masks;             // [R, kLanes] 0 where overlapped, else 1
};

// y [O, Ho, Wo] = bias[o] + sum_t weight[o, t] * (tap t of x), NCHW, for
// one image x [C, H, W].
void ConvForwardImage(const ConvGeometry& g, const float* weight, const float* bias, const float* x,
                      float* y);

// dw_lanes [O, K, kLanes] += lane by lane, the sum over `count` images (x
// [count, C, H, W], dy [count, O, Ho, Wo]) and their vectors r of
// dy[o, r] * (tap t of x at r): the weight gradient before its lanes are
// added up.
void ConvWeightGrad(const ConvGeometry& g, const float* x, const float* dy, int count,
                    float* dw_lanes);

// dcols [K, R*kLanes] = weight^T dy for one image dy [O, Ho, Wo]: what each
// tap of each output vector passes back to the input.
void ConvTapGradImage(const ConvGeometry& g, const float* weight, const float* dy, float* dcols);

// dx [C, H, W] += every tap of dcols added back where ConvForwardImage read
// it (col2im), overlapped lanes once.
void Col2ImImage(const ConvGeometry& g, const float* dcols, float* dx);

}  // namespace pstrain::models::cpu

#pragma once

// A stride-1 3x3 convolution by Winograd's minimal filtering F(2x2, 3x3)
// (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
// CVPR 2016): every 2x2 block of outputs comes from a 4x4 tile of the input
// with 16 multiplications per input channel instead of 36, so each pass
// costs 2.25x fewer multiply-adds than the direct kernels
// (models/cpu/conv_kernels.h). Conv2d uses it where it applies (cnn_large's
// 32 -> 64 channel conv).
//
// With g a 3x3 filter, d a 4x4 input tile and dy a 2x2 output gradient:
//   forward:  y  = A^T [ (G g G^T) (.) (B^T d B) ] A      (.): element-wise
//   weights:  dg = G^T [ (A dy A^T) (.) (B^T d B) ] G     summed over tiles
//   input:    dx = the forward pass on dy padded by 2, with each filter
//                  rotated 180 degrees and the channels swapped
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
//   A^T = [1 1 1 0; 0 1 -1 -1]
// For each of the 16 tile positions the sum over channels is a product of
// a [rows, channels] filter matrix and a [channels, tiles] data matrix,
// computed by RunBlockProduct (and RunLaneDot for the weights) with the
// tiles in the lanes. Transforms read a row of kLanes (or 4) tiles with
// stride-2 loads (see Tiling).
//
// Rounding differs from the direct convolution's (the transforms add and
// halve before multiplying); every sum's order is fixed by indices, so
// results do not depend on alignment. Not thread-safe.

#include <cstdint>
#include <vector>

#include "models/layer.h"

namespace pstrain::models::cpu {

class Winograd3x3 {
 public:
  // Whether F(2x2, 3x3) takes a convolution: kernel 3, even output sizes,
  // output rows of at least 2*kLanes, and at least 4 input channels (with
  // fewer the transforms cost more than the multiplications they save).
  static bool Applies(Shape input, int out_channels, int kernel);

  // REQUIRES: Applies(input, out_channels, 3).
  Winograd3x3(Shape input, int out_channels);

  // y [n, O, Ho, Wo] = conv(x [n, C, H, W]) with weight [O, C, 3, 3], + bias[o].
  void Forward(int n, const float* weight, const float* bias, const float* x, float* y);

  // dw [O, C, 3, 3] (summed over the n images) and, unless dx is null,
  // dx [n, C, H, W], both overwritten, from dy [n, O, Ho, Wo].
  void Backward(int n, const float* weight, const float* x, const float* dy, float* dx, float* dw);

 private:
  // `lanes` tiles of a tile row from column `first`.
  struct TileVector {
    int first, lanes;
  };
  // The 2x2 tiles of one output (rows x cols of them), transformed a block
  // of block_rows tile rows at a time so that a block's buffers stay in the
  // L2 cache. A tile row is covered by vectors of kLanes tiles and what is
  // left by one of 4 (the row's last 4) or, when more than 4 are left, of
  // kLanes overlapping the one before (its tiles computed twice).
  struct Tiling {
    Tiling(int out_h, int out_w, int max_channels);
    int rows, cols, block_rows, block_lanes;
    std::vector<TileVector> vectors;
  };
  // Transformed tiles [16, channels, lanes]; lane l of a block is its tile
  // (ty - ty0)*cols + tx. `rows` holds each channel's offset, c*lanes.
  struct TileBuffer {
    TileBuffer(int channels, int lanes);
    float* at(int position, int channel) {
      return data.data() + (position * channels + channel) * int64_t{lanes};
    }
    const float* at(int position, int channel) const {
      return data.data() + (position * channels + channel) * int64_t{lanes};
    }
    int channels, lanes;
    std::vector<float> data;
    std::vector<int32_t> rows;
  };

  // B^T d B of tile rows [ty0, ty1) of img [channels, 2*t.rows+2, 2*t.cols+2]
  // into lanes from `lane0` of `out`.
  static void TransformInput(const Tiling& t, int ty0, int ty1, const float* img, int lane0,
                             TileBuffer* out);
  // Tile rows [ty0, ty1) of out [channels, 2*t.rows, 2*t.cols] = A^T m A + bias.
  static void TransformOutput(const Tiling& t, int ty0, int ty1, const TileBuffer& m,
                              const float* bias, float* out);
  // A dy A^T of every tile of one image's dy [O, Ho, Wo], into lanes from lane0.
  void TransformOutputGrad(const float* dy, int lane0, TileBuffer* out) const;
  // out[x] [rows, lanes] = filters[x] [rows, depth] data[x] [depth, lanes]
  // for each tile position x, over the first `vectors` vectors of lanes.
  void Multiply(const std::vector<float>& filters, const TileBuffer& data, int vectors,
                TileBuffer* out) const;
  // One image through one tiling: blocks of input transform, multiply,
  // output transform.
  void ConvolveImage(const Tiling& t, const float* img, const std::vector<float>& filters,
                     const float* bias, TileBuffer* data, TileBuffer* products, float* out);
  void SetFilters(const float* weight);
  // dw_lanes_ += the weight gradient of `count` images (<= grad_images_).
  void AccumulateWeightGrad(const float* x, const float* dy, int count);
  void InputGradImage(const float* dy, float* dx);
  void FinishWeightGrad(float* dw);

  Shape in_, out_;
  Tiling tiles_;                      // of y
  Tiling dx_tiles_;                   // of dx
  int grad_images_;                   // images per weight-gradient pass
  std::vector<int32_t> bases_;        // r*kLanes for every vector of any buffer
  std::vector<float> filters_;        // [16, O, C] G g G^T
  std::vector<float> dx_filters_;     // [16, C, O], of the filters rotated 180 degrees
  TileBuffer data_, products_;        // forward blocks: [16, C, .], [16, O, .]
  TileBuffer dx_data_, dx_products_;  // dx blocks: [16, O, .], [16, C, .]
  TileBuffer grad_data_, grad_dy_;    // weight gradient passes: [16, C, .], [16, O, .]
  std::vector<float> padded_dy_;      // [O, Ho+4, Wo+4], zero border
  std::vector<float> dw_lanes_;       // [16, O, C, kLanes]
};

}  // namespace pstrain::models::cpu

#pragma once

// The two inner loops of the CPU convolutions (models/cpu/conv_kernels.h,
// models/cpu/winograd.h): products computed in small blocks of
// simd::kLanes-float accumulators held in registers, with every operand
// addressed through offset tables so that a caller can read an image in
// place (a convolution's taps are shifted views of its input).
//
// Sums run in an order fixed by the indices alone (k, images, vectors;
// lanes apart), so results do not depend on buffer alignment. Not
// thread-safe only in that callers own the outputs.

#include <cstdint>

namespace pstrain::models::cpu {

// For m < rows and r < vectors, one output vector of kLanes floats:
//   out[m*out_row + out_bases[r] + lane] =
//     init[m] + sum_{k < depth} a[m*a_row + k*a_col] * b[b_offsets[k] + b_bases[r] + lane]
struct BlockProduct {
  const float* a;
  int64_t a_row, a_col;
  int depth;
  const float* b;
  const int32_t* b_offsets;  // [depth]
  const int32_t* b_bases;    // [vectors]
  const float* init;         // [rows], or null for 0
  float* out;
  int64_t out_row;
  const int32_t* out_bases;  // [vectors]
};
void RunBlockProduct(const BlockProduct& p, int rows, int vectors);

// For m < rows and n < cols, lane by lane:
//   acc[(m*cols + n)*kLanes + lane] += sum_{i < count} sum_{r < vectors}
//       mask_r[lane] * a[i*a_image + a_offsets[m] + a_bases[r] + lane]
//                    * b[i*b_image + b_offsets[n] + b_bases[r] + lane]
// where mask_r is masks[r*kLanes, (r+1)*kLanes) when overlaps[r], else 1
// (overlaps and masks may be null: no mask).
struct LaneDot {
  const float* a;
  int64_t a_image;
  const int32_t* a_offsets;  // [rows]
  const int32_t* a_bases;    // [vectors]
  const float* b;
  int64_t b_image;
  const int32_t* b_offsets;  // [cols]
  const int32_t* b_bases;    // [vectors]
  int count, vectors;
  const uint8_t* overlaps;  // [vectors] or null
  const float* masks;       // [vectors, kLanes] or null
  float* acc;               // [rows, cols, kLanes]
};
void RunLaneDot(const LaneDot& d, int rows, int cols);

}  // namespace pstrain::models::cpu

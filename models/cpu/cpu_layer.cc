#include "models/cpu/cpu_layer.h"

namespace pstrain::models::cpu {

float DeterministicSum(const float* v, int64_t size) {
  constexpr int kSumLanes = 16;
  float lanes[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= size; i += kSumLanes) {
    for (int l = 0; l < kSumLanes; ++l) lanes[l] += v[i + l];
  }
  for (int l = 0; i < size; ++i, ++l) lanes[l] += v[i];
  float total = 0.0f;
  for (float lane : lanes) total += lane;
  return total;
}

}  // namespace pstrain::models::cpu

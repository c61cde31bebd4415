#pragma once

// The dropout masks both backends draw, as a pure function of
// (seed, layer index, example key, element): the same on the CPU and the GPU,
// and the same for an example whichever worker and batch it lands in. That
// is what lets N sync workers reproduce one process with dropout on.

#include <cstdint>

#include "common/random.h"

namespace pstrain::models {

// Key of a training example: its epoch and its index in the dataset.
PSTRAIN_HOST_DEVICE inline uint64_t MakeExampleKey(uint32_t epoch, uint32_t dataset_index) {
  return (static_cast<uint64_t>(epoch) << 32) | dataset_index;
}

// The Philox key of layer `layer_index` under `seed`.
PSTRAIN_HOST_DEVICE inline uint64_t DropoutLayerKey(uint64_t seed, int layer_index) {
  return Mix64(seed ^ (0xD50Full + static_cast<uint64_t>(layer_index)));
}

// The random bits of elements 4*block .. 4*block+3 of an example, one word
// each: one Philox call serves four elements.
PSTRAIN_HOST_DEVICE inline Philox4x32Result DropoutBlock(uint64_t layer_key, uint64_t example_key,
                                                         uint32_t block, bool channelwise) {
  return Philox4x32(static_cast<uint32_t>(layer_key), static_cast<uint32_t>(layer_key >> 32),
                    static_cast<uint32_t>(example_key), static_cast<uint32_t>(example_key >> 32),
                    block, channelwise ? 1u : 0u);
}

// Uniform [0, 1) draw for `element` of an example at layer `layer_index`.
// Dropout uses the element index within the example (c*H*W + h*W + w);
// dropout2d uses the channel index with `channelwise` set.
PSTRAIN_HOST_DEVICE inline float DropoutUniform(uint64_t seed, int layer_index,
                                                uint64_t example_key, uint32_t element,
                                                bool channelwise) {
  const Philox4x32Result r =
      DropoutBlock(DropoutLayerKey(seed, layer_index), example_key, element >> 2, channelwise);
  return UniformFloat(r.v[element & 3u]);
}

// The scale of an element whose draw is `uniform`: 0 (dropped) when
// uniform < p, else 1 / (1 - p).
PSTRAIN_HOST_DEVICE inline float DropoutScaleOf(float uniform, float p) {
  return uniform < p ? 0.0f : 1.0f / (1.0f - p);
}

// Scale applied to a kept element: 1 / (1 - p); dropped elements become 0.
PSTRAIN_HOST_DEVICE inline float DropoutScale(uint64_t seed, int layer_index,
                                              uint64_t example_key, uint32_t element,
                                              bool channelwise, float p) {
  return DropoutScaleOf(DropoutUniform(seed, layer_index, example_key, element, channelwise), p);
}

}  // namespace pstrain::models

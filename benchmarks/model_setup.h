#pragma once

// What the model benchmarks time a step on: a model of models/ with its
// initialised parameters (seed 7) and one batch of synthetic images in
// MNIST's normalised range with random labels (seed 11), the same on every
// backend, so that their steps compare directly (cuda_model_bench checks
// the GPU's against the CPU's on it).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/random.h"
#include "models/dropout_mask.h"
#include "models/model.h"
#include "models/net_spec.h"

namespace pstrain::models {

struct BenchSetup {
  std::unique_ptr<Model> model;
  std::vector<float> params, images, grads;
  std::vector<int32_t> labels;
  std::vector<uint64_t> keys;
  Batch batch;  // n examples: images, labels and keys above (or the input buffer)
};

inline constexpr uint64_t kBenchSeed = 7;

// Model `name` on `device` ("cpu", "cuda", ...) for batches of `n`.
// `staged`: the batch is gathered into the model's input buffer
// (Model::InputBuffer: page-locked memory for the CUDA model), as the
// worker gathers it, so a step uploads it without a host copy first.
inline absl::StatusOr<std::unique_ptr<BenchSetup>> MakeBenchSetup(const std::string& name,
                                                                  const std::string& device,
                                                                  int n, bool staged = false) {
  auto s = std::make_unique<BenchSetup>();
  ModelOptions options;
  options.name = name;
  options.device = device;
  options.max_batch = n;
  options.seed = kBenchSeed;
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(options);
  if (!model.ok()) return model.status();
  s->model = std::move(model).value();
  s->params.resize(s->model->num_params());
  InitParams(s->model->param_specs(), kBenchSeed, s->params.data());
  if (absl::Status status = s->model->SetParams(s->params); !status.ok()) return status;
  SplitMix64 rng(11);
  s->images.resize(s->model->net().input.size() * n);
  for (float& v : s->images) v = rng.Uniform(-0.4242f, 2.8215f);  // MNIST's normalised range
  for (int i = 0; i < n; ++i) {
    s->labels.push_back(static_cast<int32_t>(rng.Below(s->model->net().num_classes)));
    s->keys.push_back(MakeExampleKey(0, static_cast<uint32_t>(i)));
  }
  s->grads.resize(s->model->num_params());
  s->batch = {n, s->images.data(), s->labels.data(), s->keys.data()};
  if (staged) {
    absl::StatusOr<BatchBuffer> in = s->model->InputBuffer();
    if (!in.ok()) return in.status();
    std::copy(s->images.begin(), s->images.end(), in->images.begin());
    std::copy(s->labels.begin(), s->labels.end(), in->labels.begin());
    std::copy(s->keys.begin(), s->keys.end(), in->example_keys.begin());
    s->batch = {n, in->images.data(), in->labels.data(), in->example_keys.data()};
  }
  return s;
}

}  // namespace pstrain::models

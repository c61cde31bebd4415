#pragma once

// A trained model read back from a run directory: its parameters, and what
// the run recorded about them (the network, the data set).
//
//   ASSIGN_OR_RETURN(SavedModel m, LoadSavedModel("runs/sync", ""));  // final_params.f32
//   ASSIGN_OR_RETURN(SavedModel m, LoadSavedModel("runs/sync", "latest"));  // newest checkpoint
//
// `checkpoint` says which parameters:
//   ""          RUN_DIR/final_params.f32 (what the chief wrote at the end)
//   "latest"    the newest checkpoint whose manifest and shard files read back
//   "ckpt-N", N checkpoint N of the run's checkpoint directory
//   a path      a checkpoint directory (one holding manifest.json)
// The run's checkpoint directory is its --checkpoint_dir as recorded, or
// RUN_DIR/checkpoints. A checkpoint's shards are read with their checksums
// checked and put together by their ranges, which must cover the model.
//
// What the run recorded comes from, in order: the checkpoint's manifest
// (its flags), RUN_DIR/launch.json (pstrain launch), RUN_DIR/summary.json
// (the chief's, also for tasks started by hand).
//
// Errors name the file: NotFound for a missing run directory, file or
// checkpoint; InvalidArgument for a damaged or inconsistent one (a file of
// the wrong size, a bad checksum, shards that do not cover the model).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/manifest.h"  // RecordedFlag

namespace pstrain {

struct SavedModel {
  std::string model;     // "mnist_cnn"
  std::string dataset;   // "mnist", "fashion_mnist"; "" when not recorded
  std::string data_dir;  // as the run was given it; "" when not recorded
  std::vector<float> params;
  std::string source;  // the file or checkpoint directory read
  int64_t step = -1;   // the checkpoint's step; -1 for final_params.f32
  double recorded_accuracy =
      -1;  // summary.json's final test accuracy (final params only); -1: none
};

absl::StatusOr<SavedModel> LoadSavedModel(const std::string& run_dir,
                                          const std::string& checkpoint);

}  // namespace pstrain

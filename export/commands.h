#pragma once

// `pstrain export` and `pstrain evaluate` (launcher/pstrain_main.cc parses
// the flags and calls these).
//
//   pstrain export --run_dir=DIR [--checkpoint=latest|ckpt-N|PATH]
//   [--format=onnx] [--out=FILE] pstrain evaluate --run_dir=DIR
//   [--checkpoint=...] [--data_dir=DIR] [--dataset=mnist]

#include <string>

#include "absl/status/status.h"

namespace pstrain {

struct SavedModelCommand {
  std::string run_dir;
  std::string checkpoint;  // see LoadSavedModel (export/saved_model.h)
  std::string format = "onnx";
  std::string out;  // export: '' = RUN_DIR/model.onnx
  // evaluate: '' = as the run recorded it (else data/mnist, mnist).
  std::string data_dir;
  std::string dataset;
};

// Writes the model; prints one line saying what was written from what.
absl::Status RunExport(const SavedModelCommand &command);

// Evaluates the model on the test set; prints its accuracy and loss.
absl::Status RunEvaluate(const SavedModelCommand &command);

}  // namespace pstrain

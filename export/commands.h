#pragma once

// `pstrain export`, `pstrain evaluate` and `pstrain predict`
// (launcher/cli/tool_commands.cc parses the flags and calls these).
//
//   pstrain export --run_dir=DIR [--checkpoint=latest|ckpt-N|PATH] [--format=onnx] [--out=FILE]
//   pstrain evaluate --run_dir=DIR [--checkpoint=...] [--data_dir=DIR] [--dataset=mnist]
//   pstrain predict --run_dir=DIR [--checkpoint=...] [--invert] IMAGE.png...

#include <string>
#include <vector>

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
absl::Status RunExport(const SavedModelCommand& command);

// Evaluates the model on the test set; prints its accuracy and loss.
absl::Status RunEvaluate(const SavedModelCommand& command);

// Classifies PNG images of the model's input size (28 x 28 for MNIST's
// networks: a white digit on black, as MNIST's; `invert` for black on
// white), on the CPU; prints one line per image: its class, that class's
// probability, and the next two. Every image is read before any is
// classified: a missing, damaged or wrongly sized one fails the command
// (InvalidArgument or NotFound naming it) and nothing is printed.
absl::Status RunPredict(const SavedModelCommand& command, const std::vector<std::string>& images,
                        bool invert);

}  // namespace pstrain

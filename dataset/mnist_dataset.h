#pragma once

// MNIST-format datasets (MNIST, Fashion-MNIST) read from IDX files.
//
// IDX (http://yann.lecun.com/exdb/mnist/): big-endian; magic 0x00000803 for
// images (n, rows, cols, then n*rows*cols uint8 pixels) and 0x00000801 for
// labels (n, then n uint8 labels). Each file may be raw or gzip; gzip is
// recognised by its magic bytes, not by the file name.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pstrain {

enum class Split { kTrain, kTest };

struct Dataset {
  int64_t size = 0;              // number of examples
  int rows = 0;
  int cols = 0;
  // [size, rows, cols] pixel bytes. A string: the decoded file's own
  // buffer, moved in without a copy (a copy doubled the loader's peak
  // memory: 47 MB more for MNIST's training set; benchmarks/worker_rss.sh).
  std::string pixels;
  std::vector<int32_t> labels;   // [size], each in [0, 9]
};

// Normalisation applied when a batch is gathered: x = (p/255 - mean) / std.
struct Normalization {
  float mean = 0.1307f;  // MNIST's, as in PyTorch's MNIST example
  float std = 0.3081f;
};

// The normalisation training uses for `dataset` ("mnist": MNIST's mean and
// std; "fashion_mnist": Fashion-MNIST's). Any other name gets MNIST's.
Normalization NormalizationFor(const std::string& dataset);

// Reads an IDX image file and its label file. Errors name the file:
// NotFound when a file is missing; InvalidArgument (bad input the user gave,
// exit code 2) for something that is not a regular file, a bad magic number,
// a truncated or oversized file, dimensions that are not 28x28-like (rows
// and cols must be 1..1024), a bad gzip stream, a label outside 0..9, or
// label and image counts that differ.
absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path);

// LoadIdx on the files' bytes (each raw or gzip), with the same checks and
// errors; `images_name` and `labels_name` stand for the paths in messages.
// LoadIdx reads both files and calls this, so this is what it parses.
absl::StatusOr<Dataset> ParseIdx(std::string images, std::string labels,
                                 const std::string& images_name, const std::string& labels_name);

// Loads `split` from `data_dir`: train-images-idx3-ubyte / train-labels-idx1-ubyte
// or t10k-*, each raw or with a ".gz" suffix (raw preferred when both exist).
absl::StatusOr<Dataset> LoadMnist(const std::string& data_dir, Split split);

// Copies the examples `indices` into a batch: images [indices.size(), 1,
// rows, cols] normalised floats, labels [indices.size()].
// REQUIRES: every index < dataset.size.
void GatherBatch(const Dataset& dataset, absl::Span<const int64_t> indices,
                 const Normalization& norm, float* images, int32_t* labels);

}  // namespace pstrain

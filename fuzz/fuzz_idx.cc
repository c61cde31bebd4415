// libFuzzer target: the MNIST IDX reader (ParseIdx, which LoadIdx uses).
//
// The input is an image file and a label file, each raw or gzip: a 4-byte
// little-endian length of the image file, the image file, then the label
// file. Inputs too short for the length are the image file alone, with an
// empty label file.

#include <cstddef>
#include <cstdint>
#include <string>

#include "dataset/mnist_dataset.h"
#include "glog/logging.h"

namespace pstrain::fuzz {
namespace {

void Run(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string images = input;
  std::string labels;
  if (size >= 4) {
    const size_t n = data[0] | data[1] << 8 | data[2] << 16 | static_cast<size_t>(data[3]) << 24;
    if (n <= size - 4) {
      images = input.substr(4, n);
      labels = input.substr(4 + n);
    }
  }
  absl::StatusOr<Dataset> dataset = ParseIdx(images, labels, "images", "labels");
  if (!dataset.ok()) {
    // Corrupt input is the user's bad data: InvalidArgument naming the file (exit 2).
    CHECK(absl::IsInvalidArgument(dataset.status())) << dataset.status();
    return;
  }
  // What the trainer does with a dataset: gather a batch (first and last).
  CHECK_GT(dataset->size, 0);
  CHECK_EQ(static_cast<int64_t>(dataset->labels.size()), dataset->size);
  const size_t image_size = static_cast<size_t>(dataset->rows) * dataset->cols;
  CHECK_EQ(dataset->pixels.size(), image_size * dataset->size);
  const int64_t indices[2] = {0, dataset->size - 1};
  std::vector<float> batch(2 * image_size);
  int32_t batch_labels[2];
  GatherBatch(*dataset, indices, Normalization(), batch.data(), batch_labels);
}

}  // namespace
}  // namespace pstrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::fuzz::Run(data, size);
  return 0;
}

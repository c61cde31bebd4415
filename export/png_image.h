#pragma once

// Grayscale images in PNG files, for `pstrain predict`, through Debian's
// libpng (its simplified API): any PNG libpng reads (gray, RGB, palette,
// with or without alpha, 1 to 16 bits per channel) comes back as 8-bit
// gray; colour is converted as libpng does (its sRGB luminance), and alpha
// is composited onto black (MNIST's background).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

struct GrayImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // [height, width], row-major
};

// NotFound for a missing file; InvalidArgument naming the file for one
// that is not a PNG libpng can read, or larger than 4096 x 4096.
absl::StatusOr<GrayImage> ReadPng(const std::string& path);

// Writes `image` as an 8-bit gray PNG. Internal naming the file on failure.
// REQUIRES: pixels.size() == width * height.
absl::Status WritePng(const std::string& path, const GrayImage& image);

}  // namespace pstrain

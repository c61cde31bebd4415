// ReadPng / WritePng through libpng: round trips, colour converted to gray,
// and files that are not (whole) PNGs refused naming them.

#include "export/png_image.h"

#include <png.h>

#include <cstring>
#include <string>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

GrayImage Gradient(int width, int height) {
  GrayImage g{width, height, {}};
  for (int i = 0; i < width * height; ++i) g.pixels.push_back(static_cast<uint8_t>((i * 7) % 256));
  return g;
}

TEST(PngImage, AGrayImageRoundTrips) {
  const std::string path = testing::MakeTempDir("png") + "/g.png";
  const GrayImage g = Gradient(28, 28);
  ASSERT_TRUE(WritePng(path, g).ok());
  auto read = ReadPng(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->width, 28);
  EXPECT_EQ(read->height, 28);
  EXPECT_EQ(read->pixels, g.pixels);
}

TEST(PngImage, AnRgbImageOfGraysReadsAsThoseGrays) {
  const std::string path = testing::MakeTempDir("png") + "/rgb.png";
  const GrayImage g = Gradient(5, 3);
  std::vector<uint8_t> rgb;
  for (uint8_t p : g.pixels) rgb.insert(rgb.end(), {p, p, p});
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = 5;
  image.height = 3;
  image.format = PNG_FORMAT_RGB;
  ASSERT_TRUE(png_image_write_to_file(&image, path.c_str(), 0, rgb.data(), 0, nullptr));
  png_image_free(&image);
  auto read = ReadPng(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->pixels, g.pixels);
}

TEST(PngImage, WhatIsNotAPngIsRefusedNamingTheFile) {
  const std::string dir = testing::MakeTempDir("png");
  auto missing = ReadPng(dir + "/none.png");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir + "/none.png"));

  ASSERT_TRUE(WriteFileAtomic(dir + "/text.png", "hello, not a png").ok());
  auto text = ReadPng(dir + "/text.png");
  EXPECT_TRUE(absl::IsInvalidArgument(text.status()));
  EXPECT_THAT(std::string(text.status().message()), HasSubstr(dir + "/text.png: not a PNG"));

  ASSERT_TRUE(WritePng(dir + "/whole.png", Gradient(28, 28)).ok());
  const std::string bytes = *ReadFileToString(dir + "/whole.png");
  ASSERT_TRUE(WriteFileAtomic(dir + "/cut.png", bytes.substr(0, bytes.size() / 2)).ok());
  auto cut = ReadPng(dir + "/cut.png");
  EXPECT_TRUE(absl::IsInvalidArgument(cut.status())) << cut.status();
  EXPECT_THAT(std::string(cut.status().message()), HasSubstr(dir + "/cut.png"));

  auto directory = ReadPng(dir);
  EXPECT_TRUE(absl::IsInvalidArgument(directory.status()));
}

}  // namespace
}  // namespace pstrain

#include "dataset/mnist_dataset.h"

#include <stdlib.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr char kMnistDir[] = PSTRAIN_SOURCE_DIR "/data/mnist";

// ---------------------------------------------------------------------------
// Building IDX files.

std::string BigEndian32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string ImagesIdx(uint32_t n, uint32_t rows, uint32_t cols, const std::string& pixels) {
  return BigEndian32(0x803) + BigEndian32(n) + BigEndian32(rows) + BigEndian32(cols) + pixels;
}

std::string LabelsIdx(const std::vector<uint8_t>& labels) {
  return BigEndian32(0x801) + BigEndian32(static_cast<uint32_t>(labels.size())) +
         std::string(labels.begin(), labels.end());
}

// `bytes` as one gzip member (fastest level: the tests gzip 47 MB).
std::string Gzip(absl::string_view bytes) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, bytes.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  ASSERT_TRUE(out.good()) << path;
}

// The real data set, or a failure that says how to get it.
testing::AssertionResult LoadReal(Split split, Dataset* out) {
  absl::StatusOr<Dataset> dataset = LoadMnist(kMnistDir, split);
  if (!dataset.ok()) {
    return testing::AssertionFailure() << dataset.status() << "\nThe real MNIST is needed in "
                                       << kMnistDir << ": run tools/fetch_mnist.sh";
  }
  *out = std::move(dataset).value();
  return testing::AssertionSuccess();
}

void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& path,
                 absl::string_view what) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_THAT(std::string(status.message()), HasSubstr(std::string(what)));
}

// A fresh directory per test, holding a valid 3-image 2x3 data set.
class MnistFilesTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = testing::TempDir() + "/mnist_dataset_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    images_ = dir_ + "/images";
    labels_ = dir_ + "/labels";
    WriteFile(images_, ImagesIdx(3, 2, 3, kPixels));
    WriteFile(labels_, LabelsIdx({7, 0, 9}));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::Status Load() { return LoadIdx(images_, labels_).status(); }

  const std::string kPixels = std::string("\x00\x01\x02\x03\x04\x05", 6) +
                              "\x10\x11\x12\x13\x14\x15\xf0\xf1\xf2\xf3\xf4\xff";
  std::string dir_;
  std::string images_;
  std::string labels_;
};

// ---------------------------------------------------------------------------
// The real data set.

TEST(MnistDataset, LoadsTheRealTrainingSet) {
  Dataset train;
  ASSERT_TRUE(LoadReal(Split::kTrain, &train));
  EXPECT_EQ(train.size, 60000);
  EXPECT_EQ(train.rows, 28);
  EXPECT_EQ(train.cols, 28);
  EXPECT_EQ(train.pixels.size(), 60000u * 28 * 28);
  ASSERT_EQ(train.labels.size(), 60000u);
  EXPECT_THAT(std::vector<int32_t>(train.labels.begin(), train.labels.begin() + 5),
              testing::ElementsAre(5, 0, 4, 1, 9));
  std::vector<int> per_class(10, 0);
  for (int32_t label : train.labels) {
    ASSERT_GE(label, 0);
    ASSERT_LE(label, 9);
    ++per_class[label];
  }
  EXPECT_EQ(per_class[0], 5923);  // the published class counts
  EXPECT_EQ(per_class[1], 6742);
}

TEST(MnistDataset, RealTrainingPixelsHaveThePublishedMeanAndStd) {
  Dataset train;
  ASSERT_TRUE(LoadReal(Split::kTrain, &train));
  double sum = 0, sum_sq = 0;
  for (uint8_t p : train.pixels) {
    sum += p / 255.0;
    sum_sq += (p / 255.0) * (p / 255.0);
  }
  const double mean = sum / train.pixels.size();
  const double std = std::sqrt(sum_sq / train.pixels.size() - mean * mean);
  EXPECT_NEAR(mean, Normalization().mean, 1e-4);
  EXPECT_NEAR(std, Normalization().std, 1e-4);
}

TEST(MnistDataset, LoadsTheRealTestSet) {
  Dataset test;
  ASSERT_TRUE(LoadReal(Split::kTest, &test));
  EXPECT_EQ(test.size, 10000);
  EXPECT_EQ(test.rows, 28);
  EXPECT_EQ(test.cols, 28);
  EXPECT_EQ(test.pixels.size(), 10000u * 28 * 28);
  ASSERT_EQ(test.labels.size(), 10000u);
  EXPECT_THAT(std::vector<int32_t>(test.labels.begin(), test.labels.begin() + 5),
              testing::ElementsAre(7, 2, 1, 0, 4));
  for (int32_t label : test.labels) {
    ASSERT_GE(label, 0);
    ASSERT_LE(label, 9);
  }
}

TEST_F(MnistFilesTest, RealGzipAndRawFilesGiveIdenticalData) {
  for (Split split : {Split::kTrain, Split::kTest}) {
    Dataset raw;
    ASSERT_TRUE(LoadReal(split, &raw));
    const std::string prefix = split == Split::kTrain ? "/train" : "/t10k";
    for (const char* suffix : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) {
      const std::string name = prefix + suffix;
      WriteFile(dir_ + name + ".gz", Gzip(ReadFile(std::string(kMnistDir) + name)));
    }
    absl::StatusOr<Dataset> gzip = LoadMnist(dir_, split);
    ASSERT_TRUE(gzip.ok()) << gzip.status();
    EXPECT_EQ(gzip->size, raw.size);
    EXPECT_EQ(gzip->rows, raw.rows);
    EXPECT_EQ(gzip->cols, raw.cols);
    EXPECT_TRUE(gzip->pixels == raw.pixels);
    EXPECT_TRUE(gzip->labels == raw.labels);
  }
}

// ---------------------------------------------------------------------------
// Valid files.

TEST_F(MnistFilesTest, LoadsASmallDataSet) {
  absl::StatusOr<Dataset> dataset = LoadIdx(images_, labels_);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->size, 3);
  EXPECT_EQ(dataset->rows, 2);
  EXPECT_EQ(dataset->cols, 3);
  EXPECT_EQ(std::string(dataset->pixels.begin(), dataset->pixels.end()), kPixels);
  EXPECT_THAT(dataset->labels, testing::ElementsAre(7, 0, 9));
}

TEST_F(MnistFilesTest, ReadsConcatenatedGzipMembers) {
  const std::string images = ImagesIdx(3, 2, 3, kPixels);
  WriteFile(images_, Gzip(images.substr(0, 7)) + Gzip(images.substr(7)));
  absl::StatusOr<Dataset> dataset = LoadIdx(images_, labels_);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(std::string(dataset->pixels.begin(), dataset->pixels.end()), kPixels);
}

TEST_F(MnistFilesTest, PrefersTheRawFileOverGzip) {
  WriteFile(dir_ + "/t10k-images-idx3-ubyte", ImagesIdx(3, 2, 3, kPixels));
  WriteFile(dir_ + "/t10k-images-idx3-ubyte.gz", "not gzip at all");
  WriteFile(dir_ + "/t10k-labels-idx1-ubyte.gz", Gzip(LabelsIdx({1, 2, 3})));
  absl::StatusOr<Dataset> dataset = LoadMnist(dir_, Split::kTest);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT(dataset->labels, testing::ElementsAre(1, 2, 3));
}

// ---------------------------------------------------------------------------
// Every broken file is an error that names it.

TEST_F(MnistFilesTest, MissingFilesAreNotFound) {
  ExpectError(LoadIdx(dir_ + "/nope", labels_).status(), absl::StatusCode::kNotFound,
              dir_ + "/nope", "no such file");
  ExpectError(LoadIdx(images_, dir_ + "/nope").status(), absl::StatusCode::kNotFound,
              dir_ + "/nope", "no such file");
  ExpectError(LoadMnist(dir_, Split::kTrain).status(), absl::StatusCode::kNotFound,
              dir_ + "/train-images-idx3-ubyte", "fetch_mnist.sh");
}

TEST_F(MnistFilesTest, RejectsABadMagicNumber) {
  WriteFile(images_, LabelsIdx({1, 2, 3}));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "bad magic number 0x00000801");
  WriteFile(images_, ImagesIdx(3, 2, 3, kPixels));
  WriteFile(labels_, ImagesIdx(3, 2, 3, kPixels));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, labels_, "bad magic number 0x00000803");
}

TEST_F(MnistFilesTest, RejectsUnsupportedDimensions) {
  WriteFile(images_, ImagesIdx(3, 0, 3, ""));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "dimensions 0x3");
  WriteFile(images_, ImagesIdx(3, 28, 1025, std::string(3 * 28 * 1025, '\0')));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "dimensions 28x1025");
  WriteFile(images_, Gzip(ImagesIdx(3, 2000, 2, std::string(3 * 2000 * 2, '\0'))));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "dimensions 2000x2");
  WriteFile(images_, ImagesIdx(0, 2, 3, ""));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "no images");
}

TEST_F(MnistFilesTest, RejectsTruncatedImages) {
  WriteFile(images_, ImagesIdx(3, 2, 3, kPixels.substr(1)));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "truncated");
  WriteFile(images_, ImagesIdx(3, 2, 3, "").substr(0, 10));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "truncated");
}

TEST_F(MnistFilesTest, RejectsTruncatedLabels) {
  WriteFile(labels_, LabelsIdx({7, 0, 9}).substr(0, 10));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, labels_, "truncated");
  WriteFile(labels_, Gzip(LabelsIdx({7, 0, 9}).substr(0, 10)));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, labels_, "truncated");
}

TEST_F(MnistFilesTest, RejectsTrailingBytes) {
  WriteFile(images_, ImagesIdx(3, 2, 3, kPixels + "x"));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "trailing bytes");
  WriteFile(images_, ImagesIdx(3, 2, 3, kPixels));
  WriteFile(labels_, Gzip(LabelsIdx({7, 0, 9}) + "xyz"));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, labels_, "trailing bytes");
}

TEST_F(MnistFilesTest, RejectsLabelAndImageCountsThatDiffer) {
  WriteFile(labels_, LabelsIdx({7, 0}));
  const absl::Status status = Load();
  ExpectError(status, absl::StatusCode::kInvalidArgument, images_, "3 images");
  EXPECT_THAT(std::string(status.message()), HasSubstr(labels_ + " holds 2 labels"));
}

TEST_F(MnistFilesTest, RejectsALabelOutOfRange) {
  WriteFile(labels_, LabelsIdx({7, 10, 9}));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, labels_, "label 10 of example 1");
  WriteFile(labels_, LabelsIdx({7, 0, 255}));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, labels_, "label 255 of example 2");
}

TEST_F(MnistFilesTest, RejectsCorruptGzip) {
  const std::string gzip = Gzip(ImagesIdx(3, 2, 3, kPixels));
  std::string flipped = gzip;
  flipped[gzip.size() - 6] ^= 0x55;  // inside the CRC-32 trailer
  WriteFile(images_, flipped);
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "corrupt gzip");
  WriteFile(images_, gzip.substr(0, gzip.size() - 4));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "unexpected end of file");
  WriteFile(images_, gzip + "garbage");
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "trailing garbage");
  WriteFile(images_, gzip.substr(0, 12) + std::string(40, '\xa5'));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "corrupt gzip");
}

TEST_F(MnistFilesTest, RejectsEmptyFiles) {
  WriteFile(images_, "");
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "truncated");
  WriteFile(images_, ImagesIdx(3, 2, 3, kPixels));
  WriteFile(labels_, "");
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, labels_, "truncated");
}

// A header that claims 2^32 x 1024 x 1024 bytes must be checked against the
// file before anything of that size is allocated (which would abort).
TEST_F(MnistFilesTest, RejectsHostileHeadersWithoutAllocatingForThem) {
  const std::string huge = ImagesIdx(0xffffffffu, 1024, 1024, std::string(100, '\0'));
  WriteFile(images_, huge);
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "truncated");
  WriteFile(images_, Gzip(huge));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, images_, "truncated");
  WriteFile(images_, ImagesIdx(3, 2, 3, kPixels));
  WriteFile(labels_, Gzip(BigEndian32(0x801) + BigEndian32(0xffffffffu) + "\x01\x02"));
  ExpectError(Load(), absl::StatusCode::kInvalidArgument, labels_, "truncated");
}

// ---------------------------------------------------------------------------
// GatherBatch.

Dataset FourPixelDataset() {
  Dataset dataset;
  dataset.size = 3;
  dataset.rows = 2;
  dataset.cols = 2;
  const uint8_t pixels[] = {0, 255, 128, 51, 1, 2, 3, 4, 10, 20, 30, 40};
  dataset.pixels.assign(reinterpret_cast<const char*>(pixels), sizeof(pixels));
  dataset.labels = {4, 5, 6};
  return dataset;
}

TEST(GatherBatch, NormalisesWithMnistMeanAndStd) {
  const Dataset dataset = FourPixelDataset();
  const std::vector<int64_t> indices = {0};
  std::vector<float> images(4);
  int32_t label = -1;
  GatherBatch(dataset, indices, Normalization(), images.data(), &label);
  EXPECT_NEAR(images[0], (0.0 - 0.1307) / 0.3081, 1e-6);  // -0.42421
  EXPECT_NEAR(images[1], (1.0 - 0.1307) / 0.3081, 1e-6);  // 2.82149
  EXPECT_NEAR(images[2], (128 / 255.0 - 0.1307) / 0.3081, 1e-6);
  EXPECT_NEAR(images[3], (0.2 - 0.1307) / 0.3081, 1e-6);
  // Bit for bit what torchvision's ToTensor + Normalize compute in float.
  EXPECT_EQ(images[2], (128 / 255.0f - 0.1307f) / 0.3081f);
  EXPECT_EQ(label, 4);
}

TEST(GatherBatch, CopiesTheIndexedExamplesInOrder) {
  const Dataset dataset = FourPixelDataset();
  const std::vector<int64_t> indices = {2, 0, 2};
  std::vector<float> images(3 * 4);
  std::vector<int32_t> labels(3);
  GatherBatch(dataset, indices, Normalization{0.0f, 1.0f}, images.data(), labels.data());
  const std::vector<float> expected = {10 / 255.0f, 20 / 255.0f, 30 / 255.0f, 40 / 255.0f,
                                       0.0f,        1.0f,        128 / 255.0f, 51 / 255.0f,
                                       10 / 255.0f, 20 / 255.0f, 30 / 255.0f, 40 / 255.0f};
  EXPECT_EQ(images, expected);
  EXPECT_THAT(labels, testing::ElementsAre(6, 4, 6));
}

TEST(GatherBatch, NormalisedRealTrainingSetHasZeroMeanAndUnitStd) {
  Dataset train;
  ASSERT_TRUE(LoadReal(Split::kTrain, &train));
  std::vector<int64_t> indices(static_cast<size_t>(train.size));
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
  std::vector<float> images(train.pixels.size());
  std::vector<int32_t> labels(indices.size());
  GatherBatch(train, indices, Normalization(), images.data(), labels.data());
  double sum = 0, sum_sq = 0;
  for (float x : images) {
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double mean = sum / images.size();
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sum_sq / images.size() - mean * mean), 1.0, 1e-3);
  EXPECT_TRUE(labels == train.labels);
}

}  // namespace
}  // namespace pstrain

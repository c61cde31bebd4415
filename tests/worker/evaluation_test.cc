// The test-set pass that the chief and `pstrain evaluate` share.

#include "worker/evaluation.h"

#include <memory>

#include "absl/status/statusor.h"
#include "dataset/mnist_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"

namespace pstrain {
namespace {

// The test set's images are gathered into the model's input buffer, so
// images of another size are refused before anything is written (32x32
// ones would have run past mnist_cnn's 28x28 buffer), as is a batch larger
// than the model's.
TEST(EvaluateDataset, RefusesImagesOfAnotherSizeAndTooLargeABatch) {
  models::ModelOptions options;
  options.max_batch = 4;
  absl::StatusOr<std::unique_ptr<models::Model>> model = models::CreateModel(options);
  ASSERT_TRUE(model.ok()) << model.status();
  Dataset test;
  test.size = 4;
  test.rows = test.cols = 32;
  test.pixels.assign(4 * 32 * 32, '\x80');
  test.labels.assign(4, 3);
  const Normalization norm = NormalizationFor("mnist");
  absl::StatusOr<models::EvalResult> result = EvaluateDataset(**model, test, norm, 4);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), ::testing::HasSubstr("32x32"));

  test.rows = test.cols = 28;
  test.pixels.assign(4 * 28 * 28, '\x80');
  result = EvaluateDataset(**model, test, norm, 4);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->count, 4);
  result = EvaluateDataset(**model, test, norm, 5);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain

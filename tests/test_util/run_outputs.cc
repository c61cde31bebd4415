#include "tests/test_util/run_outputs.h"

#include <cstring>

#include "common/file_util.h"
#include "common/json.h"
#include "gtest/gtest.h"

namespace pstrain::testing {

std::vector<float> ReadFinalParams(const std::string& run_dir) {
  auto bytes = ReadFileToString(run_dir + "/final_params.f32");
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  std::vector<float> params(bytes.ok() ? bytes->size() / sizeof(float) : 0);
  if (!params.empty()) std::memcpy(params.data(), bytes->data(), params.size() * sizeof(float));
  return params;
}

proto::RunSummary ReadRunSummary(const std::string& run_dir) {
  proto::RunSummary summary;
  auto text = ReadFileToString(run_dir + "/summary.json");
  EXPECT_TRUE(text.ok()) << text.status();
  if (text.ok()) {
    const absl::Status s = ParseJsonMessage(*text, run_dir + "/summary.json", &summary);
    EXPECT_TRUE(s.ok()) << s;
  }
  return summary;
}

}  // namespace pstrain::testing

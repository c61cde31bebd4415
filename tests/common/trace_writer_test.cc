// TraceWriter and MergeTimelines: the array form, closed or cut short by a
// kill, merged into one JSON object trace that parses.

#include "common/trace_writer.h"

#include <string>

#include "common/file_util.h"
#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

TEST(TraceWriter, WritesAClosedJsonArrayOfEvents) {
  const std::string path = testing::MakeTempDir("trace") + "/t/worker0.json";
  {
    auto t = TraceWriter::Open(path, 3, "worker \"0\"");
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*t)->NameThread(1, "train").ok());
    ASSERT_TRUE((*t)->Complete("compute", "train", 1, 1000, 250, "\"step\": 4").ok());
    ASSERT_TRUE((*t)->Complete("negative", "train", 1, 1000, -5).ok());
  }
  auto json = ParseJson(*ReadFileToString(path), path);
  ASSERT_TRUE(json.ok()) << json.status();
  const auto& events = json->list_value().values();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]
                .struct_value()
                .fields()
                .at("args")
                .struct_value()
                .fields()
                .at("name")
                .string_value(),
            "worker \"0\"");
  const auto& compute = events[2].struct_value().fields();
  EXPECT_EQ(compute.at("ph").string_value(), "X");
  EXPECT_EQ(compute.at("pid").number_value(), 3);
  EXPECT_EQ(compute.at("ts").number_value(), 1000);
  EXPECT_EQ(compute.at("dur").number_value(), 250);
  EXPECT_EQ(compute.at("args").struct_value().fields().at("step").number_value(), 4);
  EXPECT_EQ(events[3].struct_value().fields().at("dur").number_value(), 0);  // clamped
}

TEST(MergeTimelines, TakesClosedAndCutShortFilesIntoOneTrace) {
  const std::string dir = testing::MakeTempDir("merge");
  {
    auto t = TraceWriter::Open(dir + "/a.json", 1, "a");
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*t)->Complete("x", "c", 1, 10, 5).ok());
  }
  // A killed task's file: no closing bracket, its last line cut short.
  ASSERT_TRUE(
      WriteFileAtomic(dir + "/b.json",
                      "[\n{\"name\": \"y\", \"ph\": \"X\", \"pid\": 2, \"tid\": 1, \"ts\": 20, "
                      "\"dur\": 1, \"args\": {}}\n,{\"name\": \"z\", \"ph\"")
          .ok());
  ASSERT_TRUE(MergeTimelines({dir + "/a.json", dir + "/b.json"}, dir + "/all.json").ok());
  auto json = ParseJson(*ReadFileToString(dir + "/all.json"), "all.json");
  ASSERT_TRUE(json.ok()) << json.status();
  const auto& events = json->struct_value().fields().at("traceEvents").list_value().values();
  ASSERT_EQ(events.size(), 3u);  // a's name and span, b's whole span
  EXPECT_EQ(events[2].struct_value().fields().at("name").string_value(), "y");
  auto missing = MergeTimelines({dir + "/none.json"}, dir + "/x.json");
  EXPECT_TRUE(absl::IsNotFound(missing));
  EXPECT_THAT(std::string(missing.message()), HasSubstr("none.json"));
}

}  // namespace
}  // namespace pstrain

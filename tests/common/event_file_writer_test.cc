// EventFileWriter: TFRecord frames with valid masked CRCs around Events
// that parse with TensorFlow's field numbers; a file name as TensorFlow's;
// errors naming the file. (tests/integration/tensorboard_test.cc reads a
// real run's files with an independent reader.)

#include "common/event_file_writer.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tensorboard.pb.h"
#include "tests/test_util/process_runner.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// Little-endian integers of `bytes` bytes at `at`.
uint64_t LittleEndian(const std::string& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}
uint64_t U64(const std::string& b, size_t at) { return LittleEndian(b, at, 8); }
uint32_t U32(const std::string& b, size_t at) {
  return static_cast<uint32_t>(LittleEndian(b, at, 4));
}

// Splits a file into its records, checking every CRC.
std::vector<tensorboard::Event> ReadEvents(const std::string& path) {
  const std::string b = *ReadFileToString(path);
  std::vector<tensorboard::Event> events;
  size_t i = 0;
  while (i < b.size()) {
    EXPECT_LE(i + 12, b.size());
    const uint64_t n = U64(b, i);
    EXPECT_EQ(U32(b, i + 8), MaskCrc(Crc32c(b.substr(i, 8))));
    const std::string body = b.substr(i + 12, n);
    EXPECT_EQ(U32(b, i + 12 + n), MaskCrc(Crc32c(body)));
    tensorboard::Event e;
    EXPECT_TRUE(e.ParseFromString(body));
    events.push_back(e);
    i += 12 + n + 4;
  }
  return events;
}

TEST(EventFileWriter, WritesTheVersionThenOneScalarPerRecord) {
  const std::string dir = testing::MakeTempDir("tb") + "/worker0";
  std::string path;
  {
    auto w = EventFileWriter::Open(dir, "worker:0");
    ASSERT_TRUE(w.ok()) << w.status();
    path = (*w)->path();
    ASSERT_TRUE((*w)->AddScalar("train/loss", 7, 0.25, 1700000000.5).ok());
    ASSERT_TRUE((*w)->AddScalar("test/accuracy", 9, 0.9375).ok());
  }  // the destructor flushes
  EXPECT_THAT(path, MatchesRegex(
                        ".*/worker0/events\\.out\\.tfevents\\.[0-9]+\\.[A-Za-z0-9_.-]+\\.worker0"));
  const std::vector<tensorboard::Event> events = ReadEvents(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_GT(events[0].wall_time(), 1.7e9);
  EXPECT_EQ(events[1].step(), 7);
  EXPECT_EQ(events[1].wall_time(), 1700000000.5);
  ASSERT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 0.25f);
  EXPECT_EQ(events[2].summary().value(0).tag(), "test/accuracy");
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 0.9375f);
}

// Field numbers and wire types on the bytes, as TensorFlow's protos give
// them: Event.step = 2 (varint), Event.summary = 5, Value.tag = 1,
// Value.simple_value = 2 (fixed32).
TEST(EventFileWriter, UsesTensorFlowsFieldNumbers) {
  tensorboard::Event e;
  e.set_step(3);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag("a");
  v->set_simple_value(1.0f);
  const std::string bytes = e.SerializeAsString();
  // step: key (2 << 3 | 0) = 0x10, 3; summary: key (5 << 3 | 2) = 0x2A, length 10;
  // value: key 0x0A, length 8; tag: 0x0A 1 'a'; simple_value: 0x15 + 1.0f.
  const std::string expected("\x10\x03\x2A\x0A\x0A\x08\x0A\x01"
                             "a"
                             "\x15\x00\x00\x80\x3F",
                             14);
  EXPECT_EQ(bytes, expected);
}

TEST(EventFileWriter, TfRecordFrameHasTheLengthAndBothCrcs) {
  const std::string f = TfRecordFrame("abc");
  ASSERT_EQ(f.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(U64(f, 0), 3u);
  EXPECT_EQ(U32(f, 8), MaskCrc(Crc32c(f.substr(0, 8))));
  EXPECT_EQ(f.substr(12, 3), "abc");
  EXPECT_EQ(U32(f, 15), MaskCrc(Crc32c("abc")));
}

TEST(EventFileWriter, ADirectoryThatCannotBeMadeIsAnErrorNamingIt) {
  const std::string dir = testing::MakeTempDir("tb");
  ASSERT_TRUE(WriteFileAtomic(dir + "/file", "x").ok());
  auto w = EventFileWriter::Open(dir + "/file/sub", "worker0");
  EXPECT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()), HasSubstr(dir + "/file"));
}

}  // namespace
}  // namespace pstrain

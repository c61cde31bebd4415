// FramePool (transport/frame_pool.h): buffers handed out again once their
// frame is released, within its bounds, from any thread.

#include "transport/frame_pool.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(FramePool, HandsOutAReleasedFramesBufferAgain) {
  FramePool pool(1 << 20);
  FramePool::Buffer buffer = pool.Take(4096);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_GE(buffer.capacity(), 4096u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u);
  char* const data = buffer.data();
  std::memcpy(data, "abcd", 4);
  zmq::message_t frame = std::move(buffer).Frame(4);
  EXPECT_EQ(frame.to_string(), "abcd");
  EXPECT_EQ(frame.data(), data);
  EXPECT_EQ(pool.kept(), 0u);
  frame = zmq::message_t();  // released
  EXPECT_EQ(pool.kept(), 1u);
  FramePool::Buffer again = pool.Take(3000);  // fits, and is at least half of it
  EXPECT_EQ(again.data(), data);
  EXPECT_EQ(pool.kept(), 0u);
}

TEST(FramePool, ABufferDroppedUnusedReturnsAtOnce) {
  FramePool pool(1 << 20);
  char* data = nullptr;
  {
    FramePool::Buffer buffer = pool.Take(100);
    data = buffer.data();
  }
  EXPECT_EQ(pool.kept(), 1u);
  FramePool::Buffer moved_into;
  moved_into = pool.Take(100);
  EXPECT_EQ(moved_into.data(), data);
}

TEST(FramePool, NeverGivesALargeBufferToASmallFrameOrTooSmallOneToALargeFrame) {
  FramePool pool(1 << 20);
  char* large = nullptr;
  {
    FramePool::Buffer buffer = pool.Take(64 * 1024);
    large = buffer.data();
  }
  FramePool::Buffer small = pool.Take(1024);
  EXPECT_NE(small.data(), large);
  FramePool::Buffer larger = pool.Take(128 * 1024 + 64);
  EXPECT_NE(larger.data(), large);
  FramePool::Buffer half = pool.Take(32 * 1024);
  EXPECT_EQ(half.data(), large);
}

TEST(FramePool, KeepsAtMostItsCountAndItsBytes) {
  {
    FramePool pool(1 << 20);
    std::vector<FramePool::Buffer> buffers;
    for (size_t i = 0; i < FramePool::kKeep + 3; ++i) buffers.push_back(pool.Take(1024));
    buffers.clear();
    EXPECT_EQ(pool.kept(), FramePool::kKeep);
    EXPECT_EQ(pool.kept_bytes(), FramePool::kKeep * 1024);
  }
  FramePool pool(3000);
  std::vector<FramePool::Buffer> buffers;
  for (int i = 0; i < 3; ++i) buffers.push_back(pool.Take(1024));
  buffers.clear();
  EXPECT_EQ(pool.kept(), 2u);
  EXPECT_LE(pool.kept_bytes(), 3000u);
}

TEST(FramePool, AFrameOutlivesItsPool) {
  std::optional<zmq::message_t> frame;
  {
    FramePool pool(1 << 20);
    FramePool::Buffer buffer = pool.Take(8);
    std::memcpy(buffer.data(), "survives", 8);
    frame = std::move(buffer).Frame(8);
  }
  EXPECT_EQ(frame->to_string(), "survives");
  frame.reset();
}

TEST(FramePool, FramesReleasedOnOtherThreadsReturnToThePool) {
  FramePool pool(64 << 20);
  for (int round = 0; round < 50; ++round) {
    std::vector<zmq::message_t> frames;
    for (int i = 0; i < 3; ++i) {
      FramePool::Buffer buffer = pool.Take(1 << 16);
      std::memset(buffer.data(), round, 1 << 16);
      frames.push_back(std::move(buffer).Frame(1 << 16));
    }
    std::thread releaser([&frames] { frames.clear(); });
    FramePool::Buffer meanwhile = pool.Take(1 << 16);
    std::memset(meanwhile.data(), 0, 1 << 16);
    releaser.join();
  }
  EXPECT_LE(pool.kept(), FramePool::kKeep);
}

}  // namespace
}  // namespace pstrain

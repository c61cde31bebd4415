// ChunkPool: each job's chunks run exactly once each, on the caller or a
// helper, and Run returns only when all have; a job's results are visible
// to the caller after it, and a helper that wakes after its job ended takes
// nothing of the next.

#include "ps_server/chunk_pool.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

class ChunkPoolWithHelpers : public ::testing::TestWithParam<int> {};

TEST_P(ChunkPoolWithHelpers, RunsEveryChunkOfEveryJobOnce) {
  ChunkPool pool(GetParam());
  EXPECT_EQ(pool.helpers(), GetParam());
  // Many jobs in a row, of sizes 0 to 40: a helper late for one job must
  // not run a chunk of the next with the old job's function.
  for (int job = 0; job < 2000; ++job) {
    const int chunks = job % 41;
    std::vector<int> runs(static_cast<size_t>(chunks), 0);  // each written by one thread
    std::atomic<int> total{0};
    pool.Run(chunks, [&](int c) {
      ++runs[static_cast<size_t>(c)];
      total.fetch_add(job, std::memory_order_relaxed);
    });
    ASSERT_EQ(total.load(), job * chunks) << "job " << job;
    for (int c = 0; c < chunks; ++c)
      ASSERT_EQ(runs[static_cast<size_t>(c)], 1) << "job " << job << " chunk " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Helpers, ChunkPoolWithHelpers, ::testing::Values(0, 1, 3));

// Chunks that take a while: the helpers take some of them (on a busy
// machine they may take none; the caller then runs them all), and the
// caller waits for the ones they took.
TEST(ChunkPool, WaitsForTheChunksItsHelpersTook) {
  ChunkPool pool(2);
  for (int job = 0; job < 20; ++job) {
    std::vector<int> out(16, 0);
    std::mutex mu;
    std::set<std::thread::id> threads;
    pool.Run(16, [&](int c) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      out[static_cast<size_t>(c)] = c + 1;
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    });
    for (int c = 0; c < 16; ++c) ASSERT_EQ(out[static_cast<size_t>(c)], c + 1);
    EXPECT_LE(threads.size(), 3u);
  }
}

TEST(ChunkPool, WithoutHelpersRunsOnTheCaller) {
  ChunkPool pool(0);
  std::vector<std::thread::id> ran;
  pool.Run(5, [&](int) { ran.push_back(std::this_thread::get_id()); });
  ASSERT_EQ(ran.size(), 5u);
  for (const std::thread::id& id : ran) EXPECT_EQ(id, std::this_thread::get_id());
}

}  // namespace
}  // namespace pstrain

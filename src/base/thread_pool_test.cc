#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace koi {
namespace {

TEST(ThreadPoolTest, EveryThreadRunsOncePerJob) {
  ThreadPool pool(4);
  for (int round = 0; round < 1000; ++round) {
    std::vector<std::atomic<int>> hits(4);
    pool.run([&](int t, int nt) {
      ASSERT_EQ(nt, 4);
      hits[t].fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPoolTest, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 100, 1001}) {
    std::vector<int> seen(n, 0);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, PhysicalCoresIsPositive) { EXPECT_GE(ThreadPool::physical_cores(), 1); }

}  // namespace
}  // namespace koi

#include "base/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
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

TEST(ThreadPoolTest, ParallelForRangesDependOnlyOnNAndThreads) {
  // Which thread runs a range changes from call to call; the ranges themselves do not.
  ThreadPool pool(3);
  for (int64_t n : {5, 24, 1001}) {
    std::vector<std::pair<int64_t, int64_t>> first;
    for (int call = 0; call < 50; ++call) {
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(b, e);
      });
      std::sort(ranges.begin(), ranges.end());
      if (call == 0) {
        first = ranges;
        // Contiguous, non-empty, none longer than an equal split's; the last ones shorter.
        const int64_t longest = (n + 3 * ThreadPool::kRangesPerThread - 1) / (3 * ThreadPool::kRangesPerThread);
        std::vector<int64_t> ends;
        pool.range_ends(n, ends);
        ASSERT_EQ(ranges.size(), ends.size());
        for (size_t i = 0; i < ranges.size(); ++i) {
          EXPECT_EQ(ranges[i].first, i == 0 ? 0 : ranges[i - 1].second);
          EXPECT_EQ(ranges[i].second, ends[i]);
          EXPECT_GT(ranges[i].second, ranges[i].first);
          EXPECT_LE(ranges[i].second - ranges[i].first, longest);
        }
        EXPECT_EQ(ranges.back().second, n);
        EXPECT_EQ(ranges.back().second - ranges.back().first, 1) << "n=" << n << ": the last range tapers to one";
        if (n >= 1000) {
          EXPECT_LT(static_cast<int64_t>(ranges.size()), 3 * ThreadPool::kRangesPerThread + 32);
        }
      }
      ASSERT_EQ(ranges, first) << "n=" << n << " call " << call;
    }
  }
}

TEST(ThreadPoolTest, AStalledThreadLeavesItsShareToTheOthers) {
  // Range 0 does not finish until every other range has: with a static split the thread holding
  // it would hold others too and this would never return. Whichever thread takes it, the other
  // one claims all the rest.
  ThreadPool pool(2);
  for (int round = 0; round < 20; ++round) {
    constexpr int64_t kRanges = 2 * ThreadPool::kRangesPerThread;
    std::atomic<int64_t> done{0};
    pool.parallel_for(kRanges, [&](int64_t b, int64_t e) {
      if (b == 0) {
        while (done.load() != kRanges - 1) std::this_thread::yield();
      } else {
        done.fetch_add(e - b);
      }
    });
    ASSERT_EQ(done.load(), kRanges - 1);
  }
}

TEST(ThreadPoolTest, PhysicalCoresIsPositive) { EXPECT_GE(ThreadPool::physical_cores(), 1); }

// The CPUs the calling thread may run on.
std::vector<int> my_cpus() {
  cpu_set_t set;
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// Each thread's CPUs while it ran an item of `rounds` jobs in which every thread takes one (the
// items wait for each other, so none can take two).
std::map<std::thread::id, std::vector<int>> cpus_per_thread(ThreadPool& pool, int rounds) {
  std::mutex mu;
  std::map<std::thread::id, std::vector<int>> cpus;
  for (int round = 0; round < rounds; ++round) {
    std::atomic<int> arrived{0};
    pool.run([&](int, int n) {
      arrived.fetch_add(1);
      while (arrived.load() < n) std::this_thread::yield();
      std::lock_guard<std::mutex> lock(mu);
      cpus[std::this_thread::get_id()] = my_cpus();
    });
  }
  return cpus;
}

TEST(ThreadPoolTest, PinnedThreadsEachRunOnACpuOfTheirOwn) {
  const std::vector<int> before = my_cpus();
  if (before.size() < 2) GTEST_SKIP() << "pinning two threads needs two CPUs; this process may use " << before.size();
  {
    ThreadPool pool(2, ThreadPool::Placement::kPinned);
    const auto cpus = cpus_per_thread(pool, 20);
    ASSERT_EQ(cpus.size(), 2u);
    ASSERT_EQ(cpus.count(std::this_thread::get_id()), 1u);
    std::set<int> distinct;
    for (const auto& [thread, its] : cpus) {
      ASSERT_EQ(its.size(), 1u);
      distinct.insert(its[0]);
    }
    EXPECT_EQ(distinct.size(), 2u);
    EXPECT_EQ(my_cpus().size(), 1u);  // the caller stays on its CPU between jobs
    // A second pool with the same caller (a draft model's) takes the same two CPUs.
    ThreadPool second(2, ThreadPool::Placement::kPinned);
    std::set<int> second_cpus;
    for (const auto& [thread, its] : cpus_per_thread(second, 5)) {
      ASSERT_EQ(its.size(), 1u);
      second_cpus.insert(its[0]);
    }
    EXPECT_EQ(second_cpus, distinct);
  }
  EXPECT_EQ(my_cpus(), before);  // and may use all of them again once the pool is gone
}

TEST(ThreadPoolTest, PinningNeedsACpuPerThread) {
  // More threads than CPUs to give them: every thread keeps every CPU it had.
  const std::vector<int> before = my_cpus();
  ThreadPool pool(static_cast<int>(before.size()) + 1, ThreadPool::Placement::kPinned);
  const auto cpus = cpus_per_thread(pool, 1);
  ASSERT_EQ(cpus.size(), before.size() + 1);
  for (const auto& [thread, its] : cpus) EXPECT_EQ(its, before);
}

TEST(ThreadPoolTest, FloatingThreadsAreNotPinned) {
  const std::vector<int> before = my_cpus();
  ThreadPool pool(2);
  for (const auto& [thread, its] : cpus_per_thread(pool, 5)) EXPECT_EQ(its, before);
}

}  // namespace
}  // namespace koi

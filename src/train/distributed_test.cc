// Data parallelism without MPI: the local communicator, bucketing, ZeRO-1's sharded AdamW
// against the plain one, the straggler detector, the watchdog, the supervisor's command.
// The MPI runs themselves are tests/train_mpi*.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "base/clock.h"
#include "train/collectives.h"
#include "train/data_parallel.h"
#include "train/supervisor.h"
#include "train/watchdog.h"

namespace koi::train {
namespace {

// Rank `rank` of `size`, alone: records every collective; allreduce doubles the data (as if
// one other rank held the same values); allgather and broadcast leave the data as it is.
class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_step(int64_t) override {}
  Status allreduce_sum(float* data, int64_t n, std::string_view what) override {
    calls.push_back(std::string(what) + " n=" + std::to_string(n));
    for (int64_t i = 0; i < n; ++i) data[i] *= 2;
    return ok_status();
  }
  Status allreduce_sum(double*, int64_t, std::string_view) override { return ok_status(); }
  Status allgather(float*, const std::vector<int64_t>& counts, std::string_view what) override {
    std::string c;
    for (int64_t n : counts) c += " " + std::to_string(n);
    calls.push_back(std::string(what) + c);
    return ok_status();
  }
  // Part rank of twice `in` (as if one other rank held the same values).
  Status reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                            std::string_view what) override {
    int64_t offset = 0;
    for (int r = 0; r < rank_; ++r) offset += counts[r];
    for (int64_t i = 0; i < counts[rank_]; ++i) out[i] = 2 * in[offset + i];
    calls.push_back(std::string(what) + " n=" + std::to_string(counts[rank_]));
    return ok_status();
  }
  Status broadcast(void*, int64_t, int, std::string_view) override { return ok_status(); }
  Status barrier(std::string_view) override { return ok_status(); }
  Result<std::unique_ptr<Communicator>> split(int, int) override {
    return Status::unsupported("RecordingCommunicator does not split");
  }
  Status alltoallv(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&,
                   std::string_view) override {
    return ok_status();
  }
  Status send(const float*, int64_t, int, std::string_view) override { return ok_status(); }
  Status recv(float*, int64_t, int, std::string_view) override { return ok_status(); }
  [[noreturn]] void abort(int) override { std::abort(); }

  std::vector<std::string> calls;

 private:
  int rank_, size_;
};

TEST(LocalCommunicator, IsOneRankAndLeavesDataAlone) {
  LocalCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  std::vector<float> f{1.5f, -2.0f};
  std::vector<double> d{3.0};
  EXPECT_TRUE(comm.allreduce_sum(f.data(), 2, "x").ok());
  EXPECT_TRUE(comm.allreduce_sum(d.data(), 1, "x").ok());
  EXPECT_TRUE(comm.allgather(f.data(), {2}, "x").ok());
  EXPECT_TRUE(comm.broadcast(d.data(), sizeof(double), 0, "x").ok());
  EXPECT_TRUE(comm.barrier("x").ok());
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(d, (std::vector<double>{3.0}));
}

TEST(CreateCommunicator, IsLocalOutsideMpirun) {
  ASSERT_FALSE(launched_by_mpirun());
  auto comm = create_communicator(5.0);
  ASSERT_TRUE(comm.ok());
  EXPECT_EQ((*comm)->size(), 1);
}

TEST(SplitRange, CoversEverythingInNearlyEqualParts) {
  EXPECT_EQ(split_range(10, 3, 0).begin, 0);
  EXPECT_EQ(split_range(10, 3, 0).end, 4);
  EXPECT_EQ(split_range(10, 3, 1).begin, 4);
  EXPECT_EQ(split_range(10, 3, 1).end, 7);
  EXPECT_EQ(split_range(10, 3, 2).begin, 7);
  EXPECT_EQ(split_range(10, 3, 2).end, 10);
  EXPECT_EQ(split_range(2, 3, 2).size(), 0);
}

TEST(AllreduceGrads, SendsBucketsInOrderAndNamesThem) {
  RecordingCommunicator comm(0, 2);
  std::vector<float> grads(10, 1.0f);
  ASSERT_TRUE(allreduce_grads(comm, grads, 4).ok());
  EXPECT_EQ(comm.calls, (std::vector<std::string>{"allreduce grads bucket 0 n=4", "allreduce grads bucket 1 n=4",
                                                  "allreduce grads bucket 2 n=2"}));
  EXPECT_EQ(grads, std::vector<float>(10, 2.0f));
}

TEST(AllreduceGrads, IsANoOpOnOneRank) {
  RecordingCommunicator comm(0, 1);
  std::vector<float> grads(10, 1.0f);
  ASSERT_TRUE(allreduce_grads(comm, grads, 4).ok());
  EXPECT_TRUE(comm.calls.empty());
}

std::vector<ParamTensor> test_layout() {
  // 3 + 4 + 6 = 13 floats; shards of 3 ranks are [0,5) [5,9) [9,13) and cut every tensor
  return {{"a", {3}, 0, 3, true}, {"norm", {4}, 3, 4, false}, {"b", {2, 3}, 7, 6, true}};
}

std::vector<float> random_vector(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Three ZeRO-1 ranks, each updating its shard (their allgather is done by hand here), give
// bitwise the parameters and the optimizer state of one plain AdamW, step after step.
TEST(DistributedAdamW, ZeroOneShardsMatchPlainAdamWBitwise) {
  const std::vector<ParamTensor> layout = test_layout();
  const AdamWConfig config{.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  constexpr int kRanks = 3;
  std::vector<RecordingCommunicator> comms;
  for (int r = 0; r < kRanks; ++r) comms.emplace_back(r, kRanks);
  std::vector<DistributedAdamW> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.emplace_back(&comms[r], config, layout, 1);
  AdamW plain(config, 13);
  std::vector<float> params = random_vector(13, 1), expected = params;
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> grads = random_vector(13, 100 + step);
    const float lr = 0.01f * static_cast<float>(step + 1);
    plain.step(expected, grads, layout, lr);
    std::vector<float> gathered(13);
    for (int r = 0; r < kRanks; ++r) {
      std::vector<float> mine = params;
      ASSERT_TRUE(ranks[r].step(mine, grads, lr).ok());
      const Range shard = split_range(13, kRanks, r);
      std::copy(mine.begin() + shard.begin, mine.begin() + shard.end, gathered.begin() + shard.begin);
    }
    params = gathered;
    ASSERT_EQ(0, std::memcmp(params.data(), expected.data(), 13 * sizeof(float))) << "step " << step;
  }
  EXPECT_EQ(comms[1].calls.back(), "allgather params 5 4 4");

  // The gathered optimizer state is the plain one; loading it back shards it again.
  std::vector<float> m(13), v(13);
  for (int r = 0; r < kRanks; ++r) {
    const Range shard = split_range(13, kRanks, r);
    ASSERT_TRUE(ranks[r]
                    .with_full_state([&](AdamW& full) {
                      EXPECT_EQ(full.steps(), 4);
                      std::copy(full.m().begin() + shard.begin, full.m().begin() + shard.end, m.begin() + shard.begin);
                      std::copy(full.v().begin() + shard.begin, full.v().begin() + shard.end, v.begin() + shard.begin);
                      return ok_status();
                    })
                    .ok());
  }
  EXPECT_EQ(m, plain.m());
  EXPECT_EQ(v, plain.v());
  EXPECT_EQ(comms[2].calls.back(), "allgather adam v 5 4 4");

  RecordingCommunicator solo(0, 1);
  DistributedAdamW reloaded(&solo, config, layout, 0);
  reloaded.load_full_state(plain);
  const std::vector<float> grads = random_vector(13, 7);
  std::vector<float> a = params, b = params;
  plain.step(a, grads, layout, 0.02f);
  ASSERT_TRUE(reloaded.step(b, grads, 0.02f).ok());
  EXPECT_EQ(a, b);
  EXPECT_TRUE(solo.calls.empty());  // plain data parallel never gathers
}

TEST(StragglerDetector, FlagsARankSlowForFiveStepsInARowOnce) {
  StragglerDetector d(3);
  const std::vector<double> slow{10.0, 10.5, 16.0};  // 16 > 1.5 x 10.5
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(d.observe(slow).empty());
  EXPECT_EQ(d.observe(slow), std::vector<int>{2});
  EXPECT_TRUE(d.observe(slow).empty());  // reported once per streak
  EXPECT_TRUE(d.observe({10.0, 10.0, 15.0}).empty());  // 15 is not above 1.5 x 10: the streak ends
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(d.observe(slow).empty());
  EXPECT_EQ(d.observe(slow), std::vector<int>{2});
}

TEST(StragglerDetector, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_EQ(StragglerDetector::median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(StragglerDetector::median({5.0, 1.0, 3.0}), 3.0);
  StragglerDetector two(2);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(two.observe({10.0, 31.0}).empty());
  EXPECT_EQ(two.observe({10.0, 31.0}), std::vector<int>{1});  // 31 > 1.5 x 20.5
}

TEST(Watchdog, ReportsTheCollectiveOnlyPastTheTimeout) {
  FakeClock clock;
  Watchdog w(1, 5.0, &clock);
  EXPECT_FALSE(w.overdue().has_value());
  w.begin("allreduce grads bucket 3", 7);
  clock.advance_ns(4'900'000'000);
  EXPECT_FALSE(w.overdue().has_value());
  clock.advance_ns(200'000'000);
  ASSERT_TRUE(w.overdue().has_value());
  EXPECT_EQ(*w.overdue(),
            "watchdog: rank 1 step 7: collective 'allreduce grads bucket 3' did not complete within 5 s");
  EXPECT_FALSE(w.overdue(1.0).has_value());  // the backstop's extra second has not passed
  w.end();
  EXPECT_FALSE(w.overdue().has_value());
  w.begin("barrier", 8);  // each collective gets its own deadline
  EXPECT_FALSE(w.overdue().has_value());
}

TEST(Watchdog, ThreadFiresOnceForACollectiveThatHangs) {
  Watchdog w(0, 0.05, &SystemClock::instance());
  std::promise<std::string> fired;
  int calls = 0;
  w.start_thread(0.05, [&](const std::string& m) {
    if (calls++ == 0) fired.set_value(m);
  }, 0.01);
  w.begin("allgather params", 3);
  auto future = fired.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(future.get(),
            "watchdog: rank 0 step 3: collective 'allgather params' did not complete within 0.05 s; a peer rank is "
            "not responding");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(calls, 1);
}

TEST(Watchdog, ThreadStaysQuietWhenCollectivesComplete) {
  Watchdog w(0, 0.5, &SystemClock::instance());
  std::atomic<int> calls{0};
  w.start_thread(0.0, [&](const std::string&) { ++calls; }, 0.01);
  for (int i = 0; i < 10; ++i) {
    w.begin("allreduce loss and step times", i);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    w.end();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(calls.load(), 0);
}

TEST(Supervisor, MpirunCommandDropsItsOwnFlagsAndAddsResume) {
  const std::vector<std::string> argv = {"/usr/bin/koi", "train", "--nproc", "2", "--config", "r.yaml",
                                         "--max-restarts=3", "--zero", "1"};
  std::vector<std::string> cmd = mpirun_command(argv, 2, true);
  const std::vector<std::string> tail(cmd.end() - 7, cmd.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"/usr/bin/koi", "train", "--config", "r.yaml", "--zero", "1", "--resume"}));
  EXPECT_EQ(cmd[0], "mpirun");
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "--bind-to"), cmd.end());
  const auto np = std::find(cmd.begin(), cmd.end(), "-np");
  ASSERT_NE(np, cmd.end());
  EXPECT_EQ(*(np + 1), "2");
  cmd = mpirun_command({"/usr/bin/koi", "train", "--resume", "--nproc", "4"}, 4, true);
  EXPECT_EQ(std::count(cmd.begin(), cmd.end(), "--resume"), 1);
  EXPECT_EQ(cmd.back(), "--resume");
  cmd = mpirun_command({"/usr/bin/koi", "train", "--nproc", "4"}, 4, false);
  EXPECT_EQ(cmd.back(), "train");
}

TEST(Supervisor, OwnCommandLineStartsWithTheExecutable) {
  auto argv = own_command_line();
  ASSERT_TRUE(argv.ok());
  EXPECT_NE((*argv)[0].find("koi_train_test"), std::string::npos);
}

}  // namespace
}  // namespace koi::train

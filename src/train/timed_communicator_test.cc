#include "train/timed_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace koi::train {
namespace {

// A communicator whose allreduce takes 20 ms (a slow network) and doubles the data, so that
// forwarding is visible.
class SlowCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void set_step(int64_t step) override { step_ = step; }
  Status allreduce_sum(float* data, int64_t n, std::string_view) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int64_t i = 0; i < n; ++i) data[i] *= 2;
    return ok_status();
  }
  Status allreduce_sum(double*, int64_t, std::string_view) override { return Status::unavailable("peer gone"); }
  Status allgather(float*, const std::vector<int64_t>&, std::string_view) override { return ok_status(); }
  Status reduce_scatter_sum(const float*, float*, const std::vector<int64_t>&, std::string_view) override {
    return ok_status();
  }
  Status broadcast(void*, int64_t, int, std::string_view) override { return ok_status(); }
  Status barrier(std::string_view) override { return ok_status(); }
  Result<std::unique_ptr<Communicator>> split(int, int) override {
    return std::unique_ptr<Communicator>(new SlowCommunicator());
  }
  Status alltoallv(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&,
                   std::string_view) override {
    return ok_status();
  }
  Status send(const float*, int64_t, int, std::string_view) override { return ok_status(); }
  Status recv(float*, int64_t, int, std::string_view) override { return ok_status(); }
  [[noreturn]] void abort(int) override { std::abort(); }
  int64_t step_ = 0;
};

TEST(TimedCommunicator, ForwardsAndAddsTimeAndCallsPerKind) {
  metrics::Registry registry;
  TrainMetrics m(registry);
  SlowCommunicator slow;
  TimedCommunicator timed(slow, m);
  EXPECT_EQ(timed.size(), 2);
  timed.set_step(7);
  EXPECT_EQ(slow.step_, 7);
  float x[2] = {1, 2};
  ASSERT_TRUE(timed.allreduce_sum(x, 2, "allreduce grads bucket 0").ok());
  ASSERT_TRUE(timed.allreduce_sum(x, 2, "allreduce grads bucket 1").ok());
  EXPECT_EQ(x[1], 8.0f);
  double d = 1;
  EXPECT_EQ(timed.allreduce_sum(&d, 1, "allreduce loss").code(), StatusCode::kUnavailable);  // errors pass through
  ASSERT_TRUE(timed.barrier("barrier").ok());
  EXPECT_EQ(registry.value("koi_train_collectives_total", {{"collective", "allreduce"}}), 3);
  EXPECT_EQ(registry.value("koi_train_collectives_total", {{"collective", "barrier"}}), 1);
  EXPECT_EQ(registry.value("koi_train_collectives_total", {{"collective", "allgather"}}), 0);
  EXPECT_GE(registry.value("koi_train_collective_seconds_total", {{"collective", "allreduce"}}), 0.040);
  // Bytes of the full buffers: 2 x 2 floats and a double; a reduce-scatter counts its input,
  // started or not.
  EXPECT_EQ(registry.value("koi_train_collective_bytes_total", {{"collective", "allreduce"}}), 24);
  const float in[4] = {1, 2, 3, 4};
  float out[2];
  ASSERT_TRUE(timed.reduce_scatter_sum(in, out, {2, 2}, "rs").ok());
  ASSERT_TRUE(timed.wait(timed.start_reduce_scatter_sum(in, out, {2, 2}, "rs")).ok());
  EXPECT_EQ(registry.value("koi_train_collective_bytes_total", {{"collective", "reduce_scatter"}}), 32);
  EXPECT_EQ(registry.value("koi_train_collectives_total", {{"collective", "reduce_scatter"}}), 2);
  EXPECT_EQ(m.collective_bytes_total(), 56);
  // A split communicator reports into the same metrics and the same bytes() total.
  Result<std::unique_ptr<Communicator>> sub = timed.split(0, 0);
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE((*sub)->allreduce_sum(x, 2, "tp allreduce").ok());
  EXPECT_EQ(registry.value("koi_train_collectives_total", {{"collective", "allreduce"}}), 4);
  EXPECT_EQ(registry.value("koi_train_collective_bytes_total", {{"collective", "allreduce"}}), 32);
  EXPECT_EQ(m.collective_bytes_total(), 64);  // every kind, the split one's too
  // Every kind is exported from the start, at zero.
  EXPECT_NE(registry.render().find("koi_train_collective_seconds_total{collective=\"broadcast\"} 0"), std::string::npos);
}

}  // namespace
}  // namespace koi::train

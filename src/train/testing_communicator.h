// RefusingCommunicator: the base of the Communicator test doubles in src/train's unit tests.
// Rank `rank` of `size`; every collective and point-to-point call fails with Unsupported
// naming the call (`abort` throws std::logic_error), so a test overrides exactly the calls the
// code under test is expected to make and any other call fails the test with its name.
// set_step only names a hang in the real communicators and is accepted. Not thread-safe, like
// every Communicator; owns nothing. The real multi-rank runs are tests/train_mpi_*.sh.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "train/collectives.h"

namespace koi::train {

class RefusingCommunicator : public Communicator {
 public:
  RefusingCommunicator(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_step(int64_t) override {}
  Status allreduce_sum(float*, int64_t, std::string_view what) override { return refuse("allreduce_sum(float)", what); }
  Status allreduce_sum(double*, int64_t, std::string_view what) override {
    return refuse("allreduce_sum(double)", what);
  }
  Status allgather(float*, const std::vector<int64_t>&, std::string_view what) override {
    return refuse("allgather", what);
  }
  Status reduce_scatter_sum(const float*, float*, const std::vector<int64_t>&, std::string_view what) override {
    return refuse("reduce_scatter_sum", what);
  }
  Status broadcast(void*, int64_t, int, std::string_view what) override { return refuse("broadcast", what); }
  Status barrier(std::string_view what) override { return refuse("barrier", what); }
  Result<std::unique_ptr<Communicator>> split(int, int) override { return refuse("split", ""); }
  Status alltoallv(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&,
                   std::string_view what) override {
    return refuse("alltoallv", what);
  }
  Status send(const float*, int64_t, int, std::string_view what) override { return refuse("send", what); }
  Status recv(float*, int64_t, int, std::string_view what) override { return refuse("recv", what); }
  [[noreturn]] void abort(int exit_code) override {
    throw std::logic_error("RefusingCommunicator: abort(" + std::to_string(exit_code) + ") in a unit test");
  }

 protected:
  static Status refuse(std::string_view call, std::string_view what) {
    return Status::unsupported("RefusingCommunicator: " + std::string(call) + " '" + std::string(what) +
                               "' is not expected in this test");
  }

 private:
  int rank_, size_;
};

}  // namespace koi::train

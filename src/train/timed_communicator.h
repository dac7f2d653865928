// TimedCommunicator: a Communicator that forwards every collective to another and adds its
// wall time to TrainMetrics' koi_train_collective_seconds_total{collective} and one to
// koi_train_collectives_total{collective}, collective being the kind (allreduce, allgather,
// broadcast, barrier, alltoall, send, recv; the per-call names such as "allreduce grads
// bucket 3" would make a series per bucket). Not thread-safe, like every Communicator.
#pragma once

#include <chrono>

#include "train/collectives.h"
#include "train/train_metrics.h"

namespace koi::train {

class TimedCommunicator final : public Communicator {
 public:
  // inner and metrics must outlive this.
  TimedCommunicator(Communicator& inner, TrainMetrics& metrics);

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void set_step(int64_t step) override { inner_.set_step(step); }
  Status allreduce_sum(float* data, int64_t n, std::string_view what) override;
  Status allreduce_sum(double* data, int64_t n, std::string_view what) override;
  Status allgather(float* data, const std::vector<int64_t>& counts, std::string_view what) override;
  Status broadcast(void* data, int64_t bytes, int root, std::string_view what) override;
  Status barrier(std::string_view what) override;
  Status alltoallv(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                   const std::vector<int64_t>& recv_counts, std::string_view what) override;
  Status send(const float* data, int64_t n, int dest, std::string_view what) override;
  Status recv(float* data, int64_t n, int src, std::string_view what) override;
  [[noreturn]] void abort(int exit_code) override {
    inner_.abort(exit_code);
    __builtin_unreachable();  // inner_.abort does not return
  }

 private:
  struct Kind {
    metrics::Counter* seconds;
    metrics::Counter* calls;
  };
  template <typename F>
  Status timed(const Kind& k, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = f();
    k.seconds->inc(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    k.calls->inc();
    return s;
  }

  Communicator& inner_;
  Kind allreduce_, allgather_, broadcast_, barrier_, alltoall_, send_, recv_;
};

}  // namespace koi::train

// TimedCommunicator: a Communicator that forwards every collective to another and adds its
// wall time to TrainMetrics' koi_train_collective_seconds_total{collective} and one to
// koi_train_collectives_total{collective}, collective being the kind (allreduce, allgather,
// reduce_scatter, broadcast, barrier, alltoall, send, recv; the per-call names such as "allreduce grads bucket 3"
// would make a series per bucket), and the bytes this rank handed to it to
// koi_train_collective_bytes_total{collective} (the payload: an allreduce of n floats counts
// 4n, an allgather or reduce-scatter the whole buffer; also summed in bytes(), which the
// trainer logs per step as TrainMetrics::collective_bytes_total()). A non-blocking collective
// counts at its start and its time is the time wait() blocked. split() returns a
// TimedCommunicator over the split one, on the same metrics (so the total counts every process
// group of the device mesh). Not thread-safe, like every Communicator.
#pragma once

#include <chrono>
#include <map>
#include <memory>

#include "train/collectives.h"
#include "train/train_metrics.h"

namespace koi::train {

class TimedCommunicator final : public Communicator {
 public:
  // inner and metrics must outlive this.
  TimedCommunicator(Communicator& inner, TrainMetrics& metrics);
  // Owns inner (a split communicator).
  TimedCommunicator(std::unique_ptr<Communicator> inner, TrainMetrics& metrics);

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void set_step(int64_t step) override { inner_.set_step(step); }
  Status allreduce_sum(float* data, int64_t n, std::string_view what) override;
  Status allreduce_sum(double* data, int64_t n, std::string_view what) override;
  Status allgather(float* data, const std::vector<int64_t>& counts, std::string_view what) override;
  Status reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                            std::string_view what) override;
  int64_t start_allgather(float* data, const std::vector<int64_t>& counts, std::string what) override;
  int64_t start_reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                                   std::string what) override;
  int64_t start_allreduce_sum(float* data, int64_t n, std::string what) override;
  Status wait(int64_t ticket) override;
  void progress() override { inner_.progress(); }
  Status broadcast(void* data, int64_t bytes, int root, std::string_view what) override;
  Status barrier(std::string_view what) override;
  Result<std::unique_ptr<Communicator>> split(int color, int key) override;
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
    metrics::Counter* bytes;
  };
  static Kind make_kind(TrainMetrics& metrics, const char* name);
  static void count(const Kind& k, double bytes) {
    k.calls->inc();
    k.bytes->inc(bytes);
  }
  template <typename F>
  Status timed(const Kind& k, double bytes, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = f();
    k.seconds->inc(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    count(k, bytes);
    return s;
  }
  static double sum_bytes(const std::vector<int64_t>& counts);

  std::unique_ptr<Communicator> owned_;  // a split communicator; inner_ refers to it
  Communicator& inner_;
  TrainMetrics& metrics_;
  Kind allreduce_, allgather_, reduce_scatter_, broadcast_, barrier_, alltoall_, send_, recv_;
  std::map<int64_t, const Kind*> started_;  // non-blocking collectives in flight, by ticket
};

}  // namespace koi::train

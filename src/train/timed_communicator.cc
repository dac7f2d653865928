#include "train/timed_communicator.h"

#include <numeric>

namespace koi::train {

TimedCommunicator::Kind TimedCommunicator::make_kind(TrainMetrics& m, const char* name) {
  return {&m.collective_seconds.labels({name}), &m.collectives.labels({name}), &m.collective_bytes.labels({name})};
}

TimedCommunicator::TimedCommunicator(Communicator& inner, TrainMetrics& metrics)
    : inner_(inner),
      metrics_(metrics),
      allreduce_(make_kind(metrics, "allreduce")),
      allgather_(make_kind(metrics, "allgather")),
      reduce_scatter_(make_kind(metrics, "reduce_scatter")),
      broadcast_(make_kind(metrics, "broadcast")),
      barrier_(make_kind(metrics, "barrier")),
      alltoall_(make_kind(metrics, "alltoall")),
      send_(make_kind(metrics, "send")),
      recv_(make_kind(metrics, "recv")) {}

TimedCommunicator::TimedCommunicator(std::unique_ptr<Communicator> inner, TrainMetrics& metrics)
    : TimedCommunicator(*inner, metrics) {
  owned_ = std::move(inner);
}

double TimedCommunicator::sum_bytes(const std::vector<int64_t>& counts) {
  return static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0})) * sizeof(float);
}

Status TimedCommunicator::allreduce_sum(float* data, int64_t n, std::string_view what) {
  return timed(allreduce_, static_cast<double>(n) * sizeof(float), [&] { return inner_.allreduce_sum(data, n, what); });
}

Status TimedCommunicator::allreduce_sum(double* data, int64_t n, std::string_view what) {
  return timed(allreduce_, static_cast<double>(n) * sizeof(double),
               [&] { return inner_.allreduce_sum(data, n, what); });
}

Status TimedCommunicator::allgather(float* data, const std::vector<int64_t>& counts, std::string_view what) {
  return timed(allgather_, sum_bytes(counts), [&] { return inner_.allgather(data, counts, what); });
}

Status TimedCommunicator::reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                                             std::string_view what) {
  return timed(reduce_scatter_, sum_bytes(counts), [&] { return inner_.reduce_scatter_sum(in, out, counts, what); });
}

int64_t TimedCommunicator::start_allgather(float* data, const std::vector<int64_t>& counts, std::string what) {
  count(allgather_, sum_bytes(counts));
  const int64_t ticket = inner_.start_allgather(data, counts, std::move(what));
  started_[ticket] = &allgather_;
  return ticket;
}

int64_t TimedCommunicator::start_reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                                                    std::string what) {
  count(reduce_scatter_, sum_bytes(counts));
  const int64_t ticket = inner_.start_reduce_scatter_sum(in, out, counts, std::move(what));
  started_[ticket] = &reduce_scatter_;
  return ticket;
}

int64_t TimedCommunicator::start_allreduce_sum(float* data, int64_t n, std::string what) {
  count(allreduce_, static_cast<double>(n) * sizeof(float));
  const int64_t ticket = inner_.start_allreduce_sum(data, n, std::move(what));
  started_[ticket] = &allreduce_;
  return ticket;
}

Status TimedCommunicator::wait(int64_t ticket) {
  const Kind* k = started_.at(ticket);
  started_.erase(ticket);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = inner_.wait(ticket);
  k->seconds->inc(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return s;
}

Status TimedCommunicator::broadcast(void* data, int64_t bytes, int root, std::string_view what) {
  return timed(broadcast_, static_cast<double>(bytes), [&] { return inner_.broadcast(data, bytes, root, what); });
}

Status TimedCommunicator::barrier(std::string_view what) {
  return timed(barrier_, 0.0, [&] { return inner_.barrier(what); });
}

Result<std::unique_ptr<Communicator>> TimedCommunicator::split(int color, int key) {
  KOI_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, inner_.split(color, key));
  return std::unique_ptr<Communicator>(new TimedCommunicator(std::move(sub), metrics_));
}

Status TimedCommunicator::alltoallv(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                                    const std::vector<int64_t>& recv_counts, std::string_view what) {
  return timed(alltoall_, sum_bytes(send_counts), [&] { return inner_.alltoallv(send, send_counts, recv, recv_counts, what); });
}

Status TimedCommunicator::send(const float* data, int64_t n, int dest, std::string_view what) {
  return timed(send_, static_cast<double>(n) * sizeof(float), [&] { return inner_.send(data, n, dest, what); });
}

Status TimedCommunicator::recv(float* data, int64_t n, int src, std::string_view what) {
  return timed(recv_, static_cast<double>(n) * sizeof(float), [&] { return inner_.recv(data, n, src, what); });
}

}  // namespace koi::train

#include "train/timed_communicator.h"

namespace koi::train {

TimedCommunicator::TimedCommunicator(Communicator& inner, TrainMetrics& metrics)
    : inner_(inner),
      allreduce_{&metrics.collective_seconds.labels({"allreduce"}), &metrics.collectives.labels({"allreduce"})},
      allgather_{&metrics.collective_seconds.labels({"allgather"}), &metrics.collectives.labels({"allgather"})},
      broadcast_{&metrics.collective_seconds.labels({"broadcast"}), &metrics.collectives.labels({"broadcast"})},
      barrier_{&metrics.collective_seconds.labels({"barrier"}), &metrics.collectives.labels({"barrier"})},
      alltoall_{&metrics.collective_seconds.labels({"alltoall"}), &metrics.collectives.labels({"alltoall"})},
      send_{&metrics.collective_seconds.labels({"send"}), &metrics.collectives.labels({"send"})},
      recv_{&metrics.collective_seconds.labels({"recv"}), &metrics.collectives.labels({"recv"})} {}

Status TimedCommunicator::allreduce_sum(float* data, int64_t n, std::string_view what) {
  return timed(allreduce_, [&] { return inner_.allreduce_sum(data, n, what); });
}

Status TimedCommunicator::allreduce_sum(double* data, int64_t n, std::string_view what) {
  return timed(allreduce_, [&] { return inner_.allreduce_sum(data, n, what); });
}

Status TimedCommunicator::allgather(float* data, const std::vector<int64_t>& counts, std::string_view what) {
  return timed(allgather_, [&] { return inner_.allgather(data, counts, what); });
}

Status TimedCommunicator::broadcast(void* data, int64_t bytes, int root, std::string_view what) {
  return timed(broadcast_, [&] { return inner_.broadcast(data, bytes, root, what); });
}

Status TimedCommunicator::barrier(std::string_view what) {
  return timed(barrier_, [&] { return inner_.barrier(what); });
}

Status TimedCommunicator::alltoallv(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                                    const std::vector<int64_t>& recv_counts, std::string_view what) {
  return timed(alltoall_, [&] { return inner_.alltoallv(send, send_counts, recv, recv_counts, what); });
}

Status TimedCommunicator::send(const float* data, int64_t n, int dest, std::string_view what) {
  return timed(send_, [&] { return inner_.send(data, n, dest, what); });
}

Status TimedCommunicator::recv(float* data, int64_t n, int src, std::string_view what) {
  return timed(recv_, [&] { return inner_.recv(data, n, src, what); });
}

}  // namespace koi::train

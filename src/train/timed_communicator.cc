#include "train/timed_communicator.h"

namespace koi::train {

TimedCommunicator::Kind TimedCommunicator::make_kind(TrainMetrics& m, const char* name) {
  return {&m.collective_seconds.labels({name}), &m.collectives.labels({name}), &m.collective_bytes.labels({name})};
}

TimedCommunicator::TimedCommunicator(Communicator& inner, TrainMetrics& metrics)
    : inner_(inner),
      metrics_(metrics),
      allreduce_(make_kind(metrics, "allreduce")),
      allgather_(make_kind(metrics, "allgather")),
      broadcast_(make_kind(metrics, "broadcast")),
      barrier_(make_kind(metrics, "barrier")) {}

TimedCommunicator::TimedCommunicator(std::unique_ptr<Communicator> inner, TrainMetrics& metrics)
    : TimedCommunicator(*inner, metrics) {
  owned_ = std::move(inner);
}

Status TimedCommunicator::allreduce_sum(float* data, int64_t n, std::string_view what) {
  return timed(allreduce_, n * int64_t{sizeof(float)}, [&] { return inner_.allreduce_sum(data, n, what); });
}

Status TimedCommunicator::allreduce_sum(double* data, int64_t n, std::string_view what) {
  return timed(allreduce_, n * int64_t{sizeof(double)}, [&] { return inner_.allreduce_sum(data, n, what); });
}

Status TimedCommunicator::allgather(float* data, const std::vector<int64_t>& counts, std::string_view what) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  return timed(allgather_, n * int64_t{sizeof(float)}, [&] { return inner_.allgather(data, counts, what); });
}

Status TimedCommunicator::broadcast(void* data, int64_t bytes, int root, std::string_view what) {
  return timed(broadcast_, bytes, [&] { return inner_.broadcast(data, bytes, root, what); });
}

Status TimedCommunicator::barrier(std::string_view what) {
  return timed(barrier_, 0, [&] { return inner_.barrier(what); });
}

Result<std::unique_ptr<Communicator>> TimedCommunicator::split(int color, int key) {
  KOI_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, inner_.split(color, key));
  return std::unique_ptr<Communicator>(new TimedCommunicator(std::move(sub), metrics_));
}

}  // namespace koi::train

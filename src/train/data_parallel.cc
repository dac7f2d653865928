#include "train/data_parallel.h"

#include <algorithm>
#include <string>

#include "base/check.h"

namespace koi::train {

std::vector<ParamTensor> clip_layout(const std::vector<ParamTensor>& layout, Range r) {
  std::vector<ParamTensor> out;
  for (const ParamTensor& t : layout) {
    const int64_t begin = std::max(t.offset, r.begin), end = std::min(t.offset + t.size, r.end);
    if (begin < end) out.push_back({t.name, t.shape, begin - r.begin, end - begin, t.decay});
  }
  return out;
}

Range split_range(int64_t n, int parts, int part) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = part * base + std::min<int64_t>(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

Status allreduce_grads(Communicator& comm, std::vector<float>& grads, int64_t bucket_floats) {
  KOI_CHECK(bucket_floats > 0);
  if (comm.size() == 1) return ok_status();
  const int64_t n = static_cast<int64_t>(grads.size());
  for (int64_t offset = 0, bucket = 0; offset < n; offset += bucket_floats, ++bucket) {
    KOI_RETURN_IF_ERROR(comm.allreduce_sum(grads.data() + offset, std::min(bucket_floats, n - offset),
                                           "allreduce grads bucket " + std::to_string(bucket)));
  }
  return ok_status();
}

DistributedAdamW::DistributedAdamW(Communicator* comm, AdamWConfig config, const std::vector<ParamTensor>& layout,
                                   int zero_stage)
    : comm_(comm),
      config_(config),
      zero_stage_(zero_stage),
      num_params_(layout.empty() ? 0 : layout.back().offset + layout.back().size),
      shard_(zero_stage == 1 ? split_range(num_params_, comm->size(), comm->rank()) : Range{0, num_params_}),
      opt_(config, shard_.size()) {
  KOI_CHECK(zero_stage == 0 || zero_stage == 1);
  layout_ = clip_layout(layout, shard_);
  for (int r = 0; r < comm->size(); ++r) shard_sizes_.push_back(split_range(num_params_, comm->size(), r).size());
}

Status DistributedAdamW::step(std::vector<float>& params, const std::vector<float>& grads, float lr, ThreadPool* pool) {
  if (zero_stage_ == 0) {
    opt_.step(params, grads, layout_, lr, pool);
    return ok_status();
  }
  shard_params_.assign(params.begin() + shard_.begin, params.begin() + shard_.end);
  shard_grads_.assign(grads.begin() + shard_.begin, grads.begin() + shard_.end);
  opt_.step(shard_params_, shard_grads_, layout_, lr, pool);
  std::copy(shard_params_.begin(), shard_params_.end(), params.begin() + shard_.begin);
  return comm_->allgather(params.data(), shard_sizes_, "allgather params");
}

Status DistributedAdamW::with_full_state(const std::function<Status(AdamW&)>& use) {
  if (zero_stage_ == 0) return use(opt_);
  AdamW full(config_, num_params_);
  full.set_steps(opt_.steps());
  std::copy(opt_.m().begin(), opt_.m().end(), full.m().begin() + shard_.begin);
  std::copy(opt_.v().begin(), opt_.v().end(), full.v().begin() + shard_.begin);
  KOI_RETURN_IF_ERROR(comm_->allgather(full.m().data(), shard_sizes_, "allgather adam m"));
  KOI_RETURN_IF_ERROR(comm_->allgather(full.v().data(), shard_sizes_, "allgather adam v"));
  return use(full);
}

void DistributedAdamW::load_full_state(AdamW& full) {
  KOI_CHECK(static_cast<int64_t>(full.m().size()) == num_params_);
  opt_.set_steps(full.steps());
  std::copy(full.m().begin() + shard_.begin, full.m().begin() + shard_.end, opt_.m().begin());
  std::copy(full.v().begin() + shard_.begin, full.v().begin() + shard_.end, opt_.v().begin());
}

StragglerDetector::StragglerDetector(int ranks, double ratio, int consecutive)
    : ratio_(ratio), consecutive_(consecutive), streak_(ranks, 0) {}

double StragglerDetector::median(std::vector<double> values) {
  KOI_CHECK(!values.empty());
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::vector<int> StragglerDetector::observe(const std::vector<double>& step_ms) {
  KOI_CHECK(step_ms.size() == streak_.size());
  const double limit = ratio_ * median(step_ms);
  std::vector<int> flagged;
  for (size_t r = 0; r < streak_.size(); ++r) {
    streak_[r] = step_ms[r] > limit ? streak_[r] + 1 : 0;
    if (streak_[r] == consecutive_) flagged.push_back(static_cast<int>(r));
  }
  return flagged;
}

}  // namespace koi::train

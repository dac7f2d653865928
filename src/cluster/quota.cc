#include "cluster/quota.h"

#include <fmt/format.h>

#include <algorithm>

namespace koi::cluster {
namespace {

constexpr int kCpu = 0, kMemory = 1, kGpu = 2, kFirstGpuType = 3;

std::string amount_text(int resource, int64_t amount) {
  if (resource == kCpu) return fmt::format("{:g} CPU", amount / 1000.0);
  if (resource == kMemory) return fmt::format("{} MiB memory", amount);
  return fmt::format("{:g} GPU", amount / 1000.0);
}

}  // namespace

QuotaBook::QuotaBook(const Cluster& cluster, const std::vector<RunningJob>& running)
    : cluster_(&cluster), resources_(kFirstGpuType + static_cast<int>(cluster.gpu_types.size())) {
  size_t queues = cluster.queues.size();
  usage_.assign(queues, std::vector<int64_t>(resources_, 0));
  quota_.assign(queues, std::vector<const Quota*>(resources_, nullptr));
  typed_.assign(queues, 0);
  for (size_t q = 0; q < queues; ++q) {
    for (const auto& [name, quota] : cluster.queues[q].quota) {
      int r = resource_id(name);
      if (r == kNone) continue;  // a GPU type no node has: nothing to charge against
      quota_[q][r] = &quota;
      if (r >= kFirstGpuType) typed_[q] = 1;
    }
  }
  capacity_.assign(3, 0);
  for (const NodeSpec& n : cluster.nodes) {
    capacity_[kCpu] += n.cpu_milli;
    capacity_[kMemory] += n.memory_mib;
    capacity_[kGpu] += static_cast<int64_t>(n.gpu_count) * kGpuMilli;
  }
  for (const RunningJob& r : running) {
    for (const Placement& p : r.replicas) add(r.job, 1, cluster.node_gpu_type[p.node], +1);
  }
}

int QuotaBook::resource_id(const std::string& name) const {
  if (name == "cpu") return kCpu;
  if (name == "memory") return kMemory;
  if (name == "gpu") return kGpu;
  if (name.rfind("gpu/", 0) == 0) {
    int type = cluster_->gpu_type_id(name.substr(4));
    return type == kNone ? kNone : kFirstGpuType + type;
  }
  return kNone;
}

std::string QuotaBook::resource_name(int resource) const {
  if (resource == kCpu) return "cpu";
  if (resource == kMemory) return "memory";
  if (resource == kGpu) return "gpu";
  return "gpu/" + cluster_->gpu_types[resource - kFirstGpuType];
}

std::vector<std::pair<int, int64_t>> QuotaBook::amounts(const Job& job, int replicas, int gpu_type) const {
  const Request& r = job.request;
  std::vector<std::pair<int, int64_t>> out = {{kCpu, r.cpu_milli * replicas},
                                              {kMemory, r.memory_mib * replicas}};
  if (r.gpus > 0) {
    out.push_back({kGpu, r.gpu_milli_total() * replicas});
    if (gpu_type != kNone) out.push_back({kFirstGpuType + gpu_type, r.gpu_milli_total() * replicas});
  }
  return out;
}

bool QuotaBook::check(int queue, int resource, int64_t extra, std::string* why) const {
  const Quota* quota = quota_[queue][resource];
  if (!quota || extra == 0) return true;
  int64_t used = usage_[queue][resource] + extra;
  if (used <= quota->nominal) return true;
  const std::string& name = cluster_->queues[queue].name;
  int cohort = cluster_->queue_cohort[queue];
  if (cohort == kNone) {
    if (why) *why = fmt::format("queue '{}' would use {} of {} nominal {} quota and has no cohort to borrow from",
                                name, amount_text(resource, used), amount_text(resource, quota->nominal),
                                resource_name(resource));
    return false;
  }
  if (quota->borrowing_limit >= 0 && used - quota->nominal > quota->borrowing_limit) {
    if (why) *why = fmt::format("queue '{}' would borrow {} {}, over its borrowing limit of {}", name,
                                amount_text(resource, used - quota->nominal), resource_name(resource),
                                amount_text(resource, quota->borrowing_limit));
    return false;
  }
  int64_t borrowed = 0, lendable = 0;
  for (size_t c = 0; c < cluster_->queues.size(); ++c) {
    const Quota* cq = quota_[c][resource];
    if (cluster_->queue_cohort[c] != cohort || !cq) continue;
    int64_t u = usage_[c][resource] + (static_cast<int>(c) == queue ? extra : 0);
    borrowed += std::max<int64_t>(0, u - cq->nominal);
    int64_t unused = std::max<int64_t>(0, cq->nominal - u);
    if (static_cast<int>(c) != queue) lendable += cq->lending_limit >= 0 ? std::min(unused, cq->lending_limit) : unused;
  }
  if (borrowed > lendable) {
    if (why) *why = fmt::format("queue '{}' would borrow {} {} but cohort '{}' has only {} unused to lend",
                                name, amount_text(resource, used - quota->nominal), resource_name(resource),
                                cluster_->queues[queue].cohort, amount_text(resource, lendable));
    return false;
  }
  return true;
}

bool QuotaBook::admits(const Job& job, int replicas, int gpu_type, std::string* why) const {
  if (gpu_type != kNone && job.request.gpus > 0 && !type_open(job.queue, gpu_type)) {
    if (why) *why = fmt::format("queue '{}' has no quota for GPU type {}", cluster_->queues[job.queue].name,
                                cluster_->gpu_types[gpu_type]);
    return false;
  }
  for (const auto& [resource, amount] : amounts(job, replicas, gpu_type)) {
    if (!check(job.queue, resource, amount, why)) return false;
  }
  return true;
}

bool QuotaBook::within_nominal(const Job& job, int replicas, int gpu_type) const {
  for (const auto& [resource, amount] : amounts(job, replicas, gpu_type)) {
    const Quota* quota = quota_[job.queue][resource];
    if (quota && usage_[job.queue][resource] + amount > quota->nominal) return false;
  }
  return true;
}

bool QuotaBook::borrowing(int queue) const {
  for (int r = 0; r < resources_; ++r) {
    if (quota_[queue][r] && usage_[queue][r] > quota_[queue][r]->nominal) return true;
  }
  return false;
}

bool QuotaBook::has_quota(int queue) const {
  for (int r = 0; r < resources_; ++r) {
    if (quota_[queue][r]) return true;
  }
  return false;
}

bool QuotaBook::type_open(int queue, int gpu_type) const {
  return !typed_[queue] || quota_[queue][kFirstGpuType + gpu_type] != nullptr;
}

void QuotaBook::add(const Job& job, int replicas, int gpu_type, int sign) {
  for (const auto& [resource, amount] : amounts(job, replicas, gpu_type)) {
    usage_[job.queue][resource] += sign * amount;
  }
}

double QuotaBook::dominant_share(int queue) const {
  double share = 0;
  for (int r = kCpu; r <= kGpu; ++r) {
    if (capacity_[r] > 0) share = std::max(share, static_cast<double>(usage_[queue][r]) / capacity_[r]);
  }
  return share;
}

int64_t QuotaBook::usage(int queue, const std::string& resource) const {
  int r = resource_id(resource);
  return r == kNone ? 0 : usage_[queue][r];
}

}  // namespace koi::cluster

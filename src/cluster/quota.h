// QuotaBook: per-queue resource usage against Kueue-style quotas.
//
// Each queue has a nominal quota per resource ("cpu", "memory", "gpu", "gpu/<TYPE>"); within a
// cohort a queue may borrow other members' unused nominal quota, up to its borrowing limit and
// their lending limits. A queue without a quota entry for a resource is unlimited in it. Once
// a queue has any "gpu/<TYPE>" entry, GPU types it has no entry for are closed to it.
// The book is a value: copy it to explore "what if"; add() is the only mutator.
#pragma once

#include <string>
#include <vector>

#include "cluster/types.h"

namespace koi::cluster {

class QuotaBook {
 public:
  QuotaBook(const Cluster& cluster, const std::vector<RunningJob>& running);

  // Whether `replicas` more replicas of `job` on GPU type `gpu_type` (kNone for CPU-only or
  // "not yet known") stay within quota; if not, *why says which limit, in words.
  bool admits(const Job& job, int replicas, int gpu_type, std::string* why) const;
  // Whether the queue would stay within its nominal quota (so it may reclaim lent capacity).
  bool within_nominal(const Job& job, int replicas, int gpu_type) const;
  // Whether the queue uses more than its nominal quota of some resource.
  bool borrowing(int queue) const;
  // Whether the queue has a quota at all, and whether what it runs is guaranteed: it has a
  // quota and stays within nominal. Another queue's job never preempts guaranteed work.
  bool has_quota(int queue) const;
  bool guaranteed(int queue) const { return has_quota(queue) && !borrowing(queue); }
  // Whether the queue may use GPUs of this type at all.
  bool type_open(int queue, int gpu_type) const;
  // Charges (sign = +1) or releases (sign = -1) replicas of a job on a GPU type.
  void add(const Job& job, int replicas, int gpu_type, int sign);
  // DRF: the queue's largest share of any cluster resource (cpu, memory, gpu).
  double dominant_share(int queue) const;
  int64_t usage(int queue, const std::string& resource) const;

 private:
  int resource_id(const std::string& name) const;
  std::string resource_name(int resource) const;
  // Amount of each resource for `replicas` replicas of `job` on `gpu_type`.
  std::vector<std::pair<int, int64_t>> amounts(const Job& job, int replicas, int gpu_type) const;
  bool check(int queue, int resource, int64_t extra, std::string* why) const;

  const Cluster* cluster_;
  int resources_;                           // 3 + number of GPU types
  std::vector<std::vector<int64_t>> usage_;  // [queue][resource]
  std::vector<std::vector<const Quota*>> quota_;  // [queue][resource], null: unlimited
  std::vector<char> typed_;                 // queue has per-type GPU quota
  std::vector<int64_t> capacity_;           // cluster totals of cpu, memory, gpu
};

}  // namespace koi::cluster
